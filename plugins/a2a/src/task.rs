//! Durable A2A tasks in the tenant's store. Every change is one conditional
//! batch: the task, the next numbered update (a StreamResponse, which SSE
//! replays in order) and, for a new task, the tenant's task count.

use map_plugin_sdk::store::{keys, retry, Batch, Collection, Counter};
use map_plugin_sdk::{events, ids, Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A task and who serves it.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub context_id: String,
    /// The MAP agent that serves it.
    pub agent: String,
    pub status: Value,
    pub artifacts: Vec<Value>,
    pub history: Vec<Value>,
    pub created_ms: u64,
    /// Updates recorded so far (the next one's number).
    pub seq: u64,
    /// The agent's answer to the client's latest message, when an
    /// `a2a/reply` was the first thing it did (a blocking SendMessage returns it).
    #[serde(default)]
    pub first_reply: Option<Value>,
    /// `seq` when the client's latest message was recorded.
    #[serde(default)]
    pub turn_start: u64,
}

pub const TASKS: Collection<Task> = Collection::new("tasks");
/// `<task>/<seq>`: the task's updates, as A2A StreamResponses.
pub const UPDATES: Collection<Value> = Collection::new("updates");
/// `<created ms>/<task>`: every task, oldest first (ListTasks).
pub const BY_TIME: Collection<String> = Collection::new("by-time");
pub const COUNT: Counter = Counter::new("count");

pub const STATES: [&str; 8] = ["submitted", "working", "input-required", "completed", "canceled", "failed", "rejected", "auth-required"];

/// `TASK_STATE_INPUT_REQUIRED` for `input-required`, and back.
pub fn wire_state(state: &str) -> String {
    format!("TASK_STATE_{}", state.replace('-', "_").to_ascii_uppercase())
}

pub fn parse_state(s: &str) -> Option<&'static str> {
    let short = s.strip_prefix("TASK_STATE_").map(|t| t.to_ascii_lowercase().replace('_', "-")).unwrap_or_else(|| s.to_string());
    STATES.iter().copied().find(|x| *x == short)
}

pub fn is_terminal(state: &str) -> bool {
    matches!(state, "completed" | "canceled" | "failed" | "rejected")
}

/// Whether a blocking SendMessage stops waiting at this state.
pub fn is_settled(state: &str) -> bool {
    is_terminal(state) || matches!(state, "input-required" | "auth-required")
}

impl Task {
    pub fn state(&self) -> &'static str {
        self.status["state"].as_str().and_then(parse_state).unwrap_or("submitted")
    }

    /// The A2A Task, with at most `history` messages of history (none, and
    /// no `history` field, for 0: A2A §3.2.4).
    pub fn wire(&self, history: Option<usize>, artifacts: bool) -> Value {
        let skip = history.map_or(0, |n| self.history.len().saturating_sub(n));
        let mut t = json!({"id": self.id, "contextId": self.context_id, "status": self.status});
        if history != Some(0) {
            t["history"] = json!(self.history[skip..]);
        }
        if artifacts {
            t["artifacts"] = json!(self.artifacts);
        }
        t
    }

    fn status_event(&self, final_: bool) -> Value {
        json!({"statusUpdate": {"taskId": self.id, "contextId": self.context_id, "status": self.status, "metadata": {"final": final_}}})
    }
}

/// The task's key in [`BY_TIME`].
pub fn time_key(created_ms: u64, task: &str) -> String {
    keys::join(&[keys::number(created_ms), keys::escape(task)])
}

pub fn key_of(task: &str, seq: u64) -> String {
    keys::join(&[keys::escape(task), keys::number(seq)])
}

fn status(state: &str, message: Option<&Value>) -> Value {
    let mut s = json!({"state": wire_state(state), "timestamp": ids::iso8601(ids::now_ms())});
    if let Some(m) = message {
        s["message"] = m.clone();
    }
    s
}

/// A new task in `submitted`, with the client's message; `None` past the tenant's limit.
pub fn create(agent: &str, context_id: &str, message: &Value, limit: i64) -> Result<Option<Task>> {
    let (id, now) = ids::new_id_at("task");
    let mut task = Task {
        id,
        context_id: context_id.to_string(),
        agent: agent.to_string(),
        status: status("submitted", None),
        artifacts: vec![],
        history: vec![message.clone()],
        created_ms: now,
        seq: 0,
        first_reply: None,
        turn_start: 1,
    };
    task.history[0]["taskId"] = json!(task.id);
    task.history[0]["contextId"] = json!(task.context_id);
    let mut batch = Batch::new();
    let slot = batch.add(&COUNT, "all", 1);
    batch.expect_absent(&TASKS, task.id.clone());
    batch.put(&UPDATES, key_of(&task.id, 0), &json!({"task": task.wire(None, true)}));
    task.seq = 1;
    batch.put(&TASKS, task.id.clone(), &task).put(&BY_TIME, time_key(now, &task.id), &task.id);
    let done = batch.apply()?;
    if done.counter(slot) > limit {
        // Over the wall: undone, so the count stays at the limit.
        let mut undo = Batch::new();
        undo.add(&COUNT, "all", -1);
        undo.delete(&TASKS, task.id.clone()).delete(&UPDATES, key_of(&task.id, 0)).delete(&BY_TIME, time_key(now, &task.id));
        undo.apply()?;
        return Ok(None);
    }
    emit("a2a.task.created", &task);
    Ok(Some(task))
}

/// What a change does to a task.
#[derive(Default)]
pub struct Change {
    pub state: Option<&'static str>,
    pub message: Option<Value>,
    pub artifacts: Vec<Value>,
    /// The message is the agent's answer (`a2a/reply`).
    pub reply: bool,
    /// The message is the client's next turn (kept out of the status).
    pub user: bool,
}

/// Apply a change unless the task is already terminal (then `Err(state)`).
pub fn change(id: &str, c: &Change) -> Result<std::result::Result<Task, &'static str>> {
    retry(|| {
        let current = TASKS.get_versioned(id)?;
        let mut task = current.value.ok_or_else(|| Error::internal(format!("task {id} vanished")))?;
        if is_terminal(task.state()) {
            return Ok(map_plugin_sdk::store::Attempt::Done(Err(task.state())));
        }
        let mut batch = Batch::new();
        batch.expect_version(&TASKS, id.to_string(), current.version);
        for a in &c.artifacts {
            batch.put(
                &UPDATES,
                key_of(id, task.seq),
                &json!({"artifactUpdate": {"taskId": id, "contextId": task.context_id, "artifact": a, "append": false, "lastChunk": true}}),
            );
            task.seq += 1;
            match task.artifacts.iter_mut().find(|x| x["artifactId"] == a["artifactId"]) {
                Some(old) => *old = a.clone(),
                None => task.artifacts.push(a.clone()),
            }
        }
        if let Some(m) = &c.message {
            task.history.push(m.clone());
            if c.reply && task.first_reply.is_none() && task.seq == task.turn_start {
                task.first_reply = Some(m.clone());
            }
        }
        if c.state.is_some() || c.message.is_some() {
            let state = c.state.unwrap_or(task.state());
            task.status = status(state, c.message.as_ref().filter(|_| !c.user));
            batch.put(&UPDATES, key_of(id, task.seq), &task.status_event(is_terminal(state)));
            task.seq += 1;
        }
        if c.user {
            task.first_reply = None;
            task.turn_start = task.seq;
        }
        batch.put(&TASKS, id.to_string(), &task);
        Ok(batch.commit()?.then(|_| Ok(task)))
    })
    .inspect(|r| {
        if let Ok(task) = r {
            for a in &c.artifacts {
                emit_data("a2a.task.artifact", task, json!({"artifactId": a["artifactId"]}));
            }
            if c.state.is_some() || c.message.is_some() {
                emit("a2a.task.status", task);
            }
        }
    })
}

fn emit(event: &str, task: &Task) {
    emit_data(event, task, json!({}));
}

fn emit_data(event: &str, task: &Task, mut data: Value) {
    data["taskId"] = json!(task.id);
    data["contextId"] = json!(task.context_id);
    data["agentId"] = json!(task.agent);
    data["state"] = json!(task.state());
    events::emit(event, &data);
}

/// The task's updates from `from` on, in order.
pub fn updates(id: &str, from: u64) -> Result<Vec<Value>> {
    let prefix = keys::prefix(&[keys::escape(id)]);
    let mut range = UPDATES.prefix(prefix);
    if from > 0 {
        range = range.after(key_of(id, from - 1));
    }
    range.values()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip() {
        for s in STATES {
            assert_eq!(parse_state(&wire_state(s)), Some(s));
            assert_eq!(parse_state(s), Some(s));
        }
        assert_eq!(parse_state("TASK_STATE_UNSPECIFIED"), None);
        assert!(is_terminal("canceled") && !is_terminal("input-required") && is_settled("input-required"));
    }
}
