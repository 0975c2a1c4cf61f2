//! A task's record in mail: one conversation per task, opened with the
//! serving agent as a participant, and a turn for each message (the
//! client's and the agent's) and each artifact, in the order the task
//! recorded them. The task store stays the source of truth: a tenant
//! without mail, or a mail call that fails, leaves the task as it is.

use map_plugin_sdk::store::Collection;
use map_plugin_sdk::{log, router};
use serde_json::{json, Value};

use crate::task::Task;

/// Task id → its mail conversation ("" when mail is not enabled for the tenant).
pub const CONVERSATIONS: Collection<String> = Collection::new("mail");

/// The task's conversation, opened on first use.
fn conversation(t: &Task) -> Option<String> {
    match CONVERSATIONS.get(&t.id) {
        Ok(Some(id)) => return Some(id).filter(|id| !id.is_empty()),
        Ok(None) => {}
        Err(e) => {
            log::warn(&format!("reading task {}'s mail conversation: {}", t.id, e.message()));
            return None;
        }
    }
    let params = json!({
        "subject": format!("A2A task {}", t.id),
        "initialParticipants": [{"id": t.agent, "type": "agent"}],
        "metadata": {"a2a": {"taskId": t.id, "contextId": t.context_id, "agentId": t.agent}},
    });
    let id = match router::call("mail/create", &params) {
        Ok(created) => created["conversation"]["id"].as_str().unwrap_or_default().to_string(),
        // Mail is not enabled for this tenant: remembered, so no task asks again.
        Err(e) if e.code == -32601 => String::new(),
        Err(e) => {
            log::warn(&format!("opening task {}'s mail conversation: {}", t.id, e.message));
            return None;
        }
    };
    if let Err(e) = CONVERSATIONS.put(&t.id, &id) {
        log::warn(&format!("keeping task {}'s mail conversation: {}", t.id, e.message()));
    }
    Some(id).filter(|id| !id.is_empty())
}

/// Record what a change added: a message (with the state it left the task
/// in) and artifacts.
pub fn record(t: &Task, message: Option<&Value>, artifacts: &[Value]) {
    if message.is_none() && artifacts.is_empty() {
        return;
    }
    let Some(conversation) = conversation(t) else { return };
    let mut turns: Vec<Value> = message.map(|m| json!({"a2a": {"taskId": t.id, "state": t.state(), "message": m}})).into_iter().collect();
    turns.extend(artifacts.iter().map(|a| json!({"a2a": {"taskId": t.id, "state": t.state(), "artifact": a}})));
    for content in turns {
        if let Err(e) = router::call("mail/turn", &json!({"conversationId": conversation, "contentType": "data", "content": content})) {
            log::warn(&format!("recording task {} in mail conversation {conversation}: {}", t.id, e.message));
        }
    }
}
