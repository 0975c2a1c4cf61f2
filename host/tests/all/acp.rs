//! The ACP bridge (`/acp` and `map-gateway acp`) seen from both ends: an
//! editor speaking ACP as raw JSON-RPC, and a MAP agent answering through
//! MAP's ACP tunnel by hand, so each test decides when the agent answers,
//! stays silent or dies.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A MAP agent on a WebSocket of its own.
struct Agent {
    ws: Ws,
    id: String,
    resume_token: String,
}

/// A message of the bridge to the agent: the ACP message and where to answer.
struct FromEditor {
    acp: Value,
    from: String,
    context: Value,
}

async fn agent(gw: &Gateway, role: &str) -> Agent {
    let (mut ws, hello) = gw.ws_connected("agent", None).await;
    let registered = ws.call_ok("map/agents/register", json!({"name": role, "role": role})).await;
    Agent {
        ws,
        id: registered["agent"]["id"].as_str().expect("agent id").to_string(),
        resume_token: hello["resumeToken"].as_str().expect("resumeToken").to_string(),
    }
}

impl Agent {
    /// The next ACP message the bridge tunnels to this agent, if one comes within `within`.
    async fn next(&mut self, within: Duration) -> Option<FromEditor> {
        let note = self.ws.take_where(within, |n| n["method"] == "map/message" && n["params"]["message"]["payload"]["acp"].is_object()).await?;
        let message = &note["params"]["message"];
        Some(FromEditor {
            acp: message["payload"]["acp"].clone(),
            from: message["from"].as_str().expect("from").to_string(),
            context: message["payload"]["acpContext"].clone(),
        })
    }

    /// Tunnel an ACP message back to the bridge that sent `to`.
    async fn send(&mut self, to: &FromEditor, acp: Value) {
        let context = json!({"streamId": to.context["streamId"], "sessionId": to.context["sessionId"], "direction": "agent-to-client"});
        let sent = self
            .ws
            .call_ok("map/send", json!({"to": {"participant": to.from}, "payload": {"acp": acp, "acpContext": context}, "meta": {"protocol": "acp"}}))
            .await;
        assert_eq!(sent["delivered"].as_array().map(Vec::len), Some(1), "{sent}");
    }

    async fn answer(&mut self, to: &FromEditor, result: Value) {
        self.send(to, json!({"jsonrpc": "2.0", "id": to.acp["id"], "result": result})).await;
    }

    /// Gone without a goodbye: the TCP connection drops, no close frame, no `map/disconnect`.
    fn die(self) {
        drop(self.ws);
    }
}

async fn editor(gw: &Gateway, target: &str) -> Ws {
    Ws::connect(&format!("ws://{}/acp?agent={target}", gw.addr())).await
}

fn new_session() -> Value {
    json!({"cwd": "/work", "mcpServers": []})
}

fn message(resp: &Value) -> String {
    err(resp)["message"].as_str().unwrap_or_default().to_string()
}

/// The agent dies while the editor waits for it: the editor hears so.
async fn dies_while_asked(editor: &mut Ws, agent: Agent) {
    editor.send_text(&request(100, "session/new", new_session()).to_string()).await;
    let mut agent = agent;
    agent.next(WAIT).await.expect("the agent gets session/new");
    agent.die();
    let failed = editor.answer().await;
    assert_eq!(failed["id"], 100, "{failed}");
    assert!(message(&failed).contains("went away before answering session/new"), "{failed}");
}

#[tokio::test]
async fn an_agent_that_dies_is_not_available_and_later_requests_fail_at_once() {
    let gw = Gateway::start();
    let a = agent(&gw, "coder").await;
    let id = a.id.clone();
    let mut ed = editor(&gw, &id).await;
    dies_while_asked(&mut ed, a).await;

    // Its session may still resume, so it is still registered; the editor is told at once all the same.
    for method in ["session/new", "session/prompt"] {
        let params = if method == "session/new" { new_session() } else { json!({"sessionId": "s-1", "prompt": [{"type": "text", "text": "hi"}]}) };
        let resp = ed.try_call_within(method, params, WAIT).await.unwrap_or_else(|e| panic!("{method} got no answer: {e}"));
        assert_eq!(err_code(&resp), -32603, "{resp}");
        assert!(message(&resp).contains("The MAP agent is not available"), "{resp}");
    }
    // An editor that connects now is told the same at its first request.
    let mut late = editor(&gw, &id).await;
    let resp = late.try_call_within("initialize", json!({"protocolVersion": 1}), WAIT).await.expect("an answer");
    assert!(message(&resp).contains("The MAP agent is not available"), "{resp}");
    let (mut watcher, _) = gw.ws_connected("client", None).await;
    let listed = watcher.call_ok("map/agents/get", json!({"agentId": id})).await;
    assert_eq!(listed["agent"]["id"], id.as_str(), "the agent stays registered for its resume window");
    let ids = |r: &Value| r["agents"].as_array().expect("agents").iter().map(|a| a["id"].as_str().unwrap_or_default().to_string()).collect::<Vec<_>>();
    let dropped = watcher.call_ok("map/agents/list", json!({"filter": {"connected": false}})).await;
    assert!(ids(&dropped).contains(&id), "{dropped}");
    let live = watcher.call_ok("map/agents/list", json!({"filter": {"connected": true}})).await;
    assert!(!ids(&live).contains(&id), "{live}");
}

#[tokio::test]
async fn an_editor_bound_by_role_moves_to_the_next_live_agent_when_its_agent_dies() {
    let gw = Gateway::start();
    let first = agent(&gw, "reviewer").await;
    let mut second = agent(&gw, "reviewer").await;
    let mut ed = editor(&gw, "reviewer").await;
    dies_while_asked(&mut ed, first).await;

    ed.send_text(&request(7, "session/new", new_session()).to_string()).await;
    let asked = second.next(WAIT).await.expect("the next agent with the role gets the request");
    assert_eq!(asked.acp["method"], "session/new");
    second.answer(&asked, json!({"sessionId": "sess-2"})).await;
    let resp = ed.answer().await;
    assert_eq!(resp["id"], 7);
    assert_eq!(ok(&resp)["sessionId"], "sess-2");

    // A new editor by role gets the live agent, not the dead one registered before it.
    let mut late = editor(&gw, "reviewer").await;
    late.send_text(&request(1, "session/new", new_session()).to_string()).await;
    let asked = second.next(WAIT).await.expect("a new editor reaches the live agent");
    second.answer(&asked, json!({"sessionId": "sess-3"})).await;
    assert_eq!(ok(&late.answer().await)["sessionId"], "sess-3");
}

#[tokio::test]
async fn an_agent_that_resumes_its_session_serves_the_editor_again() {
    let gw = Gateway::start();
    let a = agent(&gw, "coder").await;
    let (id, token) = (a.id.clone(), a.resume_token.clone());
    let mut ed = editor(&gw, &id).await;
    dies_while_asked(&mut ed, a).await;
    let resp = ed.try_call_within("session/new", new_session(), WAIT).await.expect("an answer");
    assert!(message(&resp).contains("not available"), "{resp}");

    let mut ws = gw.ws().await;
    let hello = ws.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent", "resumeToken": token})).await;
    assert_eq!(hello["reconnected"], true, "{hello}");
    let mut back = Agent { ws, id, resume_token: String::new() };
    ed.send_text(&request(9, "session/new", new_session()).to_string()).await;
    let asked = back.next(WAIT).await.expect("the resumed agent gets the request");
    back.answer(&asked, json!({"sessionId": "sess-back"})).await;
    let resp = ed.answer().await;
    assert_eq!(resp["id"], 9);
    assert_eq!(ok(&resp)["sessionId"], "sess-back");
}

#[tokio::test]
async fn an_editor_request_the_agent_leaves_unanswered_fails_after_the_bound_and_a_prompt_is_cancelled() {
    let gw = Gateway::start_with(65536, &format!("{TENANTS}\n[acp]\nagent_request_timeout_ms = 1500\n"));
    let mut a = agent(&gw, "coder").await;
    let mut ed = editor(&gw, &a.id).await;

    // While the agent reports progress on the session, the prompt waits on past the bound.
    let prompt = json!({"sessionId": "sess-1", "prompt": [{"type": "text", "text": "work"}]});
    ed.send_text(&request(1, "session/prompt", prompt.clone()).to_string()).await;
    let asked = a.next(WAIT).await.expect("the agent gets the prompt");
    for n in 0..4 {
        let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "sess-1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("step {n}")}}}});
        a.send(&asked, update).await;
        let seen = ed.notification("session/update", WAIT).await.expect("the update reaches the editor");
        assert_eq!(seen["params"]["update"]["content"]["text"], format!("step {n}"));
        // Time must pass: each gap well under the 1.5 s bound, the four past it.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    a.answer(&asked, json!({"stopReason": "end_turn"})).await;
    let done = ed.answer().await;
    assert_eq!(ok(&done)["stopReason"], "end_turn", "{done}");

    // A silent agent: the editor gets an error, and the agent is told to cancel.
    ed.send_text(&request(2, "session/prompt", prompt).to_string()).await;
    a.next(WAIT).await.expect("the agent gets the second prompt");
    let failed = ed.answer_within(WAIT * 2).await;
    assert_eq!(failed["id"], 2, "{failed}");
    assert_eq!(err_code(&failed), -32603, "{failed}");
    assert!(message(&failed).contains("did not answer session/prompt within 1.5 s"), "{failed}");
    let cancel = a.next(WAIT).await.expect("the agent gets session/cancel");
    assert_eq!(cancel.acp["method"], "session/cancel");
    assert_eq!(cancel.acp["params"]["sessionId"], "sess-1");

    // Requests without a session are bounded too.
    ed.send_text(&request(3, "initialize", json!({"protocolVersion": 1})).to_string()).await;
    a.next(WAIT).await.expect("the agent gets initialize");
    let failed = ed.answer_within(WAIT * 2).await;
    assert!(message(&failed).contains("did not answer initialize within 1.5 s"), "{failed}");
}

/// A compact request of exactly `size` bytes (a prompt padded with text).
fn prompt_of(id: i64, size: usize) -> String {
    let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"session/prompt","params":{{"sessionId":"s","prompt":[{{"type":"text","text":""#);
    let tail = r#""}]}}"#;
    format!("{head}{}{tail}", "x".repeat(size - head.len() - tail.len()))
}

#[tokio::test]
async fn a_frame_over_the_size_limit_on_acp_is_refused_and_the_connection_stays_usable() {
    let limit = 8 << 20;
    let gw = Gateway::start_with(limit, TENANTS);
    let mut a = agent(&gw, "coder").await;
    let mut ed = editor(&gw, &a.id).await;

    for (id, size) in [(1, 9 << 20), (2, 8_400_000)] {
        let resp = ed.raw(&prompt_of(id, size)).await;
        assert_eq!(err_code(&resp), -32600, "{resp}");
        assert_eq!(resp["id"], id, "the editor's request is answered by its id: {resp}");
        assert!(message(&resp).contains(&format!("exceeds the limit of {limit} bytes")), "{resp}");
    }
    // Within the limit, but too large once wrapped for the agent: an error, not silence.
    ed.send_text(&prompt_of(3, limit - 64)).await;
    let resp = ed.try_answer(WAIT).await.unwrap_or_else(|e| panic!("no answer: {e}"));
    assert_eq!(resp["id"], 3, "{resp}");
    assert!(resp.get("error").is_some(), "{resp}");
    assert!(a.next(QUIET).await.is_none(), "nothing over the limit reaches the agent");

    let list = ed.try_call_within("_map/agent.list", json!({}), WAIT).await.expect("the connection still answers");
    assert!(ok(&list)["agents"].as_array().is_some_and(|l| l.iter().any(|x| x["id"] == a.id.as_str())), "{list}");
    ed.send_text(&request(4, "session/new", new_session()).to_string()).await;
    let asked = a.next(WAIT).await.expect("requests within the limit still reach the agent");
    a.answer(&asked, json!({"sessionId": "sess-ok"})).await;
    assert_eq!(ok(&ed.answer().await)["sessionId"], "sess-ok");
}

/// `map-gateway acp` launched as an editor launches it.
struct StdioBridge {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: BufReader<tokio::process::ChildStdout>,
}

impl StdioBridge {
    fn start(gw: &Gateway, agent: &str, extra: &[&str]) -> StdioBridge {
        let mut child = tokio::process::Command::new(BIN)
            .args(["acp", "--agent", agent, "--url", &gw.ws_url()])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn map-gateway acp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        StdioBridge { child, stdin, stdout }
    }

    async fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        self.stdin.write_all(b"\n").await.expect("write");
        self.stdin.flush().await.expect("flush");
    }

    /// The next answer (not a notification) within `within`.
    async fn answer(&mut self, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let mut line = String::new();
            match tokio::time::timeout_at(deadline, self.stdout.read_line(&mut line)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return None,
            }
            let v: Value = serde_json::from_str(&line).expect("a JSON line");
            if v.get("method").is_none() {
                return Some(v);
            }
        }
    }
}

#[tokio::test]
async fn the_stdio_bridge_refuses_a_line_over_the_limit_and_bounds_editor_requests() {
    let gw = Gateway::start_with(8 << 20, TENANTS);
    let mut a = agent(&gw, "coder").await;
    let mut bridge = StdioBridge::start(&gw, &a.id, &["--agent-request-timeout-ms", "1000"]);

    bridge.send(&prompt_of(1, 9 << 20)).await;
    let resp = bridge.answer(WAIT).await.expect("an answer to the line over the limit");
    assert_eq!(err_code(&resp), -32600, "{resp}");
    assert_eq!(resp["id"], 1, "{resp}");
    assert!(a.next(QUIET).await.is_none(), "nothing over the limit reaches the agent");

    bridge.send(&request(2, "_map/agent.list", json!({})).to_string()).await;
    let list = bridge.answer(WAIT).await.expect("the bridge still answers");
    assert!(ok(&list)["agents"].as_array().is_some_and(|l| l.iter().any(|x| x["id"] == a.id.as_str())), "{list}");

    bridge.send(&request(3, "session/prompt", json!({"sessionId": "s-9", "prompt": []})).to_string()).await;
    a.next(WAIT).await.expect("the agent gets the prompt");
    let failed = bridge.answer(WAIT * 2).await.expect("the unanswered prompt fails");
    assert_eq!(failed["id"], 3, "{failed}");
    assert!(message(&failed).contains("did not answer session/prompt within 1 s"), "{failed}");
    let cancel = a.next(WAIT).await.expect("the agent gets session/cancel");
    assert_eq!(cancel.acp["method"], "session/cancel");

    // The agent dies: the stdio bridge says so at once, too.
    bridge.send(&request(4, "session/new", new_session()).to_string()).await;
    a.next(WAIT).await.expect("the agent gets session/new");
    a.die();
    let failed = bridge.answer(WAIT).await.expect("the open request fails");
    assert!(message(&failed).contains("went away"), "{failed}");
    bridge.send(&request(5, "session/new", new_session()).to_string()).await;
    let failed = bridge.answer(WAIT).await.expect("a later request fails at once");
    assert!(message(&failed).contains("not available"), "{failed}");

    drop(bridge.stdin);
    let status = tokio::time::timeout(WAIT, bridge.child.wait()).await.expect("the bridge exits when stdin closes").expect("status");
    assert!(status.success(), "{status}");
}
