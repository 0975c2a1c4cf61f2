//! The JSON-RPC binding over HTTP: one request object per POST, answered
//! with a JSON-RPC response (or an SSE stream of them), with A2A's codes.

use map_plugin_sdk::{HttpRequest, HttpResponse};
use serde_json::{json, Value};

use crate::cards::PROTOCOL_VERSION;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL: i64 = -32603;
pub const TASK_NOT_FOUND: i64 = -32001;
pub const TASK_NOT_CANCELABLE: i64 = -32002;
pub const UNSUPPORTED_OPERATION: i64 = -32004;
pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
pub const VERSION_NOT_SUPPORTED: i64 = -32009;

/// An A2A error, answered as the JSON-RPC `error` member.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub code: i64,
    pub message: String,
}

impl Fault {
    pub fn new(code: i64, message: impl Into<String>) -> Fault {
        Fault { code, message: message.into() }
    }
    pub fn params(message: impl Into<String>) -> Fault {
        Fault::new(INVALID_PARAMS, message)
    }
    pub fn task_not_found(id: &str) -> Fault {
        Fault::new(TASK_NOT_FOUND, format!("task {id} not found"))
    }
    pub fn store(e: map_plugin_sdk::Error) -> Fault {
        Fault::new(INTERNAL, format!("the task store failed: {}", e.message()))
    }
}

/// A parsed request: its id, method and params (an object).
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Checks in order: size (413), version header, JSON (-32700), envelope
/// (-32600), params (-32602). The `Err` is the whole answer.
pub fn parse(req: &HttpRequest, max_bytes: usize) -> Result<Request, HttpResponse> {
    if req.body.len() > max_bytes {
        let f = Fault::new(INVALID_REQUEST, format!("the request is {} bytes; the limit is {max_bytes}", req.body.len()));
        return Err(answer(413, &Value::Null, Err(f)));
    }
    let doc: Value = serde_json::from_slice(&req.body).map_err(|e| answer(200, &Value::Null, Err(Fault::new(PARSE_ERROR, format!("not JSON: {e}")))))?;
    let id = match doc.get("id") {
        Some(v @ (Value::String(_) | Value::Number(_) | Value::Null)) => v.clone(),
        _ => Value::Null,
    };
    if let Some(v) = header(req, "a2a-version").map(str::trim).filter(|v| !v.is_empty()) {
        if !["1.0", "0.3"].iter().any(|known| v == *known || v.starts_with(&format!("{known}."))) {
            return Err(answer(
                200,
                &id,
                Err(Fault::new(VERSION_NOT_SUPPORTED, format!("A2A-Version {v} is not supported; this bridge speaks {PROTOCOL_VERSION} and 0.3"))),
            ));
        }
    }
    let bad = |m: &str| answer(200, &id, Err(Fault::new(INVALID_REQUEST, m)));
    let o = doc.as_object().ok_or_else(|| bad("the request must be one JSON-RPC object (batches are not supported)"))?;
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(bad("jsonrpc must be \"2.0\""));
    }
    if !matches!(o.get("id"), Some(Value::String(_) | Value::Number(_))) {
        return Err(bad("id must be a string or a number (notifications are not supported)"));
    }
    let method = o.get("method").and_then(Value::as_str).ok_or_else(|| bad("method must be a string"))?.to_string();
    let params = match o.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err(answer(200, &id, Err(Fault::params("params must be an object")))),
    };
    Ok(Request { id, method, params })
}

pub fn envelope(id: &Value, result: Result<Value, Fault>) -> Value {
    match result {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err(f) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": f.code, "message": f.message}}),
    }
}

pub fn answer(status: u16, id: &Value, result: Result<Value, Fault>) -> HttpResponse {
    let mut r = HttpResponse::json(status, &envelope(id, result));
    r.headers.push(("a2a-version".into(), PROTOCOL_VERSION.into()));
    r
}

/// An SSE body of JSON-RPC responses, one event each.
pub fn sse(id: &Value, events: &[Result<Value, Fault>]) -> HttpResponse {
    let mut body = String::new();
    for e in events {
        body.push_str("data: ");
        body.push_str(&envelope(id, e.clone()).to_string());
        body.push_str("\n\n");
    }
    HttpResponse {
        status: 200,
        headers: vec![
            ("content-type".into(), "text/event-stream".into()),
            ("cache-control".into(), "no-cache".into()),
            ("a2a-version".into(), PROTOCOL_VERSION.into()),
        ],
        body: body.into_bytes(),
    }
}

/// A field of params as an optional non-negative integer at most `max`.
pub fn count(params: &Value, field: &str, max: u64) -> Result<Option<u64>, Fault> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().filter(|n| *n <= max).map(Some).ok_or_else(|| Fault::params(format!("{field} must be an integer from 0 to {max}"))),
    }
}

pub fn flag(params: &Value, field: &str) -> Result<bool, Fault> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Fault::params(format!("{field} must be a boolean"))),
    }
}

/// Params may hold only these keys.
pub fn only(params: &Value, known: &[&str]) -> Result<(), Fault> {
    match params.as_object().and_then(|o| o.keys().find(|k| !known.contains(&k.as_str()))) {
        Some(k) => Err(Fault::params(format!("unknown parameter {k:?}"))),
        None => Ok(()),
    }
}
