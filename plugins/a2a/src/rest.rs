//! The HTTP+JSON binding (A2A §11) at an agent's `<base>/agents/<id>/rest`:
//! its paths are routed to the same methods the JSON-RPC binding serves
//! ([`methods`]), over the same tasks; their answers are given back as
//! REST's (the result itself, or a `google.rpc.Status` error with the HTTP
//! status of A2A §5.4; streams as SSE of bare StreamResponses).

use map_plugin_sdk::{HttpRequest, HttpResponse};
use serde_json::{json, Map, Value};

use crate::cards::PROTOCOL_VERSION;
use crate::jsonrpc::{self, Fault, Request, Version};
use crate::methods;
use crate::settings::Settings;

/// The HTTP status and `google.rpc.Code` name of an A2A error (A2A §5.4).
fn status(code: i64) -> (u16, &'static str) {
    match code {
        jsonrpc::TASK_NOT_FOUND | jsonrpc::METHOD_NOT_FOUND => (404, "NOT_FOUND"),
        jsonrpc::INVALID_PARAMS | jsonrpc::INVALID_REQUEST | jsonrpc::PARSE_ERROR | jsonrpc::CONTENT_TYPE_NOT_SUPPORTED => (400, "INVALID_ARGUMENT"),
        -32006 | jsonrpc::INTERNAL => (500, "INTERNAL"),
        _ => (400, "FAILED_PRECONDITION"),
    }
}

/// An A2A error as REST answers it: `{"error": google.rpc.Status}`.
pub fn error(f: &Fault) -> HttpResponse {
    error_body(f.code, &f.message, f.details())
}

fn error_body(code: i64, message: &str, details: Value) -> HttpResponse {
    let (http, name) = status(code);
    let mut r = HttpResponse::json(http, &json!({"error": {"code": http, "status": name, "message": message, "details": details}}));
    r.headers.push(("a2a-version".into(), PROTOCOL_VERSION.into()));
    r
}

/// The query string's parameters (URL-decoded), as params.
fn query(q: &str) -> Map<String, Value> {
    form_urlencoded::parse(q.as_bytes()).filter(|(k, _)| k != "A2A-Version").map(|(k, v)| (k.into_owned(), Value::String(v.into_owned()))).collect()
}

/// Query values are strings: numbers and booleans as ProtoJSON reads them (A2A §11.5).
fn typed(mut p: Map<String, Value>, numbers: &[&str], flags: &[&str]) -> Result<Value, Fault> {
    for k in numbers {
        if let Some(Value::String(v)) = p.get(*k) {
            let n: u64 = v.parse().map_err(|_| Fault::params(format!("{k} must be a non-negative integer")))?;
            p.insert(k.to_string(), json!(n));
        }
    }
    for k in flags {
        if let Some(Value::String(v)) = p.get(*k) {
            let b = matches!(v.as_str(), "true" | "1");
            p.insert(k.to_string(), json!(b));
        }
    }
    Ok(Value::Object(p))
}

fn segment(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// The body as params (an object; none is `{}`).
fn body(req: &HttpRequest) -> Result<Value, Fault> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(&req.body) {
        Ok(v @ Value::Object(_)) => Ok(crate::names::camel(&v)),
        Ok(_) => Err(Fault::new(jsonrpc::INVALID_REQUEST, "the body must be a JSON object")),
        Err(e) => Err(Fault::new(jsonrpc::PARSE_ERROR, format!("not JSON: {e}"))),
    }
}

/// The method and params a REST request stands for (A2A §5.3).
fn route(req: &HttpRequest, path: &str) -> Result<(&'static str, Value), Fault> {
    let q = || query(&req.query);
    let with = |mut p: Value, k: &str, v: String| {
        p[k] = json!(v);
        p
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let task_op = |s: &str, op: &str| s.strip_suffix(op).filter(|t| !t.is_empty()).map(segment);
    Ok(match (req.method.as_str(), parts.as_slice()) {
        ("POST", ["message:send"]) => ("SendMessage", body(req)?),
        ("POST", ["message:stream"]) => ("SendStreamingMessage", body(req)?),
        ("GET", ["tasks"]) => ("ListTasks", typed(q(), &["pageSize", "historyLength"], &["includeArtifacts"])?),
        ("GET", ["extendedAgentCard"]) => ("GetExtendedAgentCard", json!({})),
        ("POST", ["tasks", t]) if task_op(t, ":cancel").is_some() => ("CancelTask", with(body(req)?, "id", task_op(t, ":cancel").unwrap_or_default())),
        ("POST" | "GET", ["tasks", t]) if task_op(t, ":subscribe").is_some() => ("SubscribeToTask", json!({"id": task_op(t, ":subscribe")})),
        ("GET", ["tasks", id]) => ("GetTask", with(typed(q(), &["historyLength"], &[])?, "id", segment(id))),
        ("POST", ["tasks", id, "pushNotificationConfigs"]) => ("CreateTaskPushNotificationConfig", with(body(req)?, "taskId", segment(id))),
        ("GET", ["tasks", id, "pushNotificationConfigs"]) => ("ListTaskPushNotificationConfigs", with(typed(q(), &["pageSize"], &[])?, "taskId", segment(id))),
        ("GET", ["tasks", id, "pushNotificationConfigs", c]) => ("GetTaskPushNotificationConfig", json!({"taskId": segment(id), "id": segment(c)})),
        ("DELETE", ["tasks", id, "pushNotificationConfigs", c]) => ("DeleteTaskPushNotificationConfig", json!({"taskId": segment(id), "id": segment(c)})),
        _ => return Err(Fault::new(jsonrpc::METHOD_NOT_FOUND, format!("no A2A operation {} {path}", req.method))),
    })
}

/// Serve one REST request for agent `agent`; `path` is below `<id>/rest`.
pub fn handle(agent: &str, req: &HttpRequest, path: &str, s: &Settings) -> HttpResponse {
    if req.body.len() > s.max_request_bytes {
        let mut r = error(&Fault::new(jsonrpc::INVALID_REQUEST, format!("the request is {} bytes; the limit is {}", req.body.len(), s.max_request_bytes)));
        r.status = 413;
        return r;
    }
    // A body of another media type is HTTP's 415 (A2A §5.4's 400 is for the media types of parts).
    if !req.body.is_empty() && !jsonrpc::is_json(req) {
        let mut r = error(&Fault::new(jsonrpc::CONTENT_TYPE_NOT_SUPPORTED, "the body's Content-Type is application/json or application/a2a+json"));
        r.status = 415;
        return r;
    }
    // The paths are A2A 1.0's; a request of another version gets VersionNotSupported.
    match jsonrpc::version(req) {
        Ok(Version::V1) => {}
        Ok(Version::V03) => {
            return error(&Fault::new(jsonrpc::VERSION_NOT_SUPPORTED, "the HTTP+JSON binding is served for A2A 1.0: send A2A-Version: 1.0 (none means 0.3)"));
        }
        Err(f) => return error(&f),
    }
    let (method, params) = match route(req, path) {
        Ok(r) => r,
        Err(f) => return error(&f),
    };
    let answer = methods::handle(agent, Request { id: Value::Null, method: method.into(), params, version: Version::V1 }, s);
    rest_answer(answer, method == "DeleteTaskPushNotificationConfig")
}

/// A JSON-RPC answer (a response, or an SSE stream of them) as REST's.
fn rest_answer(r: HttpResponse, empty: bool) -> HttpResponse {
    let is_sse = r.headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream"));
    if !is_sse {
        let doc: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        return match doc.get("error") {
            Some(e) => error_body(e["code"].as_i64().unwrap_or(jsonrpc::INTERNAL), e["message"].as_str().unwrap_or_default(), e["data"].clone()),
            None => {
                let mut ok = HttpResponse::json(200, if empty { &Value::Null } else { &doc["result"] });
                if empty {
                    ok.body = b"{}".to_vec();
                }
                ok.headers.push(("a2a-version".into(), PROTOCOL_VERSION.into()));
                ok
            }
        };
    }
    // Each event holds its StreamResponse bare; an error ends the stream as REST's error object,
    // and one before any event is the answer itself.
    let text = String::from_utf8_lossy(&r.body);
    let events: Vec<Value> = text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|l| serde_json::from_str(l).unwrap_or_default()).collect();
    if let [doc] = events.as_slice() {
        if let Some(e) = doc.get("error") {
            return error_body(e["code"].as_i64().unwrap_or(jsonrpc::INTERNAL), e["message"].as_str().unwrap_or_default(), e["data"].clone());
        }
    }
    let mut body = String::new();
    for doc in events {
        let event = match doc.get("error") {
            Some(e) => {
                let (http, name) = status(e["code"].as_i64().unwrap_or(jsonrpc::INTERNAL));
                json!({"error": {"code": http, "status": name, "message": e["message"], "details": e["data"]}})
            }
            None => doc["result"].clone(),
        };
        body.push_str(&format!("data: {event}\n\n"));
    }
    HttpResponse { status: r.status, headers: r.headers, body: body.into_bytes() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, path: &str, query: &str, body: &str) -> (HttpRequest, String) {
        let r = HttpRequest { method: method.into(), path: path.into(), query: query.into(), headers: vec![], body: body.as_bytes().to_vec() };
        (r, path.to_string())
    }

    #[test]
    fn paths_name_the_methods_of_a2a_5_3() {
        let cases = [
            (("POST", "/message:send", "", r#"{"message": {"message_id": "m"}}"#), "SendMessage", json!({"message": {"messageId": "m"}})),
            (("GET", "/tasks/t%2D1", "historyLength=2", ""), "GetTask", json!({"id": "t-1", "historyLength": 2})),
            (
                ("GET", "/tasks", "contextId=c&pageSize=5&includeArtifacts=true", ""),
                "ListTasks",
                json!({"contextId": "c", "pageSize": 5, "includeArtifacts": true}),
            ),
            (("POST", "/tasks/t:cancel", "", ""), "CancelTask", json!({"id": "t"})),
            (("POST", "/tasks/t:subscribe", "", ""), "SubscribeToTask", json!({"id": "t"})),
            (
                ("POST", "/tasks/t/pushNotificationConfigs", "", r#"{"url": "https://h/x"}"#),
                "CreateTaskPushNotificationConfig",
                json!({"url": "https://h/x", "taskId": "t"}),
            ),
            (("GET", "/tasks/t/pushNotificationConfigs/p", "", ""), "GetTaskPushNotificationConfig", json!({"taskId": "t", "id": "p"})),
            (("DELETE", "/tasks/t/pushNotificationConfigs/p", "", ""), "DeleteTaskPushNotificationConfig", json!({"taskId": "t", "id": "p"})),
        ];
        for ((m, p, q, b), method, params) in cases {
            let (r, path) = req(m, p, q, b);
            assert_eq!(route(&r, &path).unwrap(), (method, params), "{m} {p}");
        }
        let (r, path) = req("PUT", "/tasks/t", "", "");
        assert_eq!(route(&r, &path).unwrap_err().code, jsonrpc::METHOD_NOT_FOUND);
        assert_eq!(status(jsonrpc::TASK_NOT_FOUND), (404, "NOT_FOUND"));
        assert_eq!(status(jsonrpc::TASK_NOT_CANCELABLE), (400, "FAILED_PRECONDITION"));
    }
}
