//! The MAMP bridge (plugins/mamp), black-box: HTTP requests from Python's
//! `http.client` (tests/mamp/http_requests.py), a MAP agent on a WebSocket
//! receiving what they carry, and the mail conversation that records it.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn gateway() -> Gateway {
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    assert!(dist.join("mamp.wasm").exists() && dist.join("mail.wasm").exists(), "run scripts/build-plugins.sh");
    let extra = r#"
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
bearer_tokens = ["acme-token"]
plugins = ["mail", "mamp"]
plugin_config = { mamp = { domain = "gw.example", maxMessageSize = 4096, floodPerMinute = 5 } }
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
bearer_tokens = ["globex-token"]
plugins = ["mamp"]
plugin_config = { mamp = { domain = "gw.example" } }
"#;
    Gateway::start_config(&format!("plugin_dir = {:?}\nmax_message_bytes = 65536", dist), extra)
}

/// Send these requests with http.client; their answers in order.
async fn http(gw: &Gateway, requests: Vec<Value>) -> Vec<Value> {
    let addr = gw.addr();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/mamp/http_requests.py");
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(python()).arg(script).arg(addr).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("python runs");
        child.stdin.take().unwrap().write_all(Value::Array(requests).to_string().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        match serde_json::from_slice(&out.stdout).unwrap() {
            Value::Array(answers) => answers,
            other => panic!("{other}"),
        }
    })
    .await
    .unwrap()
}

fn message(id: &str, from: &str, to: &str, conversation: Option<&str>, content: Value) -> Value {
    let mut m = json!({"protocol": "mamp/1.0", "message_id": id, "from": from, "to": to, "content": content, "metadata": {"timestamp": "2026-11-23T10:00:00Z"}});
    if let Some(c) = conversation {
        m["conversation_id"] = json!(c);
    }
    m
}

fn post(body: &Value, key: &str) -> Value {
    json!({"method": "POST", "path": "/mamp/v1/messages", "headers": {"content-type": "application/json", "authorization": format!("Bearer {key}")}, "body": body.to_string()})
}

/// The seed's error body with the same status.
fn refused(answer: &Value, status: u64, error: &str) {
    assert_eq!(answer["status"], status, "{answer}");
    assert_eq!(answer["body"]["error"], error, "{answer}");
    assert_eq!(answer["body"]["status_code"], status, "{answer}");
    assert!(answer["body"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{answer}");
}

#[tokio::test]
async fn an_external_agent_reaches_a_map_agent_and_the_conversation_is_recorded_in_mail() {
    let gw = gateway();
    let (mut alice, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    alice.call_ok("map/agents/register", json!({"agentId": "alice"})).await;
    let bob = "agent://peer.example/bob";
    let first = message("m-1", bob, "agent://gw.example/alice", None, json!("hello alice"));
    let answers = http(&gw, vec![post(&first, "acme-token"), post(&first, "acme-token")]).await;
    assert_eq!(answers[0]["status"], 200, "{}", answers[0]);
    let conv = answers[0]["body"]["conversation_id"].as_str().unwrap().to_string();
    assert_eq!(answers[0]["body"], json!({"conversation_id": conv, "message_id": "m-1", "status": "received"}));
    assert_eq!(answers[1], answers[0], "a retry gets the same answer");

    let got = alice.notification("map/message", Duration::from_secs(5)).await.expect("alice receives the message");
    let m = &got["params"]["message"];
    assert_eq!(m["payload"]["content"], json!([{"type": "text", "text": "hello alice"}]), "{got}");
    assert_eq!(m["payload"]["from"], bob);
    assert_eq!(m["payload"]["conversation_id"], conv.as_str());
    assert_eq!(m["meta"]["protocol"], "mamp");
    assert_eq!(m["meta"]["mail"]["conversationId"], conv.as_str());
    assert!(alice.notification("map/message", Duration::from_millis(300)).await.is_none(), "the retry delivered nothing");

    // The conversation continues, in blocks of every kind.
    let blocks = json!([
        {"type": "text", "text": "see the plan"},
        {"type": "code", "language": "rust", "code": "fn main() {}"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}},
        {"type": "file", "name": "plan.pdf", "source": {"type": "url", "url": "https://peer.example/plan.pdf"}},
    ]);
    let second = message("m-2", bob, "agent://gw.example/alice", Some(&conv), blocks.clone());
    let answers = http(&gw, vec![post(&second, "acme-token")]).await;
    assert_eq!(answers[0]["body"]["conversation_id"], conv.as_str(), "{}", answers[0]);
    let got = alice.notification("map/message", Duration::from_secs(5)).await.expect("the second message");
    assert_eq!(got["params"]["message"]["payload"]["content"], blocks);

    // Both are turns of the mail conversation, which alice is in.
    let mut turns = Vec::new();
    for _ in 0..100 {
        turns = alice.call_ok("mail/turns/list", json!({"conversationId": conv})).await["turns"].as_array().cloned().unwrap_or_default();
        if turns.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert_eq!(turns[0]["content"]["message_id"], "m-1");
    assert_eq!(turns[1]["content"]["message_id"], "m-2");
    assert_eq!(turns[0]["participant"], "plugin:mamp");
    let mapping = alice.call_ok("mamp/conversation", json!({"conversationId": conv})).await;
    assert_eq!(mapping["conversation"]["peer"], bob);
    assert_eq!(mapping["conversation"]["agent"], "alice");
    assert_eq!(mapping["conversation"]["mailConversationId"], conv.as_str());

    // Unknown conversation, agent or domain; another tenant's view of alice.
    let answers = http(
        &gw,
        vec![
            post(&message("m-3", bob, "agent://gw.example/alice", Some("conv-unknown"), json!("x")), "acme-token"),
            post(&message("m-4", "agent://other.example/eve", "agent://gw.example/alice", Some(&conv), json!("x")), "acme-token"),
            post(&message("m-5", bob, "agent://gw.example/nobody", None, json!("x")), "acme-token"),
            post(&message("m-6", bob, "agent://elsewhere.example/alice", None, json!("x")), "acme-token"),
            post(&message("m-7", bob, "agent://gw.example/alice", None, json!("x")), "globex-token"),
        ],
    )
    .await;
    refused(&answers[0], 404, "conversation_not_found");
    refused(&answers[1], 404, "conversation_not_found");
    refused(&answers[2], 404, "agent_not_found");
    refused(&answers[3], 404, "agent_not_found");
    refused(&answers[4], 404, "agent_not_found");
    assert!(alice.notification("map/message", Duration::from_millis(200)).await.is_none());
}

#[tokio::test]
async fn malformed_unauthorised_oversized_and_flooding_requests_get_the_seeds_errors() {
    let gw = gateway();
    let (mut alice, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    alice.call_ok("map/agents/register", json!({"agentId": "alice"})).await;
    let to = "agent://gw.example/alice";
    let good = message("v-1", "agent://peer.example/bob", to, None, json!("hi"));
    let with = |f: &dyn Fn(&mut Value)| {
        let mut m = good.clone();
        f(&mut m);
        post(&m, "acme-token")
    };
    let raw = |body: &str, content_type: Option<&str>, key: Option<&str>| {
        let mut headers = json!({});
        if let Some(ct) = content_type {
            headers["content-type"] = json!(ct);
        }
        if let Some(k) = key {
            headers["authorization"] = json!(format!("Bearer {k}"));
        }
        json!({"method": "POST", "path": "/mamp/v1/messages", "headers": headers, "body": body})
    };
    let cases: Vec<(Value, u64, &str)> = vec![
        (raw(&good.to_string(), None, Some("acme-token")), 415, "unsupported_media_type"),
        (raw(&good.to_string(), Some("text/plain"), Some("acme-token")), 415, "unsupported_media_type"),
        (raw("{not json", Some("application/json"), Some("acme-token")), 400, "invalid_json"),
        (raw("[1]", Some("application/json"), Some("acme-token")), 400, "invalid_message"),
        (with(&|m| m["protocol"] = json!("mamp/2.0")), 400, "unsupported_protocol"),
        (with(&|m| drop(m.as_object_mut().unwrap().remove("protocol"))), 400, "missing_field"),
        (with(&|m| drop(m.as_object_mut().unwrap().remove("message_id"))), 400, "missing_field"),
        (with(&|m| drop(m.as_object_mut().unwrap().remove("from"))), 400, "missing_field"),
        (with(&|m| drop(m.as_object_mut().unwrap().remove("to"))), 400, "missing_field"),
        (with(&|m| drop(m.as_object_mut().unwrap().remove("content"))), 400, "missing_field"),
        (with(&|m| drop(m.as_object_mut().unwrap().remove("metadata"))), 400, "missing_field"),
        (with(&|m| m["metadata"] = json!({})), 400, "missing_field"),
        (with(&|m| m["metadata"]["timestamp"] = json!("yesterday")), 400, "invalid_field"),
        (with(&|m| m["from"] = json!("bob@peer.example")), 400, "invalid_agent_uri"),
        (with(&|m| m["to"] = json!("agent://gw.example/")), 400, "invalid_agent_uri"),
        (with(&|m| m["content"] = json!([])), 400, "invalid_content"),
        (with(&|m| m["content"] = json!([{"type": "video", "url": "x"}])), 400, "invalid_content"),
        (with(&|m| m["content"] = json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "%%%"}}])), 400, "invalid_content"),
        (with(&|m| m["conversation_id"] = json!(7)), 400, "invalid_field"),
        // Over the bridge's maxMessageSize (4096), then over the gateway's own limit (65536).
        (with(&|m| m["content"] = json!("x".repeat(5000))), 413, "message_too_large"),
        (with(&|m| m["content"] = json!("x".repeat(70_000))), 413, "message_too_large"),
        // Credentials: none, unknown.
        (raw(&good.to_string(), Some("application/json"), None), 401, "unauthorized"),
        (raw(&good.to_string(), Some("application/json"), Some("wrong-key")), 401, "unauthorized"),
    ];
    let answers = http(&gw, cases.iter().map(|(r, _, _)| r.clone()).collect()).await;
    for ((request, status, error), answer) in cases.iter().zip(&answers) {
        assert_eq!(answer["status"], *status, "{request} → {answer}");
        refused(answer, *status, error);
    }
    assert!(alice.notification("map/message", Duration::from_millis(200)).await.is_none(), "nothing malformed was delivered");

    // Five messages a minute per sender here: the sixth is 429, another sender is fine.
    let flood: Vec<Value> = (0..6).map(|i| post(&message(&format!("f-{i}"), "agent://flood.example/x", to, None, json!("spam")), "acme-token")).collect();
    let mut answers = http(&gw, flood).await;
    assert!(answers[..5].iter().all(|a| a["status"] == 200), "{answers:?}");
    refused(&answers.pop().unwrap(), 429, "rate_limited");
    let other = http(&gw, vec![post(&message("o-1", "agent://calm.example/y", to, None, json!("hi")), "acme-token")]).await;
    assert_eq!(other[0]["status"], 200, "{}", other[0]);

    // The card, and the other endpoints' errors.
    let misc = http(
        &gw,
        vec![
            json!({"method": "GET", "path": "/mamp/v1/card", "headers": {"x-api-key": "acme-key"}}),
            json!({"method": "GET", "path": "/mamp/v1/messages", "headers": {"x-api-key": "acme-key"}}),
            json!({"method": "GET", "path": "/mamp/v1/nothing", "headers": {"x-api-key": "acme-key"}}),
        ],
    )
    .await;
    assert_eq!(misc[0]["status"], 200);
    assert_eq!(misc[0]["body"]["protocol"], "mamp/1.0");
    assert_eq!(misc[0]["body"]["agent_id"], "agent://gw.example/gateway");
    assert_eq!(misc[0]["body"]["capabilities"]["max_message_size"], 4096);
    refused(&misc[1], 405, "method_not_allowed");
    refused(&misc[2], 404, "not_found");
}
