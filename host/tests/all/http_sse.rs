//! HTTP transport: `POST /map/rpc` and `/map/batch`, sessions named by the
//! `map-session-id` header, `GET /map/events` as Server-Sent Events, limits,
//! unknown sessions and `/healthz`.

use crate::common;

use common::*;
use serde_json::{json, Value};

/// `map/connect` over POST; returns (session id, connect result).
async fn http_connect(gw: &Gateway, params: Value) -> (String, Value) {
    let resp = post_rpc(&gw.addr(), None, &request(1, "map/connect", params)).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["id"], 1);
    let result = ok(&body).clone();
    let header = resp.header("map-session-id").expect("map/connect over HTTP answers with a map-session-id header").to_string();
    assert_eq!(header, result["sessionId"].as_str().expect("sessionId"), "the header names the session of the result");
    (header, result)
}

async fn http_call(gw: &Gateway, session: &str, id: i64, method: &str, params: Value) -> Value {
    let resp = post_rpc(&gw.addr(), Some(session), &request(id, method, params)).await;
    assert_eq!(resp.status, 200, "{method}: {}", resp.text());
    assert!(resp.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{:?}", resp.headers);
    let body = resp.json();
    assert_eq!(body["id"], id, "{body}");
    body
}

/// HTTP connections open, as `/metrics` counts them (its own request included).
async fn http_connections(gw: &Gateway) -> f64 {
    let text = http(&gw.addr(), "GET", "/metrics", &[], b"").await.text();
    let series = r#"map_connections_open{transport="http"} "#;
    text.lines().find_map(|l| l.strip_prefix(series)).and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("no {series}in:\n{text}"))
}

#[tokio::test]
async fn sse_carries_messages_and_events_of_the_session() {
    let gw = Gateway::start();
    let addr = gw.addr();
    let (session, hello) = http_connect(&gw, json!({"protocolVersion": 1, "participantType": "agent", "name": "http-agent"})).await;
    assert_eq!(hello["protocolVersion"], 1);

    let mut sse = Sse::open(&addr, &session).await;
    assert_eq!(sse.status, 200);
    assert!(sse.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")), "{:?}", sse.headers);

    // Register an agent in the HTTP session.
    let reg = http_call(&gw, &session, 2, "map/agents/register", json!({"agentId": "sse-agent", "role": "listener"})).await;
    assert_eq!(ok(&reg)["agent"]["id"], "sse-agent");
    assert_eq!(ok(&reg)["agent"]["ownerId"], hello["participantId"]);

    // A second session, over WebSocket, sends to it.
    let (mut ws, ws_hello) = gw.ws_connected("client", None).await;
    let sent = ws.call_ok("map/send", json!({"to": {"agent": "sse-agent"}, "payload": {"n": 1}})).await;
    assert_eq!(sent["delivered"], json!(["sse-agent"]));

    let (note, _) = sse.notification("map/message", WAIT).await;
    let note = note.expect("map/message on the SSE stream");
    assert_eq!(note["jsonrpc"], "2.0");
    let m = &note["params"]["message"];
    assert_eq!(m["id"], sent["messageId"]);
    assert_eq!(m["to"], json!({"agent": "sse-agent"}));
    assert_eq!(m["payload"], json!({"n": 1}));
    // The sending session has no agent: `from` is its participant id.
    assert_eq!(m["from"], ws_hello["participantId"]);

    // Subscribe over POST; an event caused elsewhere arrives on SSE.
    let sub = http_call(&gw, &session, 3, "map/subscribe", json!({"filter": {"eventTypes": ["agent_registered"]}})).await;
    let sub_id = ok(&sub)["subscriptionId"].as_str().expect("subscriptionId").to_string();
    ws.call_ok("map/agents/register", json!({"agentId": "ws-agent"})).await;
    let (ev, _) = sse.notification("map/event", WAIT).await;
    let ev = ev.expect("map/event on the SSE stream");
    let p = &ev["params"];
    assert_eq!(p["subscriptionId"], sub_id.as_str());
    assert_eq!(p["sequenceNumber"], 1);
    assert!(p["eventId"].is_string(), "{ev}");
    assert!(p["timestamp"].is_u64(), "{ev}");
    assert_eq!(p["event"]["type"], "agent_registered");
    assert_eq!(p["event"]["data"]["agent"]["id"], "ws-agent");
    assert!(p["event"]["id"].is_string(), "{ev}");

    // A second matching event is numbered 2.
    ws.call_ok("map/agents/register", json!({"agentId": "ws-agent-2"})).await;
    let (ev, _) = sse.notification("map/event", WAIT).await;
    let ev = ev.expect("second map/event");
    assert_eq!(ev["params"]["sequenceNumber"], 2);
    assert_eq!(ev["params"]["event"]["data"]["agent"]["id"], "ws-agent-2");

    // The agents of both sessions are visible from the HTTP session.
    let list = http_call(&gw, &session, 4, "map/agents/list", json!({})).await;
    let ids: Vec<&str> = ok(&list)["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["sse-agent", "ws-agent", "ws-agent-2"]);
}

#[tokio::test]
async fn sse_events_are_spelled_as_the_subscription_names_them() {
    let gw = Gateway::start();
    let (session, _) = http_connect(&gw, json!({"protocolVersion": 1, "participantType": "client"})).await;
    let mut sse = Sse::open(&gw.addr(), &session).await;
    let dotted = http_call(&gw, &session, 2, "map/subscribe", json!({"filter": {"eventTypes": ["agent.registered"]}})).await;
    let dotted = ok(&dotted)["subscriptionId"].as_str().unwrap().to_string();
    let (mut ws, _) = gw.ws_connected("agent", None).await;
    ws.call_ok("map/agents/register", json!({"agentId": "sse-spelled"})).await;
    let (ev, _) = sse.notification("map/event", WAIT).await;
    let ev = ev.expect("map/event on the SSE stream");
    assert_eq!(ev["params"]["subscriptionId"], dotted.as_str());
    assert_eq!(ev["params"]["event"]["type"], "agent.registered", "{ev}");
    assert_eq!(ev["params"]["event"]["data"]["agentId"], "sse-spelled");
}

#[tokio::test]
async fn messages_sent_before_the_stream_opens_wait_for_it() {
    let gw = Gateway::start();
    let (session, _) = http_connect(&gw, json!({"protocolVersion": 1})).await;
    let reg = http_call(&gw, &session, 2, "map/agents/register", json!({"agentId": "late-reader"})).await;
    assert_eq!(ok(&reg)["agent"]["id"], "late-reader");
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let sent = ws.call_ok("map/send", json!({"to": "late-reader", "payload": "queued"})).await;
    assert_eq!(sent["delivered"], json!(["late-reader"]));
    let mut sse = Sse::open(&gw.addr(), &session).await;
    assert_eq!(sse.status, 200);
    let (note, _) = sse.notification("map/message", WAIT).await;
    let note = note.expect("the parked map/message is flushed to the new stream");
    assert_eq!(note["params"]["message"]["payload"], "queued");
    assert_eq!(note["params"]["message"]["id"], sent["messageId"]);
}

#[tokio::test]
async fn post_to_map_batch_and_map_rpc_answer_batches_in_order() {
    let gw = Gateway::start();
    let (session, _) = http_connect(&gw, json!({"protocolVersion": 1})).await;
    let batch = json!([
        request(1, "map/agents/register", json!({"agentId": "b1"})),
        {"jsonrpc": "2.0", "method": "map/agents/list"},
        request("x", "map/agents/get", json!({"agentId": "nope"})),
        request(3, "map/agents/list", json!({})),
    ]);
    for path in ["/map/batch", "/map/rpc"] {
        let resp = post(&gw.addr(), path, Some(&session), batch.to_string().as_bytes()).await;
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
        let body = resp.json();
        let items = body.as_array().unwrap_or_else(|| panic!("{path}: a batch gets an array: {body}"));
        assert_eq!(items.len(), 3, "{path}: {body}");
        assert_eq!(items[0]["id"], 1);
        assert_error(&items[1], &json!("x"), 2001, "routing");
        assert_eq!(items[2]["id"], 3);
        if path == "/map/batch" {
            assert_eq!(ok(&items[0])["agent"]["id"], "b1");
        } else {
            // Registered by the first batch already.
            assert_eq!(err_code(&items[0]), 3000, "{body}");
        }
        let ids: Vec<&str> = ok(&items[2])["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["b1"]);
    }
}

#[tokio::test]
async fn only_notifications_get_202_with_an_empty_body() {
    let gw = Gateway::start();
    let (session, _) = http_connect(&gw, json!({"protocolVersion": 1})).await;
    let resp = post_rpc(&gw.addr(), Some(&session), &json!({"jsonrpc": "2.0", "method": "map/agents/list"})).await;
    assert_eq!(resp.status, 202, "{}", resp.text());
    assert!(resp.body.is_empty(), "{:?}", resp.text());
    let resp = post_rpc(
        &gw.addr(),
        Some(&session),
        &json!([{"jsonrpc": "2.0", "method": "map/agents/list"}, {"jsonrpc": "2.0", "method": "map/agents/register", "params": {"agentId": "quiet"}}]),
    )
    .await;
    assert_eq!(resp.status, 202, "{}", resp.text());
    assert!(resp.body.is_empty(), "{:?}", resp.text());
    // The notification was still carried out.
    let got = http_call(&gw, &session, 5, "map/agents/get", json!({"agentId": "quiet"})).await;
    assert_eq!(ok(&got)["agent"]["id"], "quiet");
}

#[tokio::test]
async fn oversize_body_is_413_with_a_json_rpc_error() {
    let gw = Gateway::start_with(4096, TENANTS);
    let big = request(1, "map/agents/list", json!({"pad": "y".repeat(10_000)}));
    let resp = post_rpc(&gw.addr(), None, &big).await;
    assert_eq!(resp.status, 413, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], Value::Null);
    assert!(err_code(&body) == -32600 || err_code(&body) == 4000, "{body}");
    assert!(err(&body)["data"]["category"].is_string(), "{body}");
    // A body within the limit still works.
    let resp = post_rpc(&gw.addr(), None, &request(2, "map/connect", json!({"protocolVersion": 1}))).await;
    assert_eq!(resp.status, 200);
    assert!(ok(&resp.json())["sessionId"].is_string());
}

#[tokio::test]
async fn unknown_session_is_404() {
    let gw = Gateway::start();
    let resp = post_rpc(&gw.addr(), Some("sess-does-not-exist"), &request(1, "map/agents/list", json!({}))).await;
    assert_eq!(resp.status, 404, "{}", resp.text());
    let body = resp.json();
    assert_eq!(body["jsonrpc"], "2.0");
    assert!(body["error"]["code"].is_i64(), "{body}");

    let sse = Sse::open(&gw.addr(), "sess-does-not-exist").await;
    assert_eq!(sse.status, 404);

    // A session that was closed is unknown too.
    let (session, _) = http_connect(&gw, json!({"protocolVersion": 1})).await;
    let closed = http_call(&gw, &session, 2, "map/session/close", json!({})).await;
    ok(&closed);
    let resp = post_rpc(&gw.addr(), Some(&session), &request(3, "map/agents/list", json!({}))).await;
    assert_eq!(resp.status, 404, "{}", resp.text());
}

#[tokio::test]
async fn healthz_answers_ok() {
    let gw = Gateway::start();
    let resp = http(&gw.addr(), "GET", "/healthz", &[], b"").await;
    assert_eq!(resp.status, 200);
    assert!(resp.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{:?}", resp.headers);
    let body = resp.json();
    assert_eq!(body["status"], "ok");
    // Other paths are 404, wrong methods 405.
    assert_eq!(http(&gw.addr(), "GET", "/nope", &[], b"").await.status, 404);
    assert_eq!(http(&gw.addr(), "GET", "/map/rpc", &[], b"").await.status, 405);
}

#[tokio::test]
async fn parse_error_over_http_is_a_json_rpc_answer() {
    let gw = Gateway::start();
    let resp = post(&gw.addr(), "/map/rpc", None, b"{not json").await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_error(&resp.json(), &Value::Null, -32700, "protocol");
    // Requests without a session that need one answer 1000.
    let resp = post_rpc(&gw.addr(), None, &request(9, "map/agents/list", json!({}))).await;
    assert_error(&resp.json(), &json!(9), 1000, "auth");
}

#[tokio::test]
async fn reopened_event_stream_gets_what_was_sent_while_it_was_closed() {
    let gw = Gateway::start();
    let (session, _) = http_connect(&gw, json!({"protocolVersion": 1})).await;
    let reg = http_call(&gw, &session, 2, "map/agents/register", json!({"agentId": "flaky-reader"})).await;
    ok(&reg);
    let (mut ws, _) = gw.ws_connected("client", None).await;

    let mut sse = Sse::open(&gw.addr(), &session).await;
    ws.call_ok("map/send", json!({"to": "flaky-reader", "payload": "first"})).await;
    let (n, _) = sse.notification("map/message", WAIT).await;
    assert_eq!(n.expect("first message")["params"]["message"]["payload"], "first");
    drop(sse); // the client goes away
               // The gateway has let go of the stream once no HTTP connection is open
               // but the one asking (the WebSocket is counted apart).
    let probe = async || match http_connections(&gw).await {
        n if n > 1.0 => Err(n),
        _ => Ok(()),
    };
    wait::eventually(std::time::Duration::from_secs(10), "the closed event stream's connection no longer counted", probe).await;

    let sent = ws.call_ok("map/send", json!({"to": "flaky-reader", "payload": "second"})).await;
    assert_eq!(sent["delivered"], json!(["flaky-reader"]));
    let mut sse = Sse::open(&gw.addr(), &session).await;
    let (n, _) = sse.notification("map/message", WAIT).await;
    let n = n.expect("a message sent while no stream was open arrives on the next stream");
    assert_eq!(n["params"]["message"]["payload"], "second");
}

#[tokio::test]
async fn resume_over_http_then_sse_delivers_what_was_missed() {
    let gw = Gateway::start();
    let (session, _) = http_connect(&gw, json!({"protocolVersion": 1, "participantType": "agent"})).await;
    ok(&http_call(&gw, &session, 2, "map/agents/register", json!({"agentId": "http-resumer"})).await);
    let bye = http_call(&gw, &session, 3, "map/disconnect", json!({})).await;
    let token = ok(&bye)["resumeToken"].as_str().expect("resumeToken").to_string();

    let (mut ws, _) = gw.ws_connected("client", None).await;
    let sent = ws.call_ok("map/send", json!({"to": {"agent": "http-resumer"}, "payload": "while away"})).await;
    assert_eq!(sent["delivered"], json!(["http-resumer"]));

    let resp = post_rpc(&gw.addr(), None, &request(4, "map/connect", json!({"protocolVersion": 1, "resumeToken": token}))).await;
    assert_eq!(resp.status, 200);
    let body = resp.json();
    assert_eq!(ok(&body)["sessionId"], session.as_str(), "{body}");
    assert_eq!(ok(&body)["reconnected"], true, "{body}");
    assert_eq!(ok(&body)["ownedAgents"], json!(["http-resumer"]), "{body}");
    assert_eq!(resp.header("map-session-id"), Some(session.as_str()));

    let mut sse = Sse::open(&gw.addr(), &session).await;
    let (n, seen) = sse.notification("map/message", WAIT).await;
    let n = n.unwrap_or_else(|| panic!("the message sent before the HTTP resume must reach the session's event stream; got {seen:?}"));
    assert_eq!(n["params"]["message"]["payload"], "while away");
    assert_eq!(n["params"]["message"]["id"], sent["messageId"]);
}

#[tokio::test]
async fn pretty_printed_json_reaches_an_event_stream_on_one_line() {
    let gw = Gateway::start();
    let (session, _) = http_connect(&gw, json!({"protocolVersion": 1})).await;
    http_call(&gw, &session, 2, "map/agents/register", json!({"agentId": "line-reader"})).await;
    let mut sse = Sse::open(&gw.addr(), &session).await;
    // A WebSocket peer may pretty-print; `to` and `payload` are passed through as sent.
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let text = "{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"map/send\", \"params\": {\r\n  \"to\": {\n    \"agent\": \"line-reader\"\n  },\n  \"payload\": {\n    \"text\": \"two\\nlines\"\n  }\n}}";
    let answer = ws.raw(text).await;
    assert_eq!(ok(&answer)["delivered"], json!(["line-reader"]));
    let (note, _) = sse.notification("map/message", WAIT).await;
    let m = note.expect("map/message on the SSE stream")["params"]["message"].clone();
    assert_eq!(m["to"], json!({"agent": "line-reader"}));
    assert_eq!(m["payload"], json!({"text": "two\nlines"}));
}
