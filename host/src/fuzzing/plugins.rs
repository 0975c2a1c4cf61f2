//! A plugin's answers at the WIT boundary, as the host checks and passes
//! them on: a JSON-RPC result or error, an HTTP response, a gRPC status.
//! The first byte picks which; the rest is the plugin's answer.

use serde_json::value::RawValue;
use serde_json::{json, Value};

use map_plugin_host::{check_error, check_result, json_depth, HttpResponse, MAX_JSON_DEPTH};
use map_protocol::rpc::{encode_error, encode_result_json};

/// The size limit the checks apply.
const MAX: usize = 1 << 16;

pub fn result(data: &[u8]) {
    let Some((kind, rest)) = data.split_first() else { return };
    match kind % 4 {
        0 => rpc_result(&String::from_utf8_lossy(rest)),
        1 => rpc_error(rest),
        2 => http_response(rest),
        _ => grpc_status(rest),
    }
}

/// The depth of a JSON tree, as `json_depth` counts it.
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A result the host takes is JSON within the limits, and the answer it
/// writes around it is JSON holding the same value.
fn rpc_result(text: &str) {
    let tree = serde_json::from_str::<Value>(text).ok();
    if let Some(t) = &tree {
        assert_eq!(json_depth(text), depth(t), "json_depth miscounts {text}");
    }
    let Ok(raw) = check_result(text.to_string(), MAX) else { return };
    assert!(text.len() <= MAX && json_depth(text) <= MAX_JSON_DEPTH);
    let answer = encode_result_json(&json!(1), raw.get());
    // JSON's grammar allows a lone surrogate (`"\ud800"`), which serde_json's
    // tree refuses: such a result is only checked to be JSON.
    let Some(t) = tree else {
        serde_json::from_str::<&RawValue>(&answer).expect("the answer is JSON");
        return;
    };
    let answer: Value = serde_json::from_str(&answer).expect("the answer is JSON");
    assert_eq!(answer["result"], t, "the result changed on its way");
}

/// An error the host keeps has a code the plugin may use, and its answer is JSON.
fn rpc_error(rest: &[u8]) {
    let Some((code, text)) = rest.split_first_chunk::<8>() else { return };
    let code = i64::from_le_bytes(*code);
    let text = String::from_utf8_lossy(text);
    let (message, data) = match text.split_once('\0') {
        Some((m, d)) => (m.to_string(), Some(d.to_string())),
        None => (text.to_string(), None),
    };
    let range = (92000, 92999);
    let Ok(err) = check_error(code, message.clone(), data, range, MAX) else { return };
    assert!((-32700..=-32600).contains(&code) || (range.0..=range.1).contains(&code), "kept code {code}");
    let answer: Value = serde_json::from_str(&encode_error(&json!(1), &err)).expect("the answer is JSON");
    assert_eq!(answer["error"]["code"], json!(code));
    assert_eq!(answer["error"]["message"], json!(message));
}

/// Status (two bytes), header lines `name:value` up to an empty line, then the body.
fn http_response(rest: &[u8]) {
    let Some((status, rest)) = rest.split_first_chunk::<2>() else { return };
    let status = u16::from_le_bytes(*status);
    let text = String::from_utf8_lossy(rest);
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let headers: Vec<(String, String)> = head.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let given = headers.len();
    let resp = crate::transport::plugin_http::plugin_response(HttpResponse { status, headers, body: body.as_bytes().to_vec() });
    let expected = hyper::StatusCode::from_u16(status).map_or(500, |s| s.as_u16());
    assert_eq!(resp.status().as_u16(), expected);
    assert!(resp.headers().len() <= given);
}

/// Code (four bytes) and message: sent as trailers a client can read.
fn grpc_status(rest: &[u8]) {
    let Some((code, message)) = rest.split_first_chunk::<4>() else { return };
    let status = map_plugin_host::GrpcStatus { code: u32::from_le_bytes(*code), message: String::from_utf8_lossy(message).into_owned() };
    let resp = crate::transport::grpc::to_tonic(status).into_http::<tonic::body::Body>();
    let sent = resp.headers().get("grpc-status").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u32>().ok());
    assert!(sent.is_some_and(|c| c <= 16), "grpc-status {sent:?}");
}
