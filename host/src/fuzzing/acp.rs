//! ACP handling: an editor's lines, and what the MAP side sends back,
//! through the bridge. Each input line is from the editor, or, prefixed
//! `>`, an ACP message of the agent (sent after the bridge's next
//! `map/send`), or, prefixed `!`, a raw frame of the MAP side.

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::acp::bridge::{self, Options};
use crate::acp::link::{Bounds, Link};

const DEADLINE: Duration = Duration::from_secs(10);

/// A MAP gateway with agent `a1` (owner `o1`): answers every call, and
/// after each `map/send` to the agent sends the agent's next lines.
async fn fake_map(mut calls: mpsc::Receiver<String>, frames: mpsc::Sender<String>, mut agent: VecDeque<String>) {
    while let Some(call) = calls.recv().await {
        let call: Value = serde_json::from_str(&call).expect("the link sends JSON");
        let result = match call["method"].as_str().unwrap_or_default() {
            "map/connect" => json!({"sessionId": "s1"}),
            "map/agents/get" => json!({"agent": {"id": "a1", "ownerId": "o1"}}),
            "map/agents/list" => json!({"agents": [{"id": "a1", "ownerId": "o1", "role": "coder"}]}),
            "map/subscribe" => json!({"subscriptionId": "sub1"}),
            "map/send" => json!({"delivered": ["a1"]}),
            _ => json!({}),
        };
        let _ = frames.send(json!({"jsonrpc": "2.0", "id": call["id"], "result": result}).to_string()).await;
        if call["method"] != "map/send" {
            continue;
        }
        let stream = &call["params"]["payload"]["acpContext"]["streamId"];
        while let Some(line) = agent.pop_front() {
            let frame = match line.strip_prefix('>') {
                Some(acp) => {
                    let acp: Value = serde_json::from_str(acp).unwrap_or(Value::Null);
                    let payload = json!({"acp": acp, "acpContext": {"streamId": stream, "sessionId": "s-acp", "direction": "agent-to-client"}});
                    json!({"jsonrpc": "2.0", "method": "map/message", "params": {"message": {"from": "a1", "payload": payload}}}).to_string()
                }
                None => line[1..].to_string(),
            };
            let _ = frames.send(frame).await;
            if line.starts_with('>') {
                break;
            }
        }
    }
}

/// What the bridge tells the editor is JSON-RPC 2.0: a request or
/// notification (a method), or an answer (an id).
fn check_to_editor(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("the bridge wrote something that is not JSON ({e}): {text}"));
    assert_eq!(v["jsonrpc"], "2.0", "{text}");
    assert!(v["method"].is_string() || v.get("id").is_some(), "neither a request nor an answer: {text}");
}

pub fn bridge(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (agent, editor): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| l.starts_with('>') || l.starts_with('!'));
    let agent: VecDeque<String> = agent.into_iter().map(String::from).collect();
    super::runtime::block_on(async {
        let (calls_tx, calls_rx) = mpsc::channel(64);
        let (frames_tx, frames_rx) = mpsc::channel(1024);
        let (link, notes) = Link::over(calls_tx, frames_rx, Bounds { max_frame_bytes: 1 << 20, call_timeout: DEADLINE });
        tokio::spawn(fake_map(calls_rx, frames_tx, agent));
        let (editor_tx, editor_rx) = mpsc::channel(64);
        let (out_tx, mut out_rx) = mpsc::channel(1 << 16);
        let opts = Options { agent: "a1".into(), client_request_timeout: DEADLINE, agent_request_timeout: DEADLINE, max_message_bytes: 512 };
        let run = tokio::spawn(bridge::run(link, notes, editor_rx, out_tx, opts, None));
        for line in editor {
            if editor_tx.send(line.to_string()).await.is_err() {
                break;
            }
        }
        drop(editor_tx);
        tokio::time::timeout(DEADLINE, run).await.expect("the bridge ended with its editor").expect("the bridge did not panic");
        while let Ok(line) = out_rx.try_recv() {
            check_to_editor(&line);
        }
    });
}
