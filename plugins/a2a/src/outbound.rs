//! From MAP agents to external A2A agents. `a2a/send {to, message,
//! contextId?, taskId?, from?}` sends an A2A `SendMessage` that returns at
//! once (`returnImmediately`). A task it opens is recorded and followed with
//! `GetTask` on host timers until it is terminal (or `followMs` has passed);
//! its changes reach the sending agent as `a2a.remote.status`,
//! `a2a.remote.artifact` and `a2a.remote.message` events, in order, each
//! once. `a2a/remote/get {taskId}` shows the agent its record.
//!
//! The record is the cursor: a poll first claims its turn (a generation,
//! named in its timer's tag) with a conditional write, then records what it
//! saw with another, and emits only what that write made new. Two timer
//! runs on different nodes therefore never report the same change.

use map_plugin_sdk::prelude::*;
use map_plugin_sdk::store::keys;
use map_plugin_sdk::timers;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::message;
use crate::remote::{self, Card};
use crate::remote_task::{absorb, emit, snapshot, Remote, Snapshot, BY_TASK, MESSAGE, REMOTES, STATUS};
use crate::settings::Settings;
use crate::task::is_terminal;
use crate::NOT_YOURS;

pub const TIMER_PREFIX: &str = "poll/";
/// The caller's agents sent no remote task with that id.
const REMOTE_TASK_NOT_FOUND: i64 = crate::ERRORS.code(93017);
/// Messages of a task's history asked for: the agent's messages since the
/// last poll are among the latest.
const HISTORY: u32 = 64;

fn tag(id: &str, gen: u64) -> String {
    format!("{TIMER_PREFIX}{id}/{gen}")
}

fn interval(s: &Settings) -> u64 {
    s.poll_ms.clamp(100, 3_600_000)
}

/// The wait after `n` failures in a row: doubling from the interval, at most a minute (or the interval).
fn backoff(s: &Settings, n: u32) -> u64 {
    interval(s).saturating_mul(1 << n.min(16)).min(interval(s).max(60_000))
}

/// The record of `task_id` the agent sent to that interface, with its version.
fn find(task_id: &str, agent: &str, rpc: &str) -> Result<Option<(String, u64, Remote)>> {
    for e in BY_TASK.prefix(keys::prefix(&[keys::escape(task_id)])).take(50)? {
        let v = REMOTES.get_versioned(&e.value)?;
        if let Some(r) = v.value.filter(|r| r.agent == agent && r.card.rpc == rpc) {
            return Ok(Some((e.value, v.version, r)));
        }
    }
    Ok(None)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SendParams {
    to: String,
    message: Value,
    #[serde(default)]
    context_id: Value,
    #[serde(default)]
    task_id: Value,
    from: Option<String>,
}

/// `a2a/send` → `{taskId, contextId, state, task}`, or `{…, message}` when
/// the remote agent answered with a message (taskId and state then null).
pub fn send(call: &Call) -> Result<Reply> {
    let s = Settings::load();
    let p: SendParams = call.params()?;
    let agents = &call.caller.agent_ids;
    let agent = match p.from {
        Some(a) if agents.contains(&a) => a,
        Some(a) => return Err(Error::invalid_params(format!("from {a:?} is not one of the caller's agents"))),
        None => agents.first().cloned().ok_or_else(|| Error::invalid_params("a2a/send is for agents: register one first"))?,
    };
    let parts = match &p.message {
        Value::String(t) if !t.is_empty() => vec![message::part(&json!({"text": t}), "message").map_err(Error::invalid_params)?],
        Value::Array(_) => message::parts(&p.message, "message").map_err(Error::invalid_params)?,
        _ => return Err(Error::invalid_params("message must be a non-empty text or a list of A2A parts")),
    };
    let mut msg = json!({"messageId": ids::new_id("msg"), "role": "ROLE_USER", "parts": parts});
    for (k, v) in [("contextId", &p.context_id), ("taskId", &p.task_id)] {
        if let Some(id) = message::optional_id(v, k).map_err(Error::invalid_params)? {
            msg[k] = json!(id);
        }
    }
    if p.to.is_empty() {
        return Err(Error::invalid_params("to must name a peer or be a card URL"));
    }
    let target = remote::target(&s, &p.to)?;
    let card = remote::card(&target, &s)?;
    let peer = target.peer.clone();
    let result = remote::call(&target, &card, "SendMessage", json!({"message": msg, "configuration": {"returnImmediately": true, "historyLength": HISTORY}}))
        .map_err(|f| f.into_error(&peer))?;
    let invalid = |why: String| remote::Failure::Invalid(why).into_error(&peer);
    if let Some(m) = result.get("message").filter(|m| !m.is_null()) {
        let m = message::message(m, "message", "ROLE_AGENT").map_err(invalid)?;
        let data = json!({"remoteTaskId": m.get("taskId"), "contextId": m.get("contextId"), "peer": peer, "agentId": agent, "state": null, "message": m});
        events::emit_to(MESSAGE, &data, std::slice::from_ref(&agent));
        return Reply::json(&json!({"taskId": data["remoteTaskId"], "contextId": data["contextId"], "state": null, "message": m}));
    }
    let snap = snapshot(result.get("task").unwrap_or(&Value::Null)).map_err(|why| invalid(format!("neither a message nor a valid task: {why}")))?;
    let r = record(&s, &agent, &peer, &card, &snap)?;
    Reply::json(&json!({"taskId": snap.id, "contextId": snap.context_id, "state": r.state, "task": snap.task}))
}

/// Start the poll chain of a record: the next generation and its timer.
fn start_following(r: &mut Remote, id: &str, s: &Settings, now: u64) {
    r.gen += 1;
    match timers::schedule(interval(s), &tag(id, r.gen)) {
        Ok(t) => (r.timer, r.next_poll_ms, r.following, r.stopped) = (Some(t), Some(now + interval(s)), true, None),
        Err(e) => (r.timer, r.following, r.stopped) = (None, false, Some(format!("no poll timer: {e}"))),
    }
}

/// Record what `SendMessage` answered: a new record, or the one of a task
/// the agent continues (which it then follows again for `followMs`).
fn record(s: &Settings, agent: &str, peer: &str, card: &Card, snap: &Snapshot) -> Result<Remote> {
    let (r, events, cancel) = retry(|| {
        let now = ids::now_ms();
        let mut b = Batch::new();
        let (id, mut r) = match find(&snap.id, agent, &card.rpc)? {
            Some((id, version, r)) => {
                b.expect_version(&REMOTES, id.clone(), version);
                (id, r)
            }
            None => {
                let id = ids::new_id("remote");
                b.expect_absent(&REMOTES, id.clone()).put(&BY_TASK, keys::join(&[keys::escape(&snap.id), id.clone()]), &id);
                let r = Remote {
                    agent: agent.to_string(),
                    peer: peer.to_string(),
                    card: card.clone(),
                    task_id: snap.id.clone(),
                    context_id: snap.context_id.clone(),
                    state: String::new(),
                    status: Value::Null,
                    artifacts: vec![],
                    seen: vec![],
                    created_ms: now,
                    updated_ms: now,
                    following: false,
                    follow_until_ms: 0,
                    next_poll_ms: None,
                    gen: 0,
                    timer: None,
                    failures: 0,
                    last_error: None,
                    stopped: None,
                };
                (id, r)
            }
        };
        let events = absorb(&mut r, snap);
        (r.updated_ms, r.follow_until_ms) = (now, now.saturating_add(s.follow_ms));
        let (mut fresh, mut cancel) = (None, None);
        if is_terminal(&r.state) {
            (r.following, r.next_poll_ms, cancel) = (false, None, r.timer.take());
        } else if !r.following {
            start_following(&mut r, &id, s, now);
            fresh = r.timer;
        }
        b.put(&REMOTES, id.clone(), &r);
        Ok(match b.commit()? {
            Outcome::Committed(_) => Attempt::Done((r, events, cancel)),
            Outcome::Conflict(_) => {
                if let Some(t) = fresh {
                    timers::cancel(t);
                }
                Attempt::Retry
            }
        })
    })?;
    if let Some(t) = cancel {
        timers::cancel(t);
    }
    emit(&r, events);
    Ok(r)
}

/// A poll timer fired (`<record id>/<generation>`).
pub fn poll(rest: &str) {
    let Some((id, gen)) = rest.rsplit_once('/').and_then(|(id, g)| Some((id, g.parse::<u64>().ok()?))) else { return };
    let s = Settings::load();
    let outcome = claim(id, gen, &s).and_then(|claimed| match claimed {
        Some(r) => settle(id, gen + 1, &s, fetch(&r, &s)),
        None => Ok(()),
    });
    if let Err(e) = outcome {
        log::error(&format!("following remote task record {id}: {}", e.message()));
    }
}

/// This timer's turn, if it is one: the record moves to the next generation
/// with a standby timer, so that a poll cut short (a crash, the deadline) is
/// followed by another, after the back-off a failure would cause.
fn claim(id: &str, gen: u64, s: &Settings) -> Result<Option<Remote>> {
    let cur = REMOTES.get_versioned(id)?;
    let Some(mut r) = cur.value.filter(|r| r.following && r.gen == gen) else { return Ok(None) };
    let now = ids::now_ms();
    let mut b = Batch::new();
    b.expect_version(&REMOTES, id.to_string(), cur.version);
    if now >= r.follow_until_ms {
        let why = format!("stopped following the task: followMs ({} ms) has passed", s.follow_ms);
        (r.following, r.timer, r.next_poll_ms, r.stopped, r.updated_ms) = (false, None, None, Some(why.clone()), now);
        if b.put(&REMOTES, id.to_string(), &r).commit()?.committed().is_some() {
            emit(&r, vec![(STATUS, json!({"reason": why}))]);
        }
        return Ok(None);
    }
    let delay = backoff(s, r.failures + 1);
    let standby = timers::schedule(delay, &tag(id, gen + 1)).map_err(|e| log::warn(&format!("no standby timer for remote task record {id}: {e}"))).ok();
    (r.gen, r.timer, r.next_poll_ms) = (gen + 1, standby, Some(now + delay));
    if b.put(&REMOTES, id.to_string(), &r).commit()?.is_conflict() {
        if let Some(t) = standby {
            timers::cancel(t);
        }
        return Ok(None);
    }
    Ok(Some(r))
}

/// One `GetTask`: the snapshot, or why not and whether a later poll may do better.
fn fetch(r: &Remote, s: &Settings) -> Result<Snapshot, (String, bool)> {
    let target = remote::target(s, &r.peer).map_err(|e| (e.message().to_string(), false))?;
    let task =
        remote::call(&target, &r.card, "GetTask", json!({"id": r.task_id, "historyLength": HISTORY})).map_err(|f| (f.describe(&r.peer), f.transient()))?;
    snapshot(&task).map_err(|why| (format!("A2A peer {} gave an invalid task: {why}", r.peer), true))
}

/// Record a poll's outcome (generation `mine` claimed it): report what is
/// new, then poll again at the interval, after a back-off (the standby
/// timer), or no more (terminal, a lasting failure, or past `followMs`).
fn settle(id: &str, mine: u64, s: &Settings, outcome: Result<Snapshot, (String, bool)>) -> Result<()> {
    let done = retry(|| {
        let cur = REMOTES.get_versioned(id)?;
        let Some(mut r) = cur.value else { return Ok(Attempt::Done(None)) };
        let now = ids::now_ms();
        // Unless a send restarted the chain meanwhile, this poll steers the timers.
        let steering = r.following && r.gen == mine;
        let (mut events, mut fresh, mut cancel) = (vec![], None, None);
        match &outcome {
            Ok(snap) => {
                events = absorb(&mut r, snap);
                (r.failures, r.last_error) = (0, None);
                if is_terminal(&r.state) {
                    (r.following, r.next_poll_ms, cancel) = (false, None, r.timer.take());
                } else if steering {
                    match timers::schedule(interval(s), &tag(id, mine + 1)) {
                        Ok(t) => (r.gen, r.next_poll_ms, cancel, fresh) = (mine + 1, Some(now + interval(s)), r.timer.replace(t), Some(t)),
                        Err(e) => log::warn(&format!("no poll timer for remote task record {id} (the standby one stays): {e}")),
                    }
                }
            }
            Err((why, transient)) if steering => {
                (r.failures, r.last_error) = (r.failures + 1, Some(why.clone()));
                if !transient || now >= r.follow_until_ms {
                    (r.following, r.next_poll_ms, r.stopped, cancel) = (false, None, Some(why.clone()), r.timer.take());
                    events.push((STATUS, json!({"reason": why})));
                }
            }
            Err(_) => return Ok(Attempt::Done(None)),
        }
        r.updated_ms = now;
        let mut b = Batch::new();
        b.expect_version(&REMOTES, id.to_string(), cur.version).put(&REMOTES, id.to_string(), &r);
        Ok(match b.commit()? {
            Outcome::Committed(_) => Attempt::Done(Some((r, events, cancel))),
            Outcome::Conflict(_) => {
                if let Some(t) = fresh {
                    timers::cancel(t);
                }
                Attempt::Retry
            }
        })
    })?;
    if let Some((r, events, cancel)) = done {
        if let Some(t) = cancel {
            timers::cancel(t);
        }
        emit(&r, events);
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GetParams {
    task_id: String,
}

fn at(ms: u64) -> Value {
    json!(ids::iso8601(ms))
}

/// `a2a/remote/get {taskId}`: the record of a remote task one of the caller's agents sent.
pub fn get(call: &Call) -> Result<Reply> {
    let p: GetParams = call.params()?;
    message::id(&json!(p.task_id), "taskId").map_err(Error::invalid_params)?;
    let (mut mine, mut others): (Option<Remote>, bool) = (None, false);
    for e in BY_TASK.prefix(keys::prefix(&[keys::escape(&p.task_id)])).take(50)? {
        match REMOTES.get(&e.value)? {
            Some(r) if call.caller.agent_ids.contains(&r.agent) && mine.as_ref().is_none_or(|m| r.created_ms >= m.created_ms) => mine = Some(r),
            Some(r) => others |= !call.caller.agent_ids.contains(&r.agent),
            None => {}
        }
    }
    let details = json!({"taskId": p.task_id});
    let r = match mine {
        Some(r) => r,
        None if others => return Err(Error::new(NOT_YOURS, format!("remote task {} was sent by another agent", p.task_id)).with_details(details)),
        None => return Err(Error::new(REMOTE_TASK_NOT_FOUND, format!("no remote A2A task {} sent by the caller's agents", p.task_id)).with_details(details)),
    };
    Reply::json(&json!({
        "taskId": r.task_id, "contextId": r.context_id, "peer": r.peer, "agentId": r.agent, "state": r.state,
        "status": r.status, "artifacts": r.artifacts, "following": r.following,
        "createdAt": at(r.created_ms), "updatedAt": at(r.updated_ms), "followUntil": at(r.follow_until_ms),
        "nextPollAt": r.next_poll_ms.map(at), "failures": r.failures, "lastError": r.last_error, "stopped": r.stopped,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off() {
        let s = Settings { poll_ms: 1000, ..Settings::default() };
        assert_eq!((backoff(&s, 1), backoff(&s, 3), backoff(&s, 30)), (2000, 8000, 60_000));
        assert_eq!(interval(&Settings { poll_ms: 1, ..Settings::default() }), 100);
    }
}
