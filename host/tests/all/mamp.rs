//! The MAMP bridge (plugins/mamp), black-box: HTTP requests from Python's
//! `http.client` (tests/mamp/http_requests.py), a MAP agent on a WebSocket
//! receiving what they carry, and the mail conversation that records it.

use crate::common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn gateway() -> Gateway {
    gateway_with_peer(0)
}

/// With `agent://peer.example/…` delivered to a test peer on this port.
fn gateway_with_peer(port: u16) -> Gateway {
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    assert!(dist.join("mamp.wasm").exists() && dist.join("mail.wasm").exists(), "run scripts/build-plugins.sh");
    let extra = format!(
        r#"
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
bearer_tokens = ["acme-token"]
plugins = ["mail", "mamp"]
outbound_hosts = {{ mamp = ["127.0.0.1"] }}
[tenants.plugin_config.mamp]
domain = "gw.example"
maxMessageSize = 4096
floodPerMinute = 5
maxAttempts = 3
retryBaseMs = 100
peers = {{ "peer.example" = {{ url = "http://127.0.0.1:{port}", key = "peer-key" }} }}
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
bearer_tokens = ["globex-token"]
plugins = ["mamp"]
plugin_config = {{ mamp = {{ domain = "gw.example" }} }}
"#
    );
    Gateway::start_config(&format!("plugin_dir = {:?}\nmax_message_bytes = 65536", dist), &extra)
}

/// The test peer (tests/mamp/peer.py): its port, and the requests it got as they come.
struct Peer {
    child: std::process::Child,
    port: u16,
    lines: tokio::sync::mpsc::UnboundedReceiver<Value>,
    seen: Vec<Value>,
}

impl Peer {
    fn start() -> Peer {
        use std::io::BufRead;
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/mamp/peer.py");
        let mut child = Command::new(python()).arg(script).stdout(Stdio::piped()).spawn().expect("python runs");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        let port = first.trim().strip_prefix("listening ").and_then(|p| p.parse().ok()).expect("the peer's port");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str(&line).unwrap_or(Value::Null));
            }
        });
        Peer { child, port, lines, seen: Vec::new() }
    }

    /// Wait (at most 10 s) until `n` requests were about `to`; all of them
    /// (fewer when no more came: the callers check how many).
    async fn requests_to(&mut self, to: &str, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mine = |seen: &[Value]| seen.iter().filter(|v| v["message"]["to"] == to).cloned().collect::<Vec<Value>>();
        while mine(&self.seen).len() < n {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(v)) => self.seen.push(v),
                _ => break,
            }
        }
        mine(&self.seen)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// Send these requests with http.client; their answers in order.
async fn http(gw: &Gateway, requests: Vec<Value>) -> Vec<Value> {
    let addr = gw.addr();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/mamp/http_requests.py");
    tokio::task::spawn_blocking(move || {
        let mut child =
            Command::new(python()).arg(script).arg(addr).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("python runs");
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
    let mut m =
        json!({"protocol": "mamp/1.0", "message_id": id, "from": from, "to": to, "content": content, "metadata": {"timestamp": "2026-11-23T10:00:00Z"}});
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
    let turns = turns_of(&mut alice, &conv, 2).await;
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

/// The turns of a mail conversation once there are `n` (at most 5 s), or
/// those there are then (the callers check how many).
async fn turns_of(ws: &mut Ws, conv: &str, n: usize) -> Vec<Value> {
    let probe = async || {
        let turns = ws.call_ok("mail/turns/list", json!({"conversationId": conv})).await["turns"].as_array().cloned().unwrap_or_default();
        if turns.len() >= n {
            Ok(turns)
        } else {
            Err(turns)
        }
    };
    wait::until(Duration::from_secs(5), probe).await.unwrap_or_else(|turns| turns)
}

#[tokio::test]
async fn map_agents_answer_and_start_conversations_with_external_agents() {
    let mut peer = Peer::start();
    let gw = gateway_with_peer(peer.port);
    let (mut alice, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    alice.call_ok("map/agents/register", json!({"agentId": "alice"})).await;
    alice.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["message_failed"]}})).await;

    // bob writes in; alice answers in the same conversation; bob's system gets it.
    let bob = "agent://peer.example/bob";
    let answers = http(&gw, vec![post(&message("b-1", bob, "agent://gw.example/alice", None, json!("ping")), "acme-token")]).await;
    let conv = answers[0]["body"]["conversation_id"].as_str().unwrap().to_string();
    alice.notification("map/message", Duration::from_secs(5)).await.expect("bob's message");
    let sent = alice.call_ok("mamp/send", json!({"conversationId": conv, "content": "pong"})).await;
    assert_eq!(sent["status"], "sent", "{sent}");
    assert_eq!(sent["conversationId"], conv.as_str());
    let got = peer.requests_to(bob, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["authorization"], "Bearer peer-key");
    let m = &got[0]["message"];
    assert_eq!(m["conversation_id"], conv.as_str());
    assert_eq!(m["from"], "agent://gw.example/alice");
    assert_eq!(m["content"], json!([{"type": "text", "text": "pong"}]));
    assert_eq!(m["protocol"], "mamp/1.0");
    let turns = turns_of(&mut alice, &conv, 2).await;
    let said: Vec<&Value> = turns.iter().map(|t| &t["content"]["content"][0]["text"]).collect();
    assert_eq!(said, [&json!("ping"), &json!("pong")], "both sides, in order: {turns:?}");

    // alice starts a conversation; the peer names it, and the next message carries that name.
    let carol = "agent://peer.example/carol";
    let first = alice.call_ok("mamp/send", json!({"to": carol, "content": "hello carol"})).await;
    assert_eq!(first["status"], "sent", "{first}");
    let peer_conv = first["conversationId"].as_str().unwrap().to_string();
    assert!(peer_conv.starts_with("peer-conv-"), "{first}");
    let again = alice.call_ok("mamp/send", json!({"conversationId": peer_conv, "content": "still there?"})).await;
    assert_eq!(again["status"], "sent");
    let to_carol = peer.requests_to(carol, 2).await;
    assert!(to_carol[0]["message"].get("conversation_id").is_none(), "{to_carol:?}");
    assert_eq!(to_carol[1]["message"]["conversation_id"], peer_conv.as_str());
    let mapping = alice.call_ok("mamp/conversation", json!({"conversationId": peer_conv})).await["conversation"].clone();
    assert_eq!(turns_of(&mut alice, mapping["mailConversationId"].as_str().unwrap(), 2).await.len(), 2);
    // carol answers in it: the message reaches alice in the same mail conversation.
    let reply = http(&gw, vec![post(&message("c-1", carol, "agent://gw.example/alice", Some(&peer_conv), json!("yes")), "acme-token")]).await;
    assert_eq!(reply[0]["body"]["conversation_id"], peer_conv.as_str(), "{}", reply[0]);
    let got = alice.notification("map/message", Duration::from_secs(5)).await.expect("carol's answer");
    assert_eq!(got["params"]["message"]["meta"]["mail"]["conversationId"], mapping["mailConversationId"]);

    // A peer that fails twice, then accepts: delivered on the third attempt, same message_id.
    let dave = "agent://peer.example/flaky-dave";
    let queued = alice.call_ok("mamp/send", json!({"to": dave, "content": "are you up?"})).await;
    assert_eq!(queued["status"], "queued", "{queued}");
    let tries = peer.requests_to(dave, 3).await;
    assert_eq!(tries.iter().map(|t| t["status"].as_u64().unwrap()).collect::<Vec<_>>(), [503, 503, 200]);
    assert!(tries.iter().all(|t| t["message"]["message_id"] == queued["messageId"]), "{tries:?}");

    // A peer that never accepts: message_failed after maxAttempts (3), to alice.
    let erin = "agent://peer.example/down-erin";
    let doomed = alice.call_ok("mamp/send", json!({"to": erin, "content": "hello?"})).await;
    assert_eq!(doomed["status"], "queued");
    let (event, _) = alice.notification_where(Duration::from_secs(10), |f| f["params"]["event"]["type"] == "message_failed").await;
    let data = event.expect("message_failed")["params"]["event"]["data"].clone();
    assert_eq!(data["messageId"], doomed["messageId"]);
    assert_eq!(data["to"], erin);
    assert_eq!(data["attempts"], 3);
    assert!(data["reason"].as_str().unwrap().contains("503"), "{data}");
    assert!(data["conversationId"].is_string(), "{data}");
    assert_eq!(peer.requests_to(erin, 3).await.len(), 3);
    // A refusal is final at once; bad params are -32602; another agent's conversation is 92001.
    let refused = alice.call_ok("mamp/send", json!({"to": "agent://peer.example/refuse-frank", "content": "x"})).await;
    assert_eq!(refused["status"], "failed", "{refused}");
    assert_eq!(err_code(&alice.call("mamp/send", json!({"content": "no one"})).await), -32602);
    assert_eq!(err_code(&alice.call("mamp/send", json!({"to": "bob", "content": "x"})).await), -32602);
    assert_eq!(err_code(&alice.call("mamp/send", json!({"conversationId": "nope", "content": "x"})).await), 92000);
    let (mut zed, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    zed.call_ok("map/agents/register", json!({"agentId": "zed"})).await;
    assert_eq!(err_code(&zed.call("mamp/send", json!({"conversationId": conv, "content": "x"})).await), 92001);
    // The bridge's own counters, at the gateway's /metrics: counted once each delivery's answer is in.
    let addr = gw.addr();
    wait::eventually(WAIT, "the bridge's counters: two retries each for two messages, one delivered, erin and frank failed", async || {
        let text = common::http(&addr, "GET", "/metrics", &[], b"").await.text();
        let value = |series: &str| text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse::<f64>().ok()).unwrap_or(0.0);
        let counted = value(r#"map_plugin_mamp_retries_total{tenant="acme",plugin="mamp"}"#) >= 4.0
            && value(r#"map_plugin_mamp_sent_total{tenant="acme",plugin="mamp",result="delivered"}"#) >= 1.0
            && value(r#"map_plugin_mamp_sent_total{tenant="acme",plugin="mamp",result="failed"}"#) >= 2.0;
        if counted {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
}

#[tokio::test]
async fn agents_publish_cards_and_access_rules_through_their_registration() {
    let gw = gateway();
    let (mut alice, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    let mamp = json!({
        "card": {"name": "Alice", "description": "Reviews plans", "owner": {"user_name": "Ada", "secret": {"nested": "dropped"}}, "capabilities": {"content_types": ["text", "video"], "tools": ["review"]}},
        "access": {"public": true, "allowed_agents": ["agent://peer.example/*"], "require_auth": true},
    });
    alice.call_ok("map/agents/register", json!({"agentId": "alice", "name": "alice-bot", "metadata": {"mamp": mamp}})).await;
    let (mut zed, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    zed.call_ok("map/agents/register", json!({"agentId": "zed"})).await;
    // An empty card: the rest comes from the registration.
    let (mut bea, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    let registration = json!({"agentId": "bea", "name": "Bea", "description": "Answers billing questions",
        "capabilities": {"contentTypes": ["text", "code", "video"], "tools": ["refund", 7]}, "metadata": {"mamp": {"card": {}}}});
    bea.call_ok("map/agents/register", registration).await;
    let get = |path: &str| json!({"method": "GET", "path": path, "headers": {"x-api-key": "acme-key"}});
    let answers = http(
        &gw,
        vec![
            get("/mamp/v1/agents/alice/card"),
            get("/mamp/v1/agents/zed/card"),
            get("/mamp/v1/agents/nobody/card"),
            post(&message("a-1", "agent://evil.example/eve", "agent://gw.example/alice", None, json!("let me in")), "acme-token"),
            post(&message("a-2", "agent://peer.example/bob", "agent://gw.example/alice", None, json!("hi")), "acme-token"),
            get("/mamp/v1/agents/bea/card"),
        ],
    )
    .await;
    let card = &answers[0]["body"];
    assert_eq!(answers[0]["status"], 200, "{}", answers[0]);
    assert_eq!(card["agent_id"], "agent://gw.example/alice");
    assert_eq!(card["name"], "Alice");
    assert_eq!(card["description"], "Reviews plans");
    assert_eq!(card["owner"], json!({"user_name": "Ada"}), "only string fields are published");
    assert_eq!(card["capabilities"]["content_types"], json!(["text"]), "only content types MAMP knows");
    assert_eq!(card["capabilities"]["tools"], json!(["review"]));
    assert_eq!(card["access"], json!({"public": true, "allowed_agents": ["agent://peer.example/*"], "require_auth": true}));
    refused(&answers[1], 404, "agent_not_found");
    refused(&answers[2], 404, "agent_not_found");
    refused(&answers[3], 403, "forbidden");
    assert_eq!(answers[4]["status"], 200, "{}", answers[4]);
    let card = &answers[5]["body"];
    assert_eq!(answers[5]["status"], 200, "{}", answers[5]);
    assert_eq!(card["agent_id"], "agent://gw.example/bea");
    assert_eq!(card["name"], "Bea");
    assert_eq!(card["description"], "Answers billing questions");
    assert_eq!(card["capabilities"]["content_types"], json!(["text", "code"]), "only content types MAMP knows");
    assert_eq!(card["capabilities"]["tools"], json!(["refund"]), "only strings");
}

/// A gateway whose tenant `t` has agents at `agent://<domain>/…` and sends
/// `agent://<other>/…` to 127.0.0.1:`port` (0 until the other gateway is up).
fn peer_config(domain: &str, token: &str, other: &str, other_token: &str, port: u16) -> String {
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    format!(
        r#"[server]
plugin_dir = {dist:?}
[auth]
anonymous_tenant = ""
[[tenants]]
id = "t"
api_keys = ["key"]
bearer_tokens = ["{token}"]
plugins = ["mail", "mamp"]
outbound_hosts = {{ mamp = ["127.0.0.1"] }}
[tenants.plugin_config.mamp]
domain = "{domain}"
peers = {{ "{other}" = {{ url = "http://127.0.0.1:{port}", key = "{other_token}" }} }}
"#
    )
}

fn launch_peer(domain: &str, token: &str, other: &str, other_token: &str) -> (Gateway, PathBuf) {
    let dir = TempDir::new("mamp-peer");
    let path = dir.path().join("config.toml");
    let text = peer_config(domain, token, other, other_token, 0);
    std::fs::write(&path, text.replace("[server]\n", &format!("[server]\ndata_dir = {:?}\n", dir.path().join("data")))).unwrap();
    (Gateway::launch(dir, path.clone()), path)
}

/// Point a gateway at the other's port, and reload.
async fn connect_peer(gw: &Gateway, path: &PathBuf, domain: &str, token: &str, other: &str, other_token: &str, port: u16) {
    let data = std::fs::read_to_string(path).unwrap();
    let data_dir = data.lines().find(|l| l.starts_with("data_dir")).unwrap().to_string();
    let text = peer_config(domain, token, other, other_token, port).replace("[server]\n", &format!("[server]\n{data_dir}\n"));
    std::fs::write(path, text).unwrap();
    let resp = common::http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(resp.status, 200, "reload: {}", String::from_utf8_lossy(&resp.body));
}

#[tokio::test]
async fn agents_on_two_gateways_converse_over_mamp_and_both_mail_conversations_hold_it_all() {
    let (a, a_path) = launch_peer("a.example", "a-token", "b.example", "b-token");
    let (b, b_path) = launch_peer("b.example", "b-token", "a.example", "a-token");
    connect_peer(&a, &a_path, "a.example", "a-token", "b.example", "b-token", b.port).await;
    connect_peer(&b, &b_path, "b.example", "b-token", "a.example", "a-token", a.port).await;
    let (mut alice, _) = a.ws_connected("agent", Some(api_key("key"))).await;
    alice.call_ok("map/agents/register", json!({"agentId": "alice"})).await;
    let (mut bob, _) = b.ws_connected("agent", Some(api_key("key"))).await;
    bob.call_ok("map/agents/register", json!({"agentId": "bob"})).await;

    let first = alice.call_ok("mamp/send", json!({"to": "agent://b.example/bob", "content": "turn 1"})).await;
    assert_eq!(first["status"], "sent", "{first}");
    let conv = first["conversationId"].as_str().unwrap().to_string();
    let a_mail = alice.call_ok("mamp/conversation", json!({"conversationId": conv})).await["conversation"]["mailConversationId"].as_str().unwrap().to_string();
    let mut b_mail = String::new();
    for turn in 2..=6 {
        // Each side answers as soon as the other's message arrives: the
        // bridge recorded it before delivering it, so the order holds.
        let (me, name) = if turn % 2 == 0 { (&mut bob, "bob") } else { (&mut alice, "alice") };
        let got = me.notification("map/message", Duration::from_secs(5)).await.unwrap_or_else(|| panic!("{name} gets turn {}", turn - 1));
        let m = &got["params"]["message"];
        assert_eq!(m["payload"]["content"][0]["text"], format!("turn {}", turn - 1));
        assert_eq!(m["payload"]["conversation_id"], conv.as_str());
        let mail = m["meta"]["mail"]["conversationId"].as_str().unwrap().to_string();
        if name == "bob" {
            b_mail = mail.clone();
        } else {
            assert_eq!(mail, a_mail);
        }
        let sent = me.call_ok("mamp/send", json!({"conversationId": mail, "content": format!("turn {turn}")})).await;
        assert_eq!(sent["status"], "sent", "{sent}");
        assert_eq!(sent["conversationId"], conv.as_str());
    }
    alice.notification("map/message", Duration::from_secs(5)).await.expect("alice gets turn 6");
    let a_turns = turns_of(&mut alice, &a_mail, 6).await;
    let b_turns = turns_of(&mut bob, &b_mail, 6).await;
    for (side, turns, me) in [("a", &a_turns, "alice"), ("b", &b_turns, "bob")] {
        let texts: Vec<String> = turns.iter().map(|t| t["content"]["content"][0]["text"].as_str().unwrap_or_default().to_string()).collect();
        assert_eq!(texts, (1..=6).map(|n| format!("turn {n}")).collect::<Vec<_>>(), "gateway {side}'s conversation in order");
        let mine = if me == "alice" { [0, 2, 4] } else { [1, 3, 5] };
        for (i, turn) in turns.iter().enumerate().take(6) {
            let author = if mine.contains(&i) { me } else { "plugin:mamp" };
            assert_eq!(turn["participant"], author, "gateway {side}, turn {}", i + 1);
        }
    }
}

#[tokio::test]
async fn a_delivery_waiting_for_a_retry_survives_kill_9() {
    let mut peer = Peer::start();
    let gw = gateway_with_peer(peer.port);
    let (mut alice, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    alice.call_ok("map/agents/register", json!({"agentId": "alice"})).await;
    // The peer refuses the first two attempts; the first fails before the kill.
    let to = "agent://peer.example/flaky-gina";
    let queued = alice.call_ok("mamp/send", json!({"to": to, "content": "after the restart"})).await;
    assert_eq!(queued["status"], "queued", "{queued}");
    let gw = gw.kill_and_restart();
    // Nobody calls the restarted gateway: its retries come back by themselves.
    let tries = peer.requests_to(to, 3).await;
    assert_eq!(tries.iter().map(|t| t["status"].as_u64().unwrap()).collect::<Vec<_>>(), [503, 503, 200], "{}", gw.log());
    assert!(tries.iter().all(|t| t["message"]["message_id"] == queued["messageId"]), "the same message_id each time: {tries:?}");
}
