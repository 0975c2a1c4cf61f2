//! The smoke pass of the host's fuzz targets (`map_gateway::fuzzing`):
//! each over its corpus, its regressions and a few thousand mutated seeds
//! (see `tests/fuzz-smoke`). The long runs are `scripts/fuzz.sh`.

use fuzz_smoke::smoke;
use map_gateway::fuzzing::{target, TARGETS};

fn run(name: &str, cases: u32) {
    smoke(name, target(name).expect("a target"), cases);
}

#[test]
fn every_target_has_a_smoke_test() {
    let tested = ["jsonrpc_frame", "ndjson_lines", "websocket_frames", "http_connection", "address", "map_send", "acp_bridge", "plugin_result"];
    assert_eq!(TARGETS.iter().map(|(n, _)| *n).collect::<Vec<_>>(), tested);
}

#[test]
fn jsonrpc_frame() {
    run("jsonrpc_frame", 4000);
}

#[test]
fn ndjson_lines() {
    run("ndjson_lines", 3000);
}

#[test]
fn websocket_frames() {
    run("websocket_frames", 3000);
}

#[test]
fn http_connection() {
    run("http_connection", 1000);
}

#[test]
fn address() {
    run("address", 4000);
}

#[test]
fn map_send() {
    run("map_send", 2000);
}

#[test]
fn acp_bridge() {
    run("acp_bridge", 1000);
}

#[test]
fn plugin_result() {
    run("plugin_result", 4000);
}
