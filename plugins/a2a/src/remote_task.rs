//! A remote task's record, which is also the cursor of what its sending
//! agent has been told: a snapshot of the task (untrusted, checked) is
//! absorbed into it, and what that adds is reported as events, each once.

use map_plugin_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::message;
use crate::remote::Card;
use crate::task::{is_terminal, parse_state, wire_state};

pub const STATUS: &str = "a2a.remote.status";
pub const ARTIFACT: &str = "a2a.remote.artifact";
pub const MESSAGE: &str = "a2a.remote.message";
/// Message ids remembered per task (the oldest are forgotten).
const MAX_SEEN: usize = 512;
const MAX_ARTIFACTS: usize = 64;
const MAX_HISTORY: usize = 256;

/// A remote task an agent sent, and how far the bridge has reported it.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Remote {
    pub agent: String,
    /// The peer's name in the configuration, or the URL the agent gave.
    pub peer: String,
    pub card: Card,
    pub task_id: String,
    pub context_id: String,
    /// Short form (`working`); empty before the first snapshot.
    pub state: String,
    pub status: Value,
    pub artifacts: Vec<Value>,
    /// Agent messages already reported.
    pub seen: Vec<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub following: bool,
    pub follow_until_ms: u64,
    pub next_poll_ms: Option<u64>,
    /// The poll whose turn it is; only the timer tagged with it polls.
    pub gen: u64,
    pub timer: Option<u64>,
    pub failures: u32,
    pub last_error: Option<String>,
    /// Why following ended early (not terminal).
    pub stopped: Option<String>,
}

pub const REMOTES: Collection<Remote> = Collection::new("remote-tasks");
/// `<remote task id>/<record id>` → record id.
pub const BY_TASK: Collection<String> = Collection::new("remote-by-task");

/// A remote task as received, checked and reduced to the known fields.
pub struct Snapshot {
    pub task: Value,
    pub id: String,
    pub context_id: String,
    pub state: &'static str,
    at: String,
    history: Vec<Value>,
    status_message: Option<Value>,
    artifacts: Vec<Value>,
}

pub fn snapshot(v: &Value) -> Result<Snapshot, String> {
    if !v.is_object() {
        return Err("the task is not an object".into());
    }
    let id = message::id(&v["id"], "task.id")?;
    let context_id = message::optional_id(&v["contextId"], "task.contextId")?.unwrap_or_default();
    let status = v.get("status").filter(|s| s.is_object()).ok_or("task.status must be an object")?;
    let state = status["state"].as_str().and_then(parse_state).ok_or("task.status.state is not a known state")?;
    let at = status["timestamp"].as_str().filter(|t| t.len() <= 64).unwrap_or_default().to_string();
    let status_message = match &status["message"] {
        Value::Null => None,
        m => Some(message::message(m, "task.status.message", "ROLE_AGENT")?),
    };
    let list = |k: &str| match &v[k] {
        Value::Null => Ok(&[][..]),
        Value::Array(l) => Ok(&l[..]),
        _ => Err(format!("task.{k} must be a list")),
    };
    // A peer that sends more history than asked for: its latest messages.
    let all = list("history")?;
    let mut history = vec![];
    let from = all.len().saturating_sub(MAX_HISTORY);
    for (i, m) in all[from..].iter().enumerate().map(|(j, m)| (from + j, m)) {
        // The sender's own messages come back too; only the agent's are reported.
        match m["role"].as_str() {
            Some("ROLE_AGENT") => history.push(message::message(m, &format!("task.history[{i}]"), "ROLE_AGENT")?),
            Some("ROLE_USER") => history.extend(message::message(m, "", "ROLE_USER").ok()),
            _ => return Err(format!("task.history[{i}].role must be ROLE_USER or ROLE_AGENT")),
        }
    }
    let artifacts = list("artifacts")?;
    if artifacts.len() > MAX_ARTIFACTS {
        return Err(format!("task.artifacts holds more than {MAX_ARTIFACTS}"));
    }
    let artifacts = artifacts.iter().enumerate().map(|(i, a)| message::artifact(a, &format!("task.artifacts[{i}]"))).collect::<Result<Vec<_>, _>>()?;
    let mut wire = json!({"state": wire_state(state)});
    if !at.is_empty() {
        wire["timestamp"] = json!(at);
    }
    if let Some(m) = &status_message {
        wire["message"] = m.clone();
    }
    let task = json!({"id": id, "contextId": context_id, "status": wire, "artifacts": artifacts, "history": history});
    Ok(Snapshot { task, id, context_id, state, at, history, status_message, artifacts })
}

/// RFC 3339 times in UTC (as A2A writes them) in an order that compares by
/// value: `…:05Z` before `…:05.5Z`.
fn time_key(t: &str) -> Option<String> {
    let (head, tail) = (t.get(..19)?, t.get(19..)?);
    let frac: String = tail.strip_prefix('.').unwrap_or_default().chars().take_while(char::is_ascii_digit).collect();
    Some(format!("{head}{frac:0<9}"))
}

/// What `s` adds to the record, as events in order: the agent's messages
/// in the history, changed or new artifacts, the status message, then the
/// status if its state changed. A terminal record, or a snapshot older than
/// the one recorded, adds nothing.
pub fn absorb(r: &mut Remote, s: &Snapshot) -> Vec<(&'static str, Value)> {
    let stale = matches!((time_key(&s.at), time_key(r.status["timestamp"].as_str().unwrap_or_default())), (Some(a), Some(b)) if a < b);
    if is_terminal(&r.state) || stale || s.id != r.task_id {
        return vec![];
    }
    fn note(r: &mut Remote, m: &Value, out: &mut Vec<(&'static str, Value)>) {
        let id = m["messageId"].as_str().unwrap_or_default().to_string();
        if m["role"] == "ROLE_AGENT" && !r.seen.contains(&id) {
            r.seen.push(id);
            out.push((MESSAGE, json!({"message": m})));
        }
    }
    let mut out = vec![];
    for m in &s.history {
        note(r, m, &mut out);
    }
    for a in &s.artifacts {
        match r.artifacts.iter_mut().find(|x| x["artifactId"] == a["artifactId"]) {
            Some(old) if old == a => continue,
            Some(old) => *old = a.clone(),
            None => r.artifacts.push(a.clone()),
        }
        out.push((ARTIFACT, json!({"artifact": a})));
    }
    if let Some(m) = &s.status_message {
        note(r, m, &mut out);
    }
    let excess = r.seen.len().saturating_sub(MAX_SEEN);
    r.seen.drain(..excess);
    if r.context_id.is_empty() {
        r.context_id = s.context_id.clone();
    }
    r.status = s.task["status"].clone();
    if r.state != s.state {
        r.state = s.state.to_string();
        out.push((STATUS, json!({})));
    }
    out
}

/// Events to the sending agent only, with the task's facts (never credentials).
pub fn emit(r: &Remote, list: Vec<(&'static str, Value)>) {
    for (kind, extra) in list {
        let mut data = json!({"remoteTaskId": r.task_id, "contextId": r.context_id, "peer": r.peer, "agentId": r.agent, "state": r.state});
        if kind == STATUS {
            data["following"] = json!(r.following);
        }
        for (k, v) in extra.as_object().into_iter().flatten() {
            data[k] = v.clone();
        }
        events::emit_to(kind, &data, std::slice::from_ref(&r.agent));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Remote {
        let card = Card { name: "n".into(), rpc: "http://h/rpc".into(), tenant: None, fetched_ms: 0 };
        Remote {
            agent: "a".into(),
            peer: "p".into(),
            card,
            task_id: "t1".into(),
            context_id: String::new(),
            state: String::new(),
            status: Value::Null,
            artifacts: vec![],
            seen: vec![],
            created_ms: 0,
            updated_ms: 0,
            following: true,
            follow_until_ms: 0,
            next_poll_ms: None,
            gen: 0,
            timer: None,
            failures: 0,
            last_error: None,
            stopped: None,
        }
    }

    fn task(state: &str, at: &str, history: Value, status_message: Option<&str>, artifacts: Value) -> Snapshot {
        let mut status = json!({"state": state, "timestamp": at});
        if let Some(id) = status_message {
            status["message"] = json!({"messageId": id, "role": "ROLE_AGENT", "parts": [{"text": id}]});
        }
        snapshot(&json!({"id": "t1", "contextId": "c1", "status": status, "history": history, "artifacts": artifacts})).unwrap()
    }

    fn kinds(e: &[(&str, Value)]) -> Vec<&'static str> {
        e.iter()
            .map(|(k, _)| match *k {
                STATUS => "status",
                ARTIFACT => "artifact",
                _ => "message",
            })
            .collect()
    }

    #[test]
    fn each_change_is_reported_once_in_order() {
        let mut r = record();
        let user = json!([{"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "go"}]}]);
        assert_eq!(kinds(&absorb(&mut r, &task("TASK_STATE_SUBMITTED", "2026-01-01T00:00:01Z", user.clone(), None, json!([])))), ["status"]);
        assert_eq!((r.state.as_str(), r.context_id.as_str()), ("submitted", "c1"));
        let working = task("TASK_STATE_WORKING", "2026-01-01T00:00:02.5Z", user.clone(), Some("m1"), json!([]));
        assert_eq!(kinds(&absorb(&mut r, &working)), ["message", "status"]);
        assert!(absorb(&mut r, &working).is_empty(), "the same snapshot again adds nothing");
        // The status message moves into the history: not reported again.
        let hist = json!([user[0], {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "m1"}]}]);
        let art = json!([{"artifactId": "a1", "parts": [{"text": "v1"}]}]);
        assert_eq!(kinds(&absorb(&mut r, &task("TASK_STATE_WORKING", "2026-01-01T00:00:03Z", hist.clone(), None, art.clone()))), ["artifact"]);
        // Older than what is recorded: ignored.
        assert!(absorb(&mut r, &task("TASK_STATE_SUBMITTED", "2026-01-01T00:00:02Z", user, None, json!([]))).is_empty());
        let art2 = json!([{"artifactId": "a1", "parts": [{"text": "v2"}]}, {"artifactId": "a2", "parts": [{"data": {"n": 1}}]}]);
        let done = task("TASK_STATE_COMPLETED", "2026-01-01T00:00:04Z", hist.clone(), Some("m2"), art2.clone());
        assert_eq!(kinds(&absorb(&mut r, &done)), ["artifact", "artifact", "message", "status"]);
        assert_eq!(r.artifacts, art2.as_array().unwrap().clone());
        assert!(absorb(&mut r, &task("TASK_STATE_WORKING", "2026-01-01T00:00:09Z", hist, None, json!([]))).is_empty(), "terminal stays terminal");
    }

    #[test]
    fn snapshots_check_the_untrusted_task() {
        assert!(snapshot(&json!({"id": "t", "status": {"state": "TASK_STATE_BOGUS"}})).is_err());
        assert!(snapshot(&json!({"id": "t", "status": {"state": "TASK_STATE_WORKING"}, "artifacts": [{"parts": [{"text": "no id"}]}]})).is_err());
        assert!(snapshot(
            &json!({"id": "t", "status": {"state": "TASK_STATE_WORKING", "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}})
        )
        .is_err());
        assert!(snapshot(&json!({"id": "", "status": {"state": "TASK_STATE_WORKING"}})).is_err());
        let mut long: Vec<Value> = (0..300).map(|i| json!({"messageId": format!("u{i}"), "role": "ROLE_USER", "parts": [{"text": "x"}]})).collect();
        long.push(json!({"messageId": "last", "role": "ROLE_AGENT", "parts": [{"text": "y"}]}));
        let s = snapshot(&json!({"id": "t", "status": {"state": "TASK_STATE_WORKING"}, "history": long})).unwrap();
        assert_eq!((s.history.len(), s.history[MAX_HISTORY - 1]["messageId"].as_str()), (MAX_HISTORY, Some("last")), "the latest of a long history");
        let s = snapshot(&json!({"id": "t", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}, "extra": 1})).unwrap();
        assert_eq!((s.state, s.task["status"]["state"].as_str()), ("input-required", Some("TASK_STATE_INPUT_REQUIRED")));
    }

    #[test]
    fn times_compare_by_value() {
        assert!(time_key("2026-01-01T00:00:05Z") < time_key("2026-01-01T00:00:05.5Z"));
        assert!(time_key("2026-01-01T00:00:05.25Z") < time_key("2026-01-01T00:00:05.3Z"));
        assert_eq!(time_key("soon"), None);
    }
}
