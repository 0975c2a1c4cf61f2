//! Frame decoding: a JSON-RPC frame (a WebSocket message, an NDJSON line,
//! an HTTP body), NDJSON lines under a limit (stdio), WebSocket frames as
//! the listener's configuration reads them.

use std::collections::HashSet;

use futures_util::FutureExt;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocket};
use tokio_tungstenite::tungstenite::{Error, Message};

use crate::framing::read_line_limited;
use map_protocol::rpc::{codes, decode_frame, encode_error, encode_result, Decoded, Request, RpcError};

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("the gateway wrote JSON it cannot read ({e}): {text}"))
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_) | Value::Null)
}

/// An error answer carries a valid id, and its text reads back with that id.
fn check_error(id: &Value, e: &RpcError, codes_allowed: &[i64]) {
    assert!(valid_id(id), "error answered with id {id}");
    assert!(codes_allowed.contains(&e.code), "unexpected code {} ({})", e.code, e.message);
    let answer = parse(&encode_error(id, e));
    assert_eq!(&answer["id"], id, "the answer's id is not the request's");
    assert_eq!(answer["error"]["code"], json!(e.code));
}

/// A request agrees with the same JSON read as a tree (when serde_json's
/// tree can hold it: numbers past f64 are accepted in params, unread), and
/// its answer carries its id back unchanged.
fn check_request(req: &Request, tree: Option<&Value>) {
    if let Some(id) = &req.id {
        assert!(valid_id(id));
        assert_eq!(&parse(&encode_result(id, &json!({"ok": true})))["id"], id, "the answer's id is not the request's");
    }
    if let Some(p) = req.params {
        assert!(matches!(p.get().as_bytes()[0], b'{' | b'[' | b'n'), "params {} accepted", p.get());
    }
    let Some(tree) = tree else { return };
    assert_eq!(tree["jsonrpc"], "2.0");
    assert_eq!(tree["method"].as_str(), Some(&*req.method), "method differs from the JSON's");
    assert_eq!(req.id.as_ref(), tree.get("id"), "id differs from the JSON's");
    if let Some(p) = req.params {
        assert_eq!(&parse(p.get()), &tree["params"]);
    }
}

fn check_item(item: &Result<Request, (Value, RpcError)>, text: &str, tree: Option<&Value>) {
    match item {
        Ok(req) => check_request(req, tree),
        Err((id, e)) => {
            assert!(!tree.is_some_and(|t| is_response(text, t)), "a response was answered with an error");
            check_error(id, e, &[codes::INVALID_REQUEST, codes::PARSE_ERROR]);
        }
    }
}

/// Whether a JSON object names a member of the envelope twice: serde_json's
/// tree keeps the last, the decoder refuses the message as an invalid
/// request (other members it ignores, repeated or not).
fn duplicate_keys(text: &str) -> bool {
    struct Keys(bool);
    impl<'de> Visitor<'de> for Keys {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut seen = HashSet::new();
            let mut twice = self.0;
            while let Some(key) = map.next_key::<String>()? {
                let envelope = matches!(key.as_str(), "jsonrpc" | "id" | "method" | "params" | "result" | "error");
                twice |= envelope && !seen.insert(key);
                map.next_value::<IgnoredAny>()?;
            }
            Ok(twice)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_map(&mut de, Keys(false)).unwrap_or(false)
}

/// Whether a message is a JSON-RPC response (which the gateway drops).
fn is_response(text: &str, v: &Value) -> bool {
    let shape =
        v["jsonrpc"] == "2.0" && v.get("id").is_none_or(valid_id) && v.get("method").is_none() && (v.get("result").is_some() || v.get("error").is_some());
    shape && !duplicate_keys(text)
}

/// `decode_frame`: never panics; what it accepts is what the JSON says;
/// every error has the protocol's code and an id a client can match.
pub fn jsonrpc_frame(data: &[u8]) {
    let tree = serde_json::from_slice::<Value>(data).ok();
    let text = std::str::from_utf8(data).unwrap_or_default();
    match decode_frame(data) {
        Decoded::Single(item) => check_item(&item, text, tree.as_ref()),
        Decoded::Batch(items) => {
            assert!(tree.as_ref().is_none_or(Value::is_array), "a batch that is not a JSON array");
            let (Some(Value::Array(all)), Ok(raw)) = (&tree, serde_json::from_str::<Vec<&RawValue>>(text)) else {
                return items.iter().for_each(|i| check_item(i, "", None));
            };
            let requests: Vec<(&Value, &str)> = all.iter().zip(raw.iter().map(|r| r.get())).filter(|(v, t)| !is_response(t, v)).collect();
            assert_eq!(items.len(), requests.len(), "batch items lost or invented");
            for (item, (v, t)) in items.iter().zip(requests) {
                check_item(item, t, Some(v));
            }
        }
        Decoded::Invalid(e) => check_error(&Value::Null, &e, &[codes::PARSE_ERROR, codes::INVALID_REQUEST]),
        Decoded::Ignored => assert!(tree.is_none_or(|t| is_response(text, &t))),
    }
}

/// The stdio transport's line reader: every line is read whole (or
/// reported too long), none is lost or merged, whatever the chunking.
/// The first byte picks the limit, the second the reader's buffer size.
pub fn ndjson_lines(data: &[u8]) {
    let [limit, chunk, input @ ..] = data else { return };
    let limit = *limit as usize % 64;
    let mut reader = tokio::io::BufReader::with_capacity(*chunk as usize % 16 + 1, input);
    let mut expected = input.split_inclusive(|b| *b == b'\n');
    let mut line = Vec::new();
    loop {
        line.clear();
        let (n, too_long) = read_line_limited(&mut reader, &mut line, limit).now_or_never().expect("a slice never waits").expect("a slice reads");
        let Some(want) = expected.next() else {
            assert_eq!(n, 0, "read past the end");
            return;
        };
        let text = want.strip_suffix(b"\n").unwrap_or(want);
        assert_eq!(n, want.len(), "consumed another length than the line's");
        assert_eq!(too_long, text.len() > limit, "line of {} bytes, limit {limit}", text.len());
        if !too_long {
            assert_eq!(line, text);
            jsonrpc_frame(&line);
        }
    }
}

/// Bytes a peer sent after the handshake, and what the server writes back.
struct Wire<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl std::io::Read for Wire<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl std::io::Write for Wire<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// WebSocket frames from a client, read with the listener's configuration;
/// each message is then a JSON-RPC frame.
pub fn websocket_frames(data: &[u8]) {
    let max = 1 << 20;
    let config = crate::transport::ws::socket_config(max);
    let mut ws = WebSocket::from_raw_socket(Wire { input: data, output: Vec::new() }, Role::Server, Some(config));
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => jsonrpc_frame(t.as_bytes()),
            Ok(Message::Binary(b)) => jsonrpc_frame(&b),
            Ok(_) => {}
            Err(e) => {
                let close = crate::transport::ws::close_for(&e);
                assert!(close.is_none() || matches!(e, Error::Utf8 | Error::Capacity(_)));
                return;
            }
        }
    }
}
