//! The JSON-RPC binding over HTTP: one request object per POST, answered
//! with a JSON-RPC response (or an SSE stream of them), with A2A's codes and
//! each error's `google.rpc.ErrorInfo` in `error.data` (A2A §9.5).

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
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
pub const VERSION_NOT_SUPPORTED: i64 = -32009;

/// The `domain` of every `google.rpc.ErrorInfo` the bridge gives.
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";

/// An A2A error, answered as the JSON-RPC `error` member.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub code: i64,
    pub message: String,
    /// The ErrorInfo's `metadata` (string values), such as the task's id.
    pub meta: Vec<(&'static str, String)>,
}

impl Fault {
    pub fn new(code: i64, message: impl Into<String>) -> Fault {
        Fault { code, message: message.into(), meta: vec![] }
    }
    pub fn params(message: impl Into<String>) -> Fault {
        Fault::new(INVALID_PARAMS, message)
    }
    pub fn task_not_found(id: &str) -> Fault {
        Fault::new(TASK_NOT_FOUND, format!("task {id} not found")).with("taskId", id)
    }
    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Fault {
        self.meta.push((key, value.into()));
        self
    }

    /// The ErrorInfo `reason` of this code (A2A §5.4: the error's name in
    /// upper snake case, without `Error`).
    pub fn reason(&self) -> &'static str {
        match self.code {
            TASK_NOT_FOUND => "TASK_NOT_FOUND",
            TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
            -32003 => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
            CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
            -32006 => "INVALID_AGENT_RESPONSE",
            EXTENDED_CARD_NOT_CONFIGURED => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            -32008 => "EXTENSION_SUPPORT_REQUIRED",
            VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
            INVALID_PARAMS => "INVALID_PARAMS",
            METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
            INVALID_REQUEST | PARSE_ERROR => "INVALID_REQUEST",
            _ => "INTERNAL_ERROR",
        }
    }

    /// The error's details: one `google.rpc.ErrorInfo` (ProtoJSON `Any`).
    pub fn details(&self) -> Value {
        let meta: serde_json::Map<String, Value> = self.meta.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": self.reason(), "domain": ERROR_DOMAIN, "metadata": meta}])
    }
    pub fn store(e: map_plugin_sdk::Error) -> Fault {
        Fault::new(INTERNAL, format!("the task store failed: {}", e.message()))
    }
}

/// The A2A version whose behaviour a request gets (its `A2A-Version`;
/// A2A §3.6.2: an empty or missing value means 0.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V03,
}

/// A parsed request: its id, method, params (an object) and version.
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Value,
    pub version: Version,
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The version a request asks for: the `A2A-Version` header, else the
/// `A2A-Version` query parameter (A2A §3.6.1); only `Major.Minor` counts.
pub fn version(req: &HttpRequest) -> Result<Version, Fault> {
    let query = req.query.split('&').find_map(|kv| kv.strip_prefix("A2A-Version=").or_else(|| kv.strip_prefix("a2a-version=")));
    let v = header(req, "a2a-version").or(query).map(str::trim).unwrap_or_default();
    let mut parts = v.split('.');
    match (parts.next(), parts.next()) {
        (Some(""), None) | (Some("0"), Some("3")) => Ok(Version::V03),
        (Some("1"), Some("0")) => Ok(Version::V1),
        _ => {
            Err(Fault::new(VERSION_NOT_SUPPORTED, format!("A2A-Version {v} is not supported; this bridge speaks {PROTOCOL_VERSION} and 0.3"))
                .with("version", v))
        }
    }
}

/// Whether a request's body is declared JSON (or not declared at all).
pub fn is_json(req: &HttpRequest) -> bool {
    header(req, "content-type").is_none_or(|c| {
        let media = c.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        media == "application/json" || media.ends_with("+json")
    })
}

/// Checks in order: size (413), media type (415, -32005), version header
/// (-32009), JSON (-32700), envelope (-32600). The `Err` is the whole
/// answer. A request without `id` is checked and answered as one with
/// `"id": null`, as the official SDKs do (A2A requests always carry an id).
pub fn parse(req: &HttpRequest, max_bytes: usize) -> Result<Request, HttpResponse> {
    if req.body.len() > max_bytes {
        let f = Fault::new(INVALID_REQUEST, format!("the request is {} bytes; the limit is {max_bytes}", req.body.len()));
        return Err(answer(413, &Value::Null, Err(f)));
    }
    if !is_json(req) {
        let f = Fault::new(CONTENT_TYPE_NOT_SUPPORTED, "a JSON-RPC request's Content-Type is application/json");
        return Err(answer(415, &Value::Null, Err(f)));
    }
    let doc: Value = serde_json::from_slice(&req.body).map_err(|e| answer(200, &Value::Null, Err(Fault::new(PARSE_ERROR, format!("not JSON: {e}")))))?;
    let id = match doc.get("id") {
        Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
        _ => Value::Null,
    };
    let version = version(req).map_err(|f| answer(200, &id, Err(f)))?;
    let bad = |m: &str| answer(200, &id, Err(Fault::new(INVALID_REQUEST, m)));
    let o = doc.as_object().ok_or_else(|| bad("the request must be one JSON-RPC object (batches are not supported)"))?;
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(bad("jsonrpc must be \"2.0\""));
    }
    if !matches!(o.get("id"), None | Some(Value::Null | Value::String(_) | Value::Number(_))) {
        return Err(bad("id must be a string or a number"));
    }
    let method = o.get("method").and_then(Value::as_str).ok_or_else(|| bad("method must be a string"))?.to_string();
    let params = match o.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => crate::names::camel(p),
        Some(_) => return Err(answer(200, &id, Err(Fault::params("params must be an object")))),
    };
    Ok(Request { id, method, params, version })
}

pub fn envelope(id: &Value, result: Result<Value, Fault>) -> Value {
    match result {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err(f) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": f.code, "message": f.message, "data": f.details()}}),
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

/// `historyLength`: any non-negative integer (A2A §3.2.4 sets no bound;
/// more than the task holds gives all of it).
pub fn history_length(params: &Value) -> Result<Option<usize>, Fault> {
    match params.get("historyLength") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            v.as_u64().map(|n| Some(usize::try_from(n).unwrap_or(usize::MAX))).ok_or_else(|| Fault::params("historyLength must be a non-negative integer"))
        }
    }
}

pub fn flag(params: &Value, field: &str) -> Result<bool, Fault> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Fault::params(format!("{field} must be a boolean"))),
    }
}
