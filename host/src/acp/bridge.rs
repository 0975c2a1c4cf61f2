//! One editor's ACP connection, bound to one MAP agent. The gateway plays
//! the ACP agent towards the editor; every message travels to the MAP agent
//! through MAP's ACP tunnel (`map/send` with `{acp, acpContext}` and
//! `meta: {protocol: "acp", correlationId}`), and the agent's answers,
//! `session/update` notifications and requests to the editor come back as
//! `map/message`s addressed to the bridge's participant.
//!
//! Translated between the MAP SDK's ACP and official ACP: the permission
//! request (`request_permission` ↔ `session/request_permission`, accepted
//! either way from the agent), and `initialize`'s protocol version (the
//! editor is answered with the version it asked for when the agent answers
//! with the SDK's date-like `20241007`).
//!
//! Bounds: an editor message over the size limit is refused by its id; an
//! agent whose owner is not connected (dropped, perhaps to resume) is not
//! available, so a role finds the next connected agent; an editor request
//! the agent leaves unanswered and silent too long fails.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::compat;
use super::link::Link;

/// How the bridge is set up.
#[derive(Clone, Debug)]
pub struct Options {
    /// The MAP agent: its id, or a role (the first agent with that role).
    pub agent: String,
    /// How long a request of the agent to the editor may stay unanswered.
    pub client_request_timeout: Duration,
    /// How long a request of the editor may wait while the agent sends
    /// nothing on its session.
    pub agent_request_timeout: Duration,
    /// The largest message the editor may send.
    pub max_message_bytes: usize,
}

/// The agent → editor permission request, as the MAP SDK names it and as ACP does.
const SDK_PERMISSION: &str = "request_permission";
const ACP_PERMISSION: &str = "session/request_permission";

/// Protocol versions above this are the MAP SDK's date-like ones.
const LARGEST_ACP_VERSION: u64 = 65535;

fn error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// The answer to an editor message of `size` bytes over `limit`, by the
/// request's `id` when it could be read (so the editor's call ends), else null.
pub fn too_large(id: &Value, size: usize, limit: usize) -> String {
    error(id, -32600, format!("Invalid Request: message of {size} bytes exceeds the limit of {limit} bytes")).to_string()
}

/// The id of a JSON-RPC message, read without keeping the rest.
fn request_id(message: &[u8]) -> Value {
    #[derive(Deserialize)]
    struct Id {
        #[serde(default)]
        id: Value,
    }
    serde_json::from_slice::<Id>(message).map(|m| m.id).unwrap_or(Value::Null)
}

/// A request of the editor that the agent has not answered yet.
struct Waiting {
    id: Value,
    method: String,
    /// The ACP session it names, if any: the agent's word on it (an update,
    /// a request to the editor) restarts the wait.
    session: Option<String>,
    deadline: Instant,
}

struct Bridge {
    link: Link,
    opts: Options,
    to_editor: mpsc::Sender<String>,
    stream_id: String,
    /// The bound agent's id and owning participant, once found.
    agent: Option<(String, String)>,
    /// Why the bound agent is unavailable, when it went away.
    gone: Option<String>,
    /// The MAP session is open (`map/connect` succeeded).
    connected: bool,
    session_id: Option<String>,
    /// The protocol version the editor asked for in `initialize`.
    editor_version: Option<Value>,
    /// Editor requests waiting for the agent, by id (as JSON text).
    awaiting_agent: HashMap<String, Waiting>,
    /// Agent requests waiting for the editor: id (as JSON text) → (id, deadline).
    awaiting_editor: HashMap<String, (Value, Instant)>,
    /// The subscription that tells when the agent goes.
    watch: Option<String>,
    /// Subscriptions the editor made with `_map/subscribe`.
    editor_subscriptions: Vec<String>,
}

/// Serve one editor until it goes (`from_editor` ends) or the MAP side closes.
pub async fn run(
    link: Link,
    mut notes: mpsc::Receiver<Value>,
    mut from_editor: mpsc::Receiver<String>,
    to_editor: mpsc::Sender<String>,
    opts: Options,
    auth: Option<Value>,
) {
    let mut hello = json!({"protocolVersion": 1, "participantType": "client", "name": "acp-bridge"});
    if let Some(a) = auth {
        hello["auth"] = a;
    }
    let refusal = match link.call("map/connect", hello).await {
        Ok(r) if r.get("authRequired").is_none() => None,
        // Refused credentials are answered with `authRequired` and the reason.
        Ok(r) => Some(match r["error"]["message"].as_str() {
            Some(why) => format!("map/connect failed: {why}"),
            None => "the gateway asked for credentials: give the bridge an API key or a token".to_string(),
        }),
        Err(e) => Some(format!("map/connect failed: {}", e["message"].as_str().unwrap_or("unknown error"))),
    };
    let mut b = Bridge {
        link,
        opts,
        to_editor,
        stream_id: format!("acp-{}", map_protocol::ids::ulid()),
        agent: None,
        connected: refusal.is_none(),
        gone: refusal,
        session_id: None,
        editor_version: None,
        awaiting_agent: HashMap::new(),
        awaiting_editor: HashMap::new(),
        watch: None,
        editor_subscriptions: Vec::new(),
    };
    if b.connected {
        b.bind().await;
    }
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            line = from_editor.recv() => match line {
                Some(line) => b.from_editor(&line).await,
                None => break,
            },
            note = notes.recv() => match note {
                Some(n) => b.from_map(n).await,
                None => {
                    b.agent_gone("the gateway closed the MAP session").await;
                    break;
                }
            },
            _ = tick.tick() => b.expire().await,
        }
    }
    b.editor_left().await;
}

impl Bridge {
    async fn send_editor(&self, v: Value) {
        let _ = self.to_editor.send(v.to_string()).await;
    }

    /// The agents `filter` selects (the first 1000).
    async fn agents(&self, filter: Value) -> Vec<Value> {
        let listed = self.link.call("map/agents/list", json!({"filter": filter, "limit": 1000})).await.unwrap_or_default();
        listed["agents"].as_array().cloned().unwrap_or_default()
    }

    /// The agent to bind: the one with the wanted id, else the first with
    /// that role, whose owner is connected now (an agent whose session
    /// dropped stays registered while it may resume, but answers nothing).
    async fn find(&self) -> Result<Value, String> {
        let wanted = &self.opts.agent;
        if let Ok(r) = self.link.call("map/agents/get", json!({"agentId": wanted})).await {
            let agent = r["agent"].clone();
            let live = self.agents(json!({"ownerId": agent["ownerId"], "connected": true})).await;
            return match live.into_iter().find(|a| a["id"] == agent["id"]) {
                Some(a) => Ok(a),
                None => Err(format!("agent {wanted} is not connected")),
            };
        }
        if let Some(a) = self.agents(json!({"roles": [wanted], "connected": true})).await.into_iter().next() {
            return Ok(a);
        }
        if self.agents(json!({"roles": [wanted]})).await.is_empty() {
            Err(format!("no MAP agent has the id or role {wanted:?}"))
        } else {
            Err(format!("no agent with the role {wanted:?} is connected"))
        }
    }

    /// Find the agent and watch for it going.
    async fn bind(&mut self) {
        let agent = match self.find().await {
            Ok(a) => a,
            Err(why) => {
                self.gone = Some(why);
                return;
            }
        };
        let id = agent["id"].as_str().unwrap_or_default().to_string();
        let owner = agent["ownerId"].as_str().unwrap_or_default().to_string();
        if self.watch.is_none() {
            let filter = json!({"filter": {"eventTypes": ["agent_unregistered", "agent_state_changed", "participant_disconnected"]}});
            self.watch = self.link.call("map/subscribe", filter).await.ok().and_then(|r| r["subscriptionId"].as_str().map(String::from));
        }
        tracing::debug!(agent = id, stream = self.stream_id, "ACP bridge bound");
        self.agent = Some((id, owner));
        self.gone = None;
    }

    async fn from_editor(&mut self, line: &str) {
        if line.len() > self.opts.max_message_bytes {
            let _ = self.to_editor.send(too_large(&request_id(line.as_bytes()), line.len(), self.opts.max_message_bytes)).await;
            return;
        }
        let msg: Value = match serde_json::from_str(line) {
            Ok(Value::Object(m)) => Value::Object(m),
            Ok(_) => return self.send_editor(error(&Value::Null, -32600, "Invalid Request: one JSON-RPC object per message")).await,
            Err(e) => return self.send_editor(error(&Value::Null, -32700, format!("Parse error: {e}"))).await,
        };
        let id = msg.get("id").cloned();
        let Some(method) = msg.get("method").and_then(Value::as_str).map(str::to_string) else {
            // An answer to a request of the agent.
            if let Some(id) = id {
                if self.awaiting_editor.remove(&id.to_string()).is_some() {
                    if let Err(why) = self.to_agent(msg, None).await {
                        tracing::debug!(stream = self.stream_id, why, "an answer of the editor did not reach the agent");
                    }
                }
            }
            return;
        };
        if method.starts_with("_map/") {
            let answer = compat::call(&self.link, &method, msg.get("params").cloned().unwrap_or(Value::Null)).await;
            if let (Ok(r), "_map/subscribe") = (&answer, method.as_str()) {
                self.editor_subscriptions.extend(r["subscriptionId"].as_str().map(String::from));
            }
            if let Some(id) = id {
                let reply = match answer {
                    Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
                };
                self.send_editor(reply).await;
            }
            return;
        }
        if method == "initialize" {
            self.editor_version = msg.pointer("/params/protocolVersion").cloned();
        }
        if self.connected && (self.agent.is_none() || self.gone.is_some()) {
            // Bound by role, another agent may have it now.
            self.bind().await;
        }
        if let Some(why) = self.gone.clone() {
            if let Some(id) = id {
                self.send_editor(error(&id, -32603, format!("The MAP agent is not available: {why}"))).await;
            }
            return;
        }
        let named = msg.pointer("/params/sessionId").and_then(Value::as_str).map(String::from);
        if let Some(id) = &id {
            let deadline = Instant::now() + self.opts.agent_request_timeout;
            self.awaiting_agent.insert(id.to_string(), Waiting { id: id.clone(), method: method.clone(), session: named.clone(), deadline });
        }
        if let Err(why) = self.to_agent(msg, named).await {
            if let Some(id) = id {
                self.awaiting_agent.remove(&id.to_string());
                self.send_editor(error(&id, -32603, format!("The MAP agent could not be reached: {why}"))).await;
            }
        }
    }

    /// Wrap an ACP message for the agent and `map/send` it.
    async fn to_agent(&mut self, acp: Value, session: Option<String>) -> Result<(), String> {
        let Some((agent, _)) = &self.agent else { return Err("no agent is bound".into()) };
        let mut meta = json!({"protocol": "acp"});
        if let Some(id) = acp.get("id") {
            meta["correlationId"] = json!(match id {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
        let payload = json!({"acp": acp, "acpContext": {"streamId": self.stream_id, "sessionId": session.or_else(|| self.session_id.clone()), "direction": "client-to-agent"}});
        match self.link.call("map/send", json!({"to": {"agent": agent}, "payload": payload, "meta": meta})).await {
            Ok(r) if r["delivered"].as_array().is_some_and(|d| !d.is_empty()) => Ok(()),
            Ok(_) => Err(format!("agent {agent} is not connected")),
            Err(e) => Err(e["message"].as_str().unwrap_or("map/send failed").to_string()),
        }
    }

    async fn from_map(&mut self, note: Value) {
        match note["method"].as_str() {
            Some("map/message") => {
                let message = note["params"].get("message").unwrap_or(&note["params"]).clone();
                let payload = &message["payload"];
                if payload["acpContext"]["streamId"] != self.stream_id.as_str() || !payload["acp"].is_object() {
                    return;
                }
                self.from_agent(payload["acp"].clone(), &payload["acpContext"]).await;
            }
            Some("map/event") => {
                let params = &note["params"];
                let sub = params["subscriptionId"].as_str().unwrap_or_default();
                if self.watch.as_deref() == Some(sub) {
                    self.watch_event(&params["event"]).await;
                } else if self.editor_subscriptions.iter().any(|s| s == sub) {
                    self.send_editor(json!({"jsonrpc": "2.0", "method": "_map/event", "params": params})).await;
                }
            }
            _ => {}
        }
    }

    async fn from_agent(&mut self, mut acp: Value, context: &Value) {
        let Some(obj) = acp.as_object_mut() else { return };
        obj.insert("jsonrpc".into(), json!("2.0"));
        if let Some(s) = context["sessionId"].as_str() {
            self.session_id = Some(s.to_string());
        }
        // Word from the agent on a session: its requests there are not forgotten.
        let session = obj.get("params").and_then(|p| p.get("sessionId")).or(context.get("sessionId")).and_then(Value::as_str);
        if let Some(session) = session {
            let deadline = Instant::now() + self.opts.agent_request_timeout;
            for w in self.awaiting_agent.values_mut().filter(|w| w.session.as_deref() == Some(session)) {
                w.deadline = deadline;
            }
        }
        match (obj.get("method").and_then(Value::as_str).map(str::to_string), obj.get("id").cloned()) {
            // A request of the agent to the editor (or a notification such as session/update).
            (Some(method), id) => {
                if method == SDK_PERMISSION {
                    obj.insert("method".into(), json!(ACP_PERMISSION));
                }
                if let Some(id) = id {
                    self.awaiting_editor.insert(id.to_string(), (id, Instant::now() + self.opts.client_request_timeout));
                }
            }
            // The answer to a request of the editor.
            (None, Some(id)) => {
                let Some(Waiting { method, .. }) = self.awaiting_agent.remove(&id.to_string()) else { return };
                match method.as_str() {
                    "initialize" => self.negotiate(obj),
                    "session/new" => {
                        if let Some(s) = obj.get("result").and_then(|r| r.get("sessionId")).and_then(Value::as_str) {
                            self.session_id = Some(s.to_string());
                        }
                    }
                    _ => {}
                }
            }
            (None, None) => return,
        }
        self.send_editor(acp).await;
    }

    /// The editor asked for an ACP version (1); an agent on the MAP SDK
    /// answers with its own date-like one, which the editor would refuse.
    fn negotiate(&self, answer: &mut Map<String, Value>) {
        let Some(result) = answer.get_mut("result").and_then(Value::as_object_mut) else { return };
        let agent = result.get("protocolVersion").and_then(Value::as_u64);
        let editor = self.editor_version.as_ref().and_then(Value::as_u64);
        if let (Some(a), Some(e)) = (agent, editor) {
            if a > LARGEST_ACP_VERSION && e <= LARGEST_ACP_VERSION {
                result.insert("protocolVersion".into(), json!(e));
            }
        }
    }

    async fn watch_event(&mut self, event: &Value) {
        let Some((agent, owner)) = self.agent.clone() else { return };
        let data = &event["data"];
        let why = match event["type"].as_str().unwrap_or_default() {
            "agent_unregistered" if data["agentId"] == agent.as_str() => Some(format!("agent {agent} was unregistered")),
            "agent_state_changed"
                if data["agentId"] == agent.as_str() && matches!(data["state"].as_str().or(data["newState"].as_str()), Some("stopped" | "failed")) =>
            {
                Some(format!("agent {agent} stopped"))
            }
            "participant_disconnected" if data["participantId"] == owner.as_str() => Some(format!("agent {agent} disconnected")),
            _ => None,
        };
        if let Some(why) = why {
            self.agent_gone(&why).await;
        }
    }

    /// The agent went: every request of the editor it had not answered fails now.
    async fn agent_gone(&mut self, why: &str) {
        tracing::debug!(stream = self.stream_id, why, "ACP bridge: the agent is gone");
        self.gone = Some(why.to_string());
        self.agent = None;
        for (_, w) in std::mem::take(&mut self.awaiting_agent) {
            self.send_editor(error(&w.id, -32603, format!("The MAP agent went away before answering {}: {why}", w.method))).await;
        }
        self.awaiting_editor.clear();
    }

    /// Requests left unanswered too long: those of the agent (the agent is
    /// told), and those of the editor (the editor is told, and a prompt is
    /// cancelled on the agent's side).
    async fn expire(&mut self) {
        let now = Instant::now();
        let late: Vec<String> = self.awaiting_agent.iter().filter(|(_, w)| w.deadline <= now).map(|(k, _)| k.clone()).collect();
        for key in late {
            let Some(w) = self.awaiting_agent.remove(&key) else { continue };
            let secs = self.opts.agent_request_timeout.as_secs_f64();
            tracing::debug!(stream = self.stream_id, method = w.method, "ACP bridge: the agent did not answer in time");
            self.send_editor(error(&w.id, -32603, format!("The MAP agent did not answer {} within {secs} s", w.method))).await;
            if w.method == "session/prompt" {
                self.cancel(w.session).await;
            }
        }
        let late: Vec<String> = self.awaiting_editor.iter().filter(|(_, (_, at))| *at <= now).map(|(k, _)| k.clone()).collect();
        for key in late {
            let Some((id, _)) = self.awaiting_editor.remove(&key) else { continue };
            let secs = self.opts.client_request_timeout.as_secs_f64();
            let _ = self.to_agent(error(&id, -32603, format!("the editor did not answer within {secs} s")), None).await;
        }
    }

    /// The editor went: the agent hears that its requests will not be
    /// answered and that running prompts are cancelled.
    async fn editor_left(&mut self) {
        if self.agent.is_none() {
            return;
        }
        for (_, (id, _)) in std::mem::take(&mut self.awaiting_editor) {
            let _ = self.to_agent(error(&id, -32603, "the editor disconnected"), None).await;
        }
        let prompts: Vec<Option<String>> = self.awaiting_agent.values().filter(|w| w.method == "session/prompt").map(|w| w.session.clone()).collect();
        for session in prompts {
            self.cancel(session).await;
        }
        let _ = self.link.call("map/disconnect", json!({})).await;
    }

    /// ACP's way to stop a running prompt: `session/cancel` for its session.
    async fn cancel(&mut self, session: Option<String>) {
        let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}});
        let _ = self.to_agent(cancel, session).await;
    }
}
