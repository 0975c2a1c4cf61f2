//! Fuzz targets: each decoder of untrusted bytes as a plain function of
//! those bytes that panics when the decoder breaks its contract (a panic of
//! its own, an answer that is not the protocol's, a value that does not
//! survive re-encoding). The libFuzzer targets in `fuzz/` and the smoke
//! pass in `host/tests/all/fuzz_smoke.rs` call these same functions.

mod acp;
mod address;
mod frames;
mod http;
mod plugins;
mod runtime;
mod send;

/// Every target, by the name its libFuzzer target and corpus directory have.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("jsonrpc_frame", frames::jsonrpc_frame),
    ("ndjson_lines", frames::ndjson_lines),
    ("websocket_frames", frames::websocket_frames),
    ("http_connection", http::connection),
    ("address", address::address),
    ("map_send", send::map_send),
    ("acp_bridge", acp::bridge),
    ("plugin_result", plugins::result),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
