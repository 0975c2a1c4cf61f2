//! JSON-RPC 2.0 edge cases over WebSocket: parse errors, invalid requests,
//! unknown methods, bad params, batches, ids and error categories.

use crate::common;

use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn parse_error_keeps_the_connection_usable() {
    let gw = Gateway::start();
    let mut ws = gw.ws().await;
    let resp = ws.raw("{oops").await;
    assert_error(&resp, &Value::Null, -32700, "protocol");
    assert!(resp.get("result").is_none());
    // A truncated batch is a parse error too (one answer, not an array).
    let resp = ws.raw(r#"[{"jsonrpc":"2.0","id":1,"method":"map/connect"}"#).await;
    assert!(resp.is_object(), "{resp}");
    assert_error(&resp, &Value::Null, -32700, "protocol");
    // Same socket, still serving.
    let hello = ws.call_ok("map/connect", json!({"protocolVersion": 1})).await;
    assert!(hello["sessionId"].is_string());
    let resp = ws.raw("not json at all").await;
    assert_error(&resp, &Value::Null, -32700, "protocol");
    let list = ws.call_ok("map/agents/list", json!({})).await;
    assert_eq!(list["agents"], json!([]));
}

#[tokio::test]
async fn invalid_requests_are_32600() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("client", None).await;

    // Missing "jsonrpc": the id is known, so it is echoed.
    let resp = ws.raw(r#"{"id":1,"method":"map/agents/list"}"#).await;
    assert_error(&resp, &json!(1), -32600, "protocol");
    // Wrong version.
    let resp = ws.raw(r#"{"jsonrpc":"1.0","id":"v","method":"map/agents/list"}"#).await;
    assert_error(&resp, &json!("v"), -32600, "protocol");
    // Method not a string.
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":2,"method":5}"#).await;
    assert_error(&resp, &json!(2), -32600, "protocol");
    // Method missing.
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":3}"#).await;
    assert_error(&resp, &json!(3), -32600, "protocol");
    // An object id cannot be echoed: null.
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"map/agents/list"}"#).await;
    assert_error(&resp, &Value::Null, -32600, "protocol");
    // An array id likewise.
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":[1],"method":"map/agents/list"}"#).await;
    assert_error(&resp, &Value::Null, -32600, "protocol");
    // Valid JSON that is not an object.
    let resp = ws.raw("42").await;
    assert_error(&resp, &Value::Null, -32600, "protocol");
    let resp = ws.raw(r#""map/agents/list""#).await;
    assert_error(&resp, &Value::Null, -32600, "protocol");
    // The socket still serves.
    let list = ws.call_ok("map/agents/list", json!({})).await;
    assert!(list["agents"].is_array());
}

#[tokio::test]
async fn unknown_method_is_32601_with_the_id_echoed() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":"m-1","method":"map/does/not/exist","params":{}}"#).await;
    assert_error(&resp, &json!("m-1"), -32601, "protocol");
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":17,"method":"frobnicate"}"#).await;
    assert_error(&resp, &json!(17), -32601, "protocol");
    // Unknown methods are 32601 even before map/connect.
    let mut fresh = gw.ws().await;
    let resp = fresh.raw(r#"{"jsonrpc":"2.0","id":1,"method":"frobnicate"}"#).await;
    assert_error(&resp, &json!(1), -32601, "protocol");
}

#[tokio::test]
async fn bad_params_are_32602() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("agent", None).await;
    ws.call_ok("map/agents/register", json!({"agentId": "p-agent"})).await;

    let cases: Vec<(&str, Value)> = vec![
        ("map/agents/get", json!({})),
        ("map/agents/get", json!({"agentId": 5})),
        ("map/send", json!({"payload": {"x": 1}})),
        ("map/send", json!({"to": 12, "payload": 1})),
        ("map/send", json!({"to": {"nonsense": true}, "payload": 1})),
        ("map/send", json!({"to": [], "payload": 1})),
        ("map/agents/register", json!({"agentId": ""})),
        ("map/agents/update", json!({"state": "active"})),
        ("map/agents/update", json!({"agentId": "p-agent", "state": "sleepy"})),
        ("map/unsubscribe", json!({})),
        ("map/subscribe", json!({"filter": {"eventTypes": "agent_registered"}})),
        ("map/replay", json!({"limit": 0})),
        ("map/replay", json!({"limit": 5000})),
    ];
    for (method, params) in cases {
        let resp = ws.call(method, params.clone()).await;
        assert_eq!(err_code(&resp), -32602, "{method} {params}: {resp}");
        assert_eq!(err(&resp)["data"]["category"], "protocol", "{resp}");
    }
    // A second map/connect on a live connection is refused, the session stays.
    let again = ws.call("map/connect", json!({"protocolVersion": 1})).await;
    assert!(err_code(&again) == -32600 || err_code(&again) == -32602, "{again}");
    let got = ws.call_ok("map/agents/get", json!({"agentId": "p-agent"})).await;
    assert_eq!(got["agent"]["id"], "p-agent");
    // Unsupported protocol version.
    let mut other = gw.ws().await;
    let resp = other.call("map/connect", json!({"protocolVersion": 2})).await;
    assert_eq!(err_code(&resp), -32602, "{resp}");
    let resp = other.call("map/connect", json!({"protocolVersion": 1, "participantType": "robot"})).await;
    assert_eq!(err_code(&resp), -32602, "{resp}");
}

#[tokio::test]
async fn batch_with_mixed_entries_answers_in_order_without_notifications() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("agent", None).await;
    let frame = json!([
        request(1, "map/agents/register", json!({"agentId": "mix-1"})),
        {"jsonrpc": "2.0", "method": "map/agents/register", "params": {"agentId": "mix-note"}},
        request("two", "map/nope", json!({})),
        {"jsonrpc": "2.0", "id": 3, "method": 7},
        42,
        request(4, "map/agents/get", json!({})),
        {"jsonrpc": "2.0", "method": "map/nope"},
        request(5, "map/agents/list", json!({})),
    ]);
    let resp = ws.send_value(&frame).await;
    let items = resp.as_array().unwrap_or_else(|| panic!("a batch is answered with an array: {resp}"));
    assert_eq!(items.len(), 6, "two notifications get no entry: {resp}");
    assert_eq!(items[0]["id"], 1);
    assert_eq!(ok(&items[0])["agent"]["id"], "mix-1");
    assert_error(&items[1], &json!("two"), -32601, "protocol");
    assert_error(&items[2], &json!(3), -32600, "protocol");
    assert_error(&items[3], &Value::Null, -32600, "protocol");
    assert_error(&items[4], &json!(4), -32602, "protocol");
    assert_eq!(items[5]["id"], 5);
    // Entries run in order: the notification registered its agent before the list.
    let ids: Vec<&str> = ok(&items[5])["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["mix-1", "mix-note"]);
    for item in items {
        assert_eq!(item["jsonrpc"], "2.0", "{item}");
    }
}

#[tokio::test]
async fn empty_batch_is_a_single_32600_and_all_notification_batch_is_silent() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let resp = ws.raw("[]").await;
    assert!(resp.is_object(), "an empty batch gets one answer, not an array: {resp}");
    assert_error(&resp, &Value::Null, -32600, "protocol");

    // A batch of notifications only: no answer at all.
    ws.send_text(r#"[{"jsonrpc":"2.0","method":"map/agents/list"},{"jsonrpc":"2.0","method":"nope"}]"#).await;
    assert!(ws.next_frame(QUIET).await.is_none(), "a batch of notifications gets no answer");
    // A batch of one invalid entry: an array with one error.
    let resp = ws.raw("[1]").await;
    let items = resp.as_array().unwrap_or_else(|| panic!("{resp}"));
    assert_eq!(items.len(), 1);
    assert_error(&items[0], &Value::Null, -32600, "protocol");
}

#[tokio::test]
async fn notifications_get_no_answer() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("client", None).await;
    ws.send_text(r#"{"jsonrpc":"2.0","method":"map/agents/list"}"#).await;
    ws.send_text(r#"{"jsonrpc":"2.0","method":"unknown/method"}"#).await;
    ws.send_text(r#"{"jsonrpc":"2.0","method":"map/agents/get","params":{}}"#).await;
    assert!(ws.next_frame(QUIET).await.is_none(), "notifications are never answered, even failing ones");
    // Peers answering us (responses) are ignored too.
    ws.send_text(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#).await;
    assert!(ws.next_frame(QUIET).await.is_none());
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":"after","method":"map/agents/list"}"#).await;
    assert_eq!(resp["id"], "after");
}

/// A response whose result is null is still a response: ignored, not
/// answered as an invalid request (found by the jsonrpc_frame fuzz target).
#[tokio::test]
async fn a_response_with_a_null_result_gets_no_answer() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("client", None).await;
    ws.send_text(r#"{"jsonrpc":"2.0","id":5,"result":null}"#).await;
    ws.send_text(r#"[{"jsonrpc":"2.0","id":6,"result":null},{"jsonrpc":"2.0","id":"in-batch","method":"map/agents/list"}]"#).await;
    let batch = ws.next_frame(WAIT).await.expect("the batch's answer");
    assert_eq!(batch.as_array().map(Vec::len), Some(1), "only the request is answered: {batch}");
    assert_eq!(batch[0]["id"], "in-batch");
}

#[tokio::test]
async fn a_numeric_id_longer_than_a_float_holds_comes_back_as_the_same_number() {
    let gw = Gateway::start();
    let mut ws = gw.ws().await;
    // 73 digits: read without exact rounding, the answer named a neighbouring number.
    let id = "3".repeat(72) + "1";
    let sent: Value = serde_json::from_str(&id).unwrap();
    let resp = ws.raw(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"map/agents/list"}}"#)).await;
    assert_eq!(resp["id"], sent, "{resp}");
}

#[tokio::test]
async fn ids_keep_their_json_type_over_websocket() {
    let gw = Gateway::start();
    let mut ws = gw.ws().await;
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":"c","method":"map/connect","params":{"protocolVersion":1}}"#).await;
    assert_eq!(resp["id"], json!("c"));
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":7,"method":"map/agents/list"}"#).await;
    assert_eq!(resp["id"], json!(7));
    assert!(resp["id"].is_i64());
    let resp = ws.raw(r#"{"jsonrpc":"2.0","id":"7","method":"map/agents/list"}"#).await;
    assert_eq!(resp["id"], json!("7"));
    // A batch keeps each entry's own id and type.
    let resp = ws.raw(r#"[{"jsonrpc":"2.0","id":1,"method":"map/agents/list"},{"jsonrpc":"2.0","id":"1","method":"map/agents/list"}]"#).await;
    assert_eq!(resp[0]["id"], json!(1));
    assert_eq!(resp[1]["id"], json!("1"));
}

#[tokio::test]
async fn errors_carry_data_category_by_code_range() {
    let gw = Gateway::start();
    // Before map/connect: 1000 auth.
    let mut fresh = gw.ws().await;
    let resp = fresh.call("map/agents/list", json!({})).await;
    assert_error(&resp, &resp["id"].clone(), 1000, "auth");

    let (mut ws, _) = gw.ws_connected("agent", None).await;
    let resp = ws.call("map/agents/get", json!({"agentId": "ghost"})).await;
    assert_error(&resp, &resp["id"].clone(), 2001, "routing");
    ws.call_ok("map/agents/register", json!({"agentId": "dup"})).await;
    let resp = ws.call("map/agents/register", json!({"agentId": "dup"})).await;
    assert_error(&resp, &resp["id"].clone(), 3000, "agent");
    let resp = ws.call("map/send", json!({"to": {"scope": "no-such-scope"}, "payload": 1})).await;
    assert_error(&resp, &resp["id"].clone(), 2002, "routing");
    let resp = ws.call("map/send", json!({"to": {"participant": "nobody-is-called-this"}, "payload": 1})).await;
    assert_error(&resp, &resp["id"].clone(), 2000, "routing");
    // A group that holds no one right now is not an error: it reaches no one.
    let resp = ws.call_ok("map/send", json!({"to": {"role": "nobody-has-this"}, "payload": 1})).await;
    assert_eq!(resp["delivered"], json!([]));

    let mut bad = gw.ws().await;
    let resp = bad.call("map/authenticate", json!({"method": "api-key", "credential": "wrong"})).await;
    assert_error(&resp, &resp["id"].clone(), 1001, "auth");
}

#[tokio::test]
async fn oversize_frame_is_refused_and_the_socket_stays() {
    let gw = Gateway::start_with(4096, TENANTS);
    let (mut ws, _) = gw.ws_connected("agent", None).await;
    let big = request(1, "map/agents/register", json!({"agentId": "too-big", "metadata": {"pad": "z".repeat(20_000)}}));
    let resp = ws.send_value(&big).await;
    assert_eq!(resp["jsonrpc"], "2.0");
    assert!(resp.get("result").is_none(), "{resp}");
    assert!(err_code(&resp) == -32600 || err_code(&resp) == 4000, "{resp}");
    assert!(err(&resp)["data"]["category"].is_string(), "{resp}");
    let resp = ws.call("map/agents/get", json!({"agentId": "too-big"})).await;
    assert_eq!(err_code(&resp), 2001, "the oversize frame must not be carried out: {resp}");
    let ok_resp = ws.call_ok("map/agents/register", json!({"agentId": "fits"})).await;
    assert_eq!(ok_resp["agent"]["id"], "fits");
}

#[tokio::test]
async fn deeply_nested_json_is_an_error_not_a_crash() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let depth = 20_000;
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let resp = ws.raw(&nested).await;
    assert!(resp.is_object() || resp.is_array(), "{resp}");
    let first = if resp.is_array() { resp[0].clone() } else { resp.clone() };
    assert!(first["error"]["code"].is_i64(), "{resp}");
    let params = format!(r#"{{"jsonrpc":"2.0","id":5,"method":"map/agents/list","params":{{"filter":{}1{}}}}}"#, "[".repeat(depth), "]".repeat(depth));
    let resp = ws.raw(&params).await;
    assert!(resp["error"]["code"].is_i64(), "{resp}");
    // Still alive.
    let list = ws.call_ok("map/agents/list", json!({})).await;
    assert!(list["agents"].is_array());
    let health = http(&gw.addr(), "GET", "/healthz", &[], b"").await;
    assert_eq!(health.status, 200);
}
