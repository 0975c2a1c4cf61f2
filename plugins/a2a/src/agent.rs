//! What MAP agents call: `a2a/reply {taskId, message, final?}` answers the
//! client with a message (final by default: the task completes), and
//! `a2a/task/update {taskId, state?, message?, artifacts?}` moves the task
//! and adds artifacts. Only the agent that serves a task may change it, and
//! a terminal task no longer changes. `a2a/tasks` lists the tenant's tasks
//! for any session of it (the dashboard's panel).

use map_plugin_sdk::{ids, Call, Error, Reply, Result};
use serde_json::{json, Value};

use crate::message;
use crate::progress;
use crate::settings::Settings;
use crate::task::{self, Change, Task, TASKS};
use crate::{NOT_YOURS, TASK_FINAL, TASK_NOT_FOUND};

const MAX_ARTIFACTS: usize = 32;

fn mine(call: &Call, p: &Value) -> Result<Task> {
    let id = message::id(p.get("taskId").unwrap_or(&Value::Null), "taskId").map_err(Error::invalid_params)?;
    let t = TASKS.get(&id)?.ok_or_else(|| Error::new(TASK_NOT_FOUND, format!("no A2A task {id}")).with_details(json!({"taskId": id})))?;
    if !call.caller.agent_ids.contains(&t.agent) {
        return Err(Error::new(NOT_YOURS, format!("task {id} is served by another agent")).with_details(json!({"taskId": id})));
    }
    Ok(t)
}

fn only(p: &Value, known: &[&str]) -> Result<()> {
    match p.as_object().and_then(|o| o.keys().find(|k| !known.contains(&k.as_str()))) {
        Some(k) => Err(Error::invalid_params(format!("unknown parameter {k:?}"))),
        None => Ok(()),
    }
}

/// The agent's message, stamped with the task's ids (a missing messageId is made).
fn agent_message(v: &Value, t: &Task) -> Result<Value> {
    let mut v = v.clone();
    if v.is_object() && v.get("messageId").is_none() {
        v["messageId"] = json!(ids::new_id("msg"));
    }
    let mut m = message::message(&v, "message", "ROLE_AGENT").map_err(Error::invalid_params)?;
    m["taskId"] = json!(t.id);
    m["contextId"] = json!(t.context_id);
    Ok(m)
}

fn apply(t: &Task, c: &Change) -> Result<Reply> {
    match progress::change(&t.id, c, &Settings::load())? {
        Ok(t) => Reply::json(&json!({"task": t.wire(Some(0), false)})),
        Err(state) => {
            Err(Error::new(TASK_FINAL, format!("task {} is {state}: a terminal task does not change", t.id))
                .with_details(json!({"taskId": t.id, "state": state})))
        }
    }
}

pub fn reply(call: &Call) -> Result<Reply> {
    let p: Value = call.params()?;
    only(&p, &["taskId", "message", "final"])?;
    let t = mine(call, &p)?;
    let m = agent_message(p.get("message").unwrap_or(&Value::Null), &t)?;
    let final_ = match p.get("final") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(Error::invalid_params("final must be a boolean")),
    };
    let state = if final_ { "completed" } else { "working" };
    apply(&t, &Change { state: Some(state), message: Some(m), artifacts: vec![], reply: true, user: false })
}

pub fn update(call: &Call) -> Result<Reply> {
    let p: Value = call.params()?;
    only(&p, &["taskId", "state", "message", "artifacts"])?;
    let t = mine(call, &p)?;
    let state = match p.get("state") {
        None | Some(Value::Null) => None,
        Some(s) => match s.as_str().and_then(task::parse_state) {
            Some("submitted") | None => return Err(Error::invalid_params(format!("state must be one of {:?} but submitted", task::STATES))),
            st => st,
        },
    };
    let message = match p.get("message") {
        None | Some(Value::Null) => None,
        Some(m) => Some(agent_message(m, &t)?),
    };
    let artifacts = match p.get("artifacts") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(list)) if list.len() <= MAX_ARTIFACTS => list
            .iter()
            .enumerate()
            .map(|(i, a)| message::artifact(a, &format!("artifacts[{i}]")))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(Error::invalid_params)?,
        Some(_) => return Err(Error::invalid_params(format!("artifacts must be a list of at most {MAX_ARTIFACTS}"))),
    };
    if state.is_none() && message.is_none() && artifacts.is_empty() {
        return Err(Error::invalid_params("give a state, a message or artifacts"));
    }
    apply(&t, &Change { state, message, artifacts, ..Change::default() })
}

/// `a2a/task/get {taskId}`: the task as the A2A client sees it.
pub fn get(call: &Call) -> Result<Reply> {
    let p: Value = call.params()?;
    only(&p, &["taskId"])?;
    let t = mine(call, &p)?;
    Reply::json(&json!({"task": t.wire(None, true)}))
}

/// `a2a/tasks {limit?, before?}`: the tenant's tasks, newest first, as
/// summaries (no messages); `next` continues the list.
pub fn list(call: &Call) -> Result<Reply> {
    let p: Value = call.params()?;
    only(&p, &["limit", "before"])?;
    let limit = match p.get("limit") {
        None | Some(Value::Null) => 50,
        Some(v) => v.as_u64().filter(|n| (1..=500).contains(n)).ok_or_else(|| Error::invalid_params("limit must be an integer from 1 to 500"))? as usize,
    };
    let mut range = task::BY_TIME.all().reverse();
    match p.get("before") {
        None | Some(Value::Null) => {}
        Some(Value::String(b)) if b.len() <= 256 => range = range.before(b.clone()),
        Some(_) => return Err(Error::invalid_params("before must be a cursor this method gave")),
    }
    let (mut tasks, mut next) = (vec![], None);
    range.each(|e| {
        if tasks.len() == limit {
            next = Some(e.key.clone());
            return Ok(false);
        }
        if let Some(t) = TASKS.get(&e.value)? {
            tasks.push(json!({
                "id": t.id, "contextId": t.context_id, "agentId": t.agent, "state": t.state(),
                "createdMs": t.created_ms, "updatedAt": t.status["timestamp"],
                "messages": t.history.len(), "artifacts": t.artifacts.len(),
            }));
        }
        Ok(true)
    })?;
    // `next` is the first key not given; `before` takes the last one given.
    let cursor = next.and(tasks.last().map(keys_of));
    Reply::json(&json!({"tasks": tasks, "next": cursor}))
}

fn keys_of(t: &Value) -> String {
    task::time_key(t["createdMs"].as_u64().unwrap_or(0), t["id"].as_str().unwrap_or_default())
}
