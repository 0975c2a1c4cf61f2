//! `map-gateway serve --stdio`: NDJSON JSON-RPC on stdin/stdout.

use crate::common;

use common::*;
use serde_json::{json, Value};

async fn connected(max: usize) -> (StdioPeer, Value) {
    let mut gw = StdioPeer::start(max);
    let r = gw.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent", "name": "stdio-peer"})).await;
    (gw, r)
}

#[tokio::test]
async fn connect_register_two_agents_and_deliver_by_agent_address() {
    let (mut gw, hello) = connected(65536).await;
    assert_eq!(hello["protocolVersion"], 1);
    let session = hello["sessionId"].as_str().expect("sessionId").to_string();
    assert!(!session.is_empty());
    assert!(hello["participantId"].is_string(), "{hello}");
    assert!(hello["capabilities"].is_object(), "{hello}");
    assert!(hello["systemInfo"]["name"].is_string(), "{hello}");

    let a = gw.call_ok("map/agents/register", json!({"agentId": "stdio-a", "name": "A", "role": "writer"})).await;
    assert_eq!(a["agent"]["id"], "stdio-a");
    assert_eq!(a["agent"]["role"], "writer");
    assert_eq!(a["agent"]["ownerId"], hello["participantId"]);
    let b = gw.call_ok("map/agents/register", json!({"agentId": "stdio-b", "name": "B"})).await;
    assert_eq!(b["agent"]["id"], "stdio-b");

    let list = gw.call_ok("map/agents/list", json!({})).await;
    let mut ids: Vec<&str> = list["agents"].as_array().expect("agents").iter().map(|a| a["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["stdio-a", "stdio-b"]);

    let sent =
        gw.call_ok("map/send", json!({"to": {"agent": "stdio-b"}, "from": "stdio-a", "payload": {"text": "hello b"}, "meta": {"correlationId": "c-1"}})).await;
    assert_eq!(sent["delivered"], json!(["stdio-b"]));
    let message_id = sent["messageId"].as_str().expect("messageId").to_string();

    let note = gw.notification("map/message", WAIT).await.expect("map/message line on stdout");
    assert_eq!(note["jsonrpc"], "2.0");
    assert!(note.get("id").is_none(), "a notification has no id: {note}");
    let m = &note["params"]["message"];
    assert_eq!(m["id"], message_id.as_str());
    assert_eq!(m["from"], "stdio-a");
    assert_eq!(m["to"], json!({"agent": "stdio-b"}));
    assert_eq!(m["payload"], json!({"text": "hello b"}));
    assert_eq!(m["meta"]["correlationId"], "c-1");
    assert!(m["timestamp"].as_u64().is_some_and(|t| t > 1_600_000_000_000), "{m}");

    // Sending to an agent that does not exist is 2001, not a silent queue.
    let missing = gw.call("map/send", json!({"to": {"agent": "nobody"}, "payload": 1})).await;
    assert_error(&missing, &missing["id"].clone(), 2001, "routing");
}

#[tokio::test]
async fn parse_error_answers_with_null_id_and_keeps_serving() {
    let mut gw = StdioPeer::start(65536);
    let resp = gw.raw("{this is not json").await;
    assert_error(&resp, &Value::Null, -32700, "protocol");
    let resp = gw.raw(r#"{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1"#).await;
    assert_error(&resp, &Value::Null, -32700, "protocol");
    // Still answering afterwards.
    let hello = gw.call_ok("map/connect", json!({"protocolVersion": 1})).await;
    assert!(hello["sessionId"].is_string());
    let list = gw.call_ok("map/agents/list", json!({})).await;
    assert_eq!(list["agents"], json!([]));
}

#[tokio::test]
async fn over_long_line_is_refused_and_the_next_line_works() {
    let (mut gw, _) = connected(2048).await;
    let big = "x".repeat(5000);
    let line = request(7, "map/agents/register", json!({"agentId": "big", "metadata": {"blob": big}})).to_string();
    assert!(line.len() > 2048);
    let resp = gw.raw(&line).await;
    assert_eq!(resp["jsonrpc"], "2.0");
    assert!(resp.get("result").is_none(), "an over-long line must not be executed: {resp}");
    let code = err_code(&resp);
    assert!(code == -32600 || code == 4000, "over-long line answered with {resp}");
    // Nothing of the long line was acted on, and the next line is read from its start.
    let r = gw.call_ok("map/agents/register", json!({"agentId": "small"})).await;
    assert_eq!(r["agent"]["id"], "small");
    let list = gw.call_ok("map/agents/list", json!({})).await;
    let ids: Vec<&str> = list["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["small"]);
}

#[tokio::test]
async fn notification_gets_no_answer() {
    let (mut gw, _) = connected(65536).await;
    gw.write_line(r#"{"jsonrpc":"2.0","method":"map/agents/list","params":{}}"#).await;
    // Even a notification naming an unknown method is not answered.
    gw.write_line(r#"{"jsonrpc":"2.0","method":"no/such/method"}"#).await;
    gw.write_line(r#"{"jsonrpc":"2.0","id":99,"method":"map/agents/list","params":{}}"#).await;
    let line = gw.next_line(WAIT).await.expect("an answer to id 99");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], 99, "the first line after two notifications must answer id 99: {line}");
    assert!(v["result"]["agents"].is_array());
    assert!(gw.next_line(QUIET).await.is_none(), "nothing else should be written");
}

#[tokio::test]
async fn batch_gets_an_array_answer_in_order() {
    let (mut gw, _) = connected(65536).await;
    let batch = json!([
        request(1, "map/agents/register", json!({"agentId": "batch-a"})),
        {"jsonrpc": "2.0", "method": "map/agents/list"},
        request("two", "map/agents/get", json!({"agentId": "missing"})),
        request(3, "map/agents/get", json!({"agentId": "batch-a"})),
    ]);
    gw.write_line(&batch.to_string()).await;
    let line = gw.answer_line().await;
    let v: Value = serde_json::from_str(&line).unwrap();
    let items = v.as_array().unwrap_or_else(|| panic!("a batch is answered with an array: {line}"));
    assert_eq!(items.len(), 3, "the notification gets no entry: {line}");
    assert_eq!(items[0]["id"], 1);
    assert_eq!(ok(&items[0])["agent"]["id"], "batch-a");
    assert_error(&items[1], &json!("two"), 2001, "routing");
    assert_eq!(items[2]["id"], 3);
    assert_eq!(ok(&items[2])["agent"]["id"], "batch-a");
}

#[tokio::test]
async fn ids_keep_their_json_type() {
    let (mut gw, _) = connected(65536).await;
    gw.write_line(r#"{"jsonrpc":"2.0","id":"abc","method":"map/agents/list"}"#).await;
    let line = gw.answer_line().await;
    assert!(line.contains(r#""id":"abc""#), "{line}");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], json!("abc"));

    gw.write_line(r#"{"jsonrpc":"2.0","id":42,"method":"map/agents/list"}"#).await;
    let line = gw.answer_line().await;
    assert!(line.contains(r#""id":42"#), "{line}");
    assert!(!line.contains(r#""id":"42""#), "{line}");

    // A numeric string stays a string.
    gw.write_line(r#"{"jsonrpc":"2.0","id":"42","method":"map/agents/list"}"#).await;
    let line = gw.answer_line().await;
    assert!(line.contains(r#""id":"42""#), "{line}");

    // Zero, negatives and integers past 2^53 come back exactly.
    for id in ["0", "-5", "9007199254740993"] {
        gw.write_line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"map/agents/list"}}"#)).await;
        let line = gw.answer_line().await;
        assert!(line.contains(&format!(r#""id":{id},"#)) || line.contains(&format!(r#""id":{id}}}"#)), "id {id}: {line}");
    }

    // Error answers keep the type too.
    gw.write_line(r#"{"jsonrpc":"2.0","id":"e1","method":"nope"}"#).await;
    let v: Value = serde_json::from_str(&gw.answer_line().await).unwrap();
    assert_error(&v, &json!("e1"), -32601, "protocol");
}

#[tokio::test]
async fn blank_lines_are_ignored_and_eof_ends_the_process_cleanly() {
    let (mut gw, _) = connected(65536).await;
    gw.write_line("").await;
    gw.write_line("   ").await;
    let r = gw.call_ok("map/agents/list", json!({})).await;
    assert!(r["agents"].is_array());
    let status = gw.finish().await;
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn very_long_line_spanning_many_reads_is_skipped_whole() {
    let (mut gw, _) = connected(2048).await;
    // Far larger than any pipe or read buffer, with a newline-free JSON body.
    let line = request(1, "map/agents/register", json!({"agentId": "huge", "metadata": {"blob": "q".repeat(300_000)}})).to_string();
    let resp = gw.raw(&line).await;
    assert!(resp.get("result").is_none(), "an over-long line must not be executed");
    assert_eq!(resp["id"], Value::Null);
    assert!(err_code(&resp) == -32600 || err_code(&resp) == 4000, "{resp}");
    // Exactly one answer for the long line, then the next request is read cleanly.
    let resp = gw.call("map/agents/get", json!({"agentId": "huge"})).await;
    assert_eq!(err_code(&resp), 2001, "the over-long register must not have run: {resp}");
    let r = gw.call_ok("map/agents/register", json!({"agentId": "after-huge"})).await;
    assert_eq!(r["agent"]["id"], "after-huge");
    assert!(gw.next_line(QUIET).await.is_none(), "nothing else is written for the long line");
}

#[tokio::test]
async fn frames_stay_one_clean_line_when_the_json_passed_through_has_line_breaks() {
    let (mut gw, _) = connected(65536).await;
    gw.call_ok("map/agents/register", json!({"agentId": "cr-a"})).await;
    gw.call_ok("map/agents/register", json!({"agentId": "cr-b"})).await;
    // CR is JSON whitespace: valid within one NDJSON line, and passed through in `to` and `payload`.
    gw.write_line("{\"jsonrpc\":\"2.0\",\"id\":50,\"method\":\"map/send\",\"params\":{\"to\":{\r\"agent\":\"cr-b\"},\"payload\":{\r\"text\":\"a\\r\\nb\"\r}}}")
        .await;
    let mut message = None;
    for _ in 0..2 {
        let line = gw.next_line(WAIT).await.expect("a stdout line");
        assert!(!line.contains('\r'), "a raw CR in an output line: {line:?}");
        let v: Value = serde_json::from_str(&line).expect("JSON");
        if v["method"] == "map/message" {
            message = Some(v);
        } else {
            assert_eq!(ok(&v)["delivered"], json!(["cr-b"]));
        }
    }
    let m = message.expect("the map/message line")["params"]["message"].clone();
    assert_eq!(m["to"], json!({"agent": "cr-b"}));
    assert_eq!(m["payload"], json!({"text": "a\r\nb"}));
}
