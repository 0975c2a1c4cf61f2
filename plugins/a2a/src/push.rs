//! Push notification configs (the four `*TaskPushNotificationConfig*`
//! methods, and `configuration.taskPushNotificationConfig` on a send) and
//! their deliveries: each of a task's updates, as the StreamResponse SSE
//! would carry, POSTed in order to every config's URL with its token
//! (`X-A2A-Notification-Token`) and credentials (`Authorization`).
//!
//! A config is its own cursor: the next update it gets. Deliveries run on
//! host timers (stored, fired once on any node), one run per config at a
//! time (a lease in the config); a transient failure (no answer, 408, 429,
//! 5xx) waits with doubling delays, and an update given up on (a refusal,
//! a host the deployment does not allow, `pushMaxAttempts` used) is
//! skipped with an `a2a.task.push_failed` event, so one bad update never
//! holds back the rest.

use map_plugin_sdk::http::{self, Url};
use map_plugin_sdk::store::{keys, retry, Attempt, Batch, Collection};
use map_plugin_sdk::{events, ids, log, metrics, timers, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::jsonrpc::{count, Fault};
use crate::message;
use crate::settings::Settings;
use crate::task::{self, TASKS};

pub const TIMER_PREFIX: &str = "push/";

/// A run holds its config this long at most; a standby timer fires then,
/// so a run that died mid-way is taken up again.
const LEASE_MS: u64 = 60_000;
/// One run stops after this long (within the plugin's deadline) and goes on in the next.
const RUN_MS: u64 = 15_000;
const MAX_URL: usize = 2048;
const MAX_SECRET: usize = 4096;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Auth {
    pub scheme: String,
    #[serde(default)]
    pub credentials: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PushConfig {
    pub id: String,
    pub task_id: String,
    pub url: String,
    #[serde(default)]
    pub token: String,
    #[serde(default)]
    pub authentication: Option<Auth>,
    /// The next update (its number) this config gets.
    pub cursor: u64,
    /// Failed attempts at the update at `cursor`.
    #[serde(default)]
    pub attempts: u32,
    /// A delivery run holds the config until then (ms).
    #[serde(default)]
    pub lease: u64,
    /// The timer that stands for the next run, and when it is due.
    #[serde(default)]
    pub timer: Option<u64>,
    #[serde(default)]
    pub due: u64,
}

/// `<task>/<config id>`.
pub const CONFIGS: Collection<PushConfig> = Collection::new("push");

fn key(task: &str, id: &str) -> String {
    keys::join(&[keys::escape(task), keys::escape(id)])
}

impl PushConfig {
    /// As A2A's TaskPushNotificationConfig.
    pub fn wire(&self) -> Value {
        let mut v = json!({"id": self.id, "taskId": self.task_id, "url": self.url});
        if !self.token.is_empty() {
            v["token"] = json!(self.token);
        }
        if let Some(a) = &self.authentication {
            v["authentication"] = json!({"scheme": a.scheme, "credentials": a.credentials});
        }
        v
    }
}

fn text(v: &Value, field: &str, max: usize) -> std::result::Result<String, Fault> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) if s.len() <= max && !s.chars().any(char::is_control) => Ok(s.clone()),
        _ => Err(Fault::params(format!("{field} must be a string of at most {max} characters without control characters"))),
    }
}

/// A config from the client (untrusted): every field checked.
pub fn parse(p: &Value, task_id: &str, at: &str) -> std::result::Result<PushConfig, Fault> {
    if !p.is_object() {
        return Err(Fault::params(format!("{at} must be an object")));
    }
    let url = text(&p["url"], &format!("{at}.url"), MAX_URL)?;
    if Url::parse(&url).is_none() {
        return Err(Fault::params(format!("{at}.url must be an http:// or https:// URL")));
    }
    let id = message::optional_id(&p["id"], &format!("{at}.id")).map_err(Fault::params)?.unwrap_or_else(|| ids::new_id("push"));
    let authentication = match &p["authentication"] {
        Value::Null => None,
        a @ Value::Object(_) => {
            let scheme = text(&a["scheme"], &format!("{at}.authentication.scheme"), 64)?;
            if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return Err(Fault::params(format!("{at}.authentication.scheme must be a token such as Bearer")));
            }
            Some(Auth { scheme, credentials: text(&a["credentials"], &format!("{at}.authentication.credentials"), MAX_SECRET)? })
        }
        _ => return Err(Fault::params(format!("{at}.authentication must be an object"))),
    };
    Ok(PushConfig {
        id,
        task_id: task_id.to_string(),
        url,
        token: text(&p["token"], &format!("{at}.token"), MAX_SECRET)?,
        authentication,
        cursor: 0,
        attempts: 0,
        lease: 0,
        timer: None,
        due: 0,
    })
}

fn configs_of(task_id: &str) -> Result<Vec<PushConfig>> {
    CONFIGS.prefix(keys::prefix(&[keys::escape(task_id)])).values()
}

/// Keep a client's config (from [`parse`]) for its task, getting the
/// task's updates from `from` on (a config of the same id is replaced).
pub fn add(mut c: PushConfig, from: u64, s: &Settings) -> std::result::Result<PushConfig, Fault> {
    c.cursor = from;
    let existing = configs_of(&c.task_id).map_err(Fault::store)?;
    if existing.len() >= s.max_push_configs && !existing.iter().any(|e| e.id == c.id) {
        return Err(Fault::params(format!("task {} already has {} push notification configs, its limit", c.task_id, s.max_push_configs)));
    }
    CONFIGS.put(&key(&c.task_id, &c.id), &c).map_err(Fault::store)?;
    // Updates recorded before it may already be due.
    if let Err(e) = wake(&c.task_id, &c.id) {
        log::warn(&format!("push config {} of task {}: {}", c.id, c.task_id, e.message()));
    }
    Ok(c)
}

/// CreateTaskPushNotificationConfig: for the agent's task, from its next
/// update on. A finished task takes configs too (the specification lists no
/// error for it, and the official server accepts them); they get nothing.
pub fn create(agent: &str, p: &Value, s: &Settings) -> std::result::Result<Value, Fault> {
    let id = message::id(&p["taskId"], "taskId").map_err(Fault::params)?;
    let t = crate::methods::owned(agent, &id)?;
    Ok(add(parse(p, &id, "params")?, t.seq, s)?.wire())
}

fn named(agent: &str, p: &Value) -> std::result::Result<(String, String), Fault> {
    let task = message::id(&p["taskId"], "taskId").map_err(Fault::params)?;
    crate::methods::owned(agent, &task)?;
    Ok((task, message::id(&p["id"], "id").map_err(Fault::params)?))
}

/// A config that is not there is not found, as a task is (A2A §3.3.2, resource errors).
fn config_not_found(task: &str, id: &str) -> Fault {
    Fault::new(crate::jsonrpc::TASK_NOT_FOUND, format!("task {task} has no push notification config {id}")).with("taskId", task).with("configId", id)
}

pub fn get(agent: &str, p: &Value) -> std::result::Result<Value, Fault> {
    let (task, id) = named(agent, p)?;
    let c = CONFIGS.get(&key(&task, &id)).map_err(Fault::store)?.ok_or_else(|| config_not_found(&task, &id))?;
    Ok(c.wire())
}

/// DeleteTaskPushNotificationConfig is idempotent (A2A §3.1.10): a config
/// that is gone already is deleted all the same.
pub fn delete(agent: &str, p: &Value) -> std::result::Result<Value, Fault> {
    let (task, id) = named(agent, p)?;
    CONFIGS.delete(&key(&task, &id)).map_err(Fault::store)?;
    Ok(json!({}))
}

/// ListTaskPushNotificationConfigs: a page of the task's configs, by id.
pub fn list(agent: &str, p: &Value) -> std::result::Result<Value, Fault> {
    let task = message::id(&p["taskId"], "taskId").map_err(Fault::params)?;
    crate::methods::owned(agent, &task)?;
    let size = count(p, "pageSize", 100)?.unwrap_or(50).max(1) as usize;
    let after = message::optional_id(&p["pageToken"], "pageToken").map_err(Fault::params)?;
    let mut range = CONFIGS.prefix(keys::prefix(&[keys::escape(&task)]));
    if let Some(a) = &after {
        range = range.after(key(&task, a));
    }
    let mut configs: Vec<Value> = vec![];
    let mut more = false;
    range
        .each(|e| {
            if configs.len() == size {
                more = true;
                return Ok(false);
            }
            configs.push(e.value.wire());
            Ok(true)
        })
        .map_err(Fault::store)?;
    let next = if more { configs.last().and_then(|c| c["id"].as_str()).unwrap_or_default().to_string() } else { String::new() };
    Ok(json!({"configs": configs, "nextPageToken": next}))
}

/// After a task changed: every config of it hears of it (a run is
/// scheduled unless one stands already; a running one is told by the
/// write, which makes its last check fail and look again).
pub fn changed(task_id: &str) {
    let configs = match configs_of(task_id) {
        Ok(c) => c,
        Err(e) => return log::warn(&format!("push configs of task {task_id}: {}", e.message())),
    };
    for c in configs {
        if let Err(e) = wake(task_id, &c.id) {
            log::warn(&format!("push config {} of task {task_id}: {}", c.id, e.message()));
        }
    }
}

fn timer_tag(task: &str, id: &str) -> String {
    format!("{TIMER_PREFIX}{}", key(task, id))
}

fn wake(task_id: &str, id: &str) -> Result<()> {
    let k = key(task_id, id);
    let mut scheduled: Option<u64> = None;
    retry(|| {
        let current = CONFIGS.get_versioned(&k)?;
        let Some(mut c) = current.value else { return Ok(Attempt::Done(())) };
        let now = ids::now_ms();
        // A timer stands (due, or lost: long past due) unless none does.
        let standing = c.due != 0 && now < c.due.saturating_add(LEASE_MS);
        if !standing && scheduled.is_none() {
            scheduled = timers::schedule(0, &timer_tag(task_id, id)).ok();
        }
        if !standing {
            c.timer = scheduled;
            c.due = now;
        }
        let mut batch = Batch::new();
        batch.expect_version(&CONFIGS, k.clone(), current.version).put(&CONFIGS, k.clone(), &c);
        Ok(batch.commit()?.then(|_| ()))
    })
}

enum Failure {
    Transient(String),
    Refused(String),
}

/// A timer fired for `<task>/<config id>`: deliver what is due, in order.
pub fn deliver(rest: &str) {
    let Some((task_id, id)) = rest.split_once('/').map(|(t, i)| (keys::unescape(t), keys::unescape(i))) else { return };
    let (task_id, id) = (task_id.as_str(), id.as_str());
    let s = Settings::load();
    if let Err(e) = run(task_id, id, &s) {
        log::warn(&format!("push deliveries of task {task_id} ({id}): {}", e.message()));
    }
}

fn run(task_id: &str, id: &str, s: &Settings) -> Result<()> {
    let k = key(task_id, id);
    let started = ids::now_ms();
    // Claim the config: one run at a time, with a standby timer for a run that dies.
    let claimed = retry(|| {
        let current = CONFIGS.get_versioned(&k)?;
        let Some(mut c) = current.value else { return Ok(Attempt::Done(None)) };
        if c.lease > ids::now_ms() {
            return Ok(Attempt::Done(None));
        }
        c.lease = ids::now_ms() + LEASE_MS;
        c.due = c.lease;
        c.timer = timers::schedule(LEASE_MS, &timer_tag(task_id, id)).ok();
        let mut batch = Batch::new();
        batch.expect_version(&CONFIGS, k.clone(), current.version).put(&CONFIGS, k.clone(), &c);
        Ok(batch.commit()?.then(|_| Some(c)))
    })?;
    let Some(mut c) = claimed else { return Ok(()) };
    let standby = c.timer;
    loop {
        let pending = task::updates(task_id, c.cursor)?;
        for update in pending {
            if ids::now_ms() > started + RUN_MS {
                return release(&k, task_id, id, Some(0), standby);
            }
            match post(&c, &update) {
                Ok(()) => {
                    metrics::count("a2a_push_total", &[("result", "delivered")], 1);
                    c = advance(&k)?;
                }
                Err(Failure::Transient(why)) if c.attempts + 1 < s.push_max_attempts => {
                    metrics::count("a2a_push_total", &[("result", "retried")], 1);
                    let attempts = c.attempts + 1;
                    update_config(&k, |c| c.attempts = attempts)?;
                    log::info(&format!("push to {} for task {task_id} failed ({why}); trying again", c.url));
                    let wait = s.push_retry_base_ms.saturating_mul(1 << (attempts - 1).min(16)).min(60_000);
                    return release(&k, task_id, id, Some(wait), standby);
                }
                Err(Failure::Transient(why) | Failure::Refused(why)) => {
                    metrics::count("a2a_push_total", &[("result", "failed")], 1);
                    let data = json!({"taskId": task_id, "configId": id, "update": c.cursor, "url": c.url, "reason": why, "attempts": c.attempts + 1});
                    events::emit("a2a.task.push_failed", &data);
                    log::warn(&format!("gave up pushing update {} of task {task_id} to {}: {why}", c.cursor, c.url));
                    c = advance(&k)?;
                }
            }
        }
        // Done unless a change came meanwhile (its write to the config makes
        // this conditional write fail, and the loop looks again).
        let current = CONFIGS.get_versioned(&k)?;
        let Some(latest) = current.value else { return Ok(()) };
        let seq = TASKS.get(task_id)?.map_or(0, |t| t.seq);
        if latest.cursor < seq {
            c = latest;
            continue;
        }
        let mut idle = latest;
        idle.lease = 0;
        idle.due = 0;
        idle.timer = None;
        let mut batch = Batch::new();
        batch.expect_version(&CONFIGS, k.clone(), current.version).put(&CONFIGS, k.clone(), &idle);
        if matches!(batch.commit()?, map_plugin_sdk::store::Outcome::Committed(_)) {
            if let Some(t) = standby {
                timers::cancel(t);
            }
            return Ok(());
        }
        c = CONFIGS.get(&k)?.unwrap_or(idle);
    }
}

/// Read-modify-write of a config with a conditional write.
fn update_config(k: &str, f: impl Fn(&mut PushConfig)) -> Result<PushConfig> {
    retry(|| {
        let current = CONFIGS.get_versioned(k)?;
        let Some(mut c) = current.value else { return Err(map_plugin_sdk::Error::internal("the config was deleted")) };
        f(&mut c);
        let mut batch = Batch::new();
        batch.expect_version(&CONFIGS, k.to_string(), current.version).put(&CONFIGS, k.to_string(), &c);
        Ok(batch.commit()?.then(|_| c))
    })
}

/// Past the update at the cursor.
fn advance(k: &str) -> Result<PushConfig> {
    update_config(k, |c| {
        c.cursor += 1;
        c.attempts = 0;
    })
}

/// Give the config up for now: the next run `after` ms (a new timer).
fn release(k: &str, task_id: &str, id: &str, after: Option<u64>, standby: Option<u64>) -> Result<()> {
    let timer = after.and_then(|ms| timers::schedule(ms, &timer_tag(task_id, id)).ok());
    let due = ids::now_ms() + after.unwrap_or(0);
    update_config(k, |c| {
        c.lease = 0;
        c.timer = timer;
        c.due = if timer.is_some() { due } else { 0 };
    })?;
    if let Some(t) = standby {
        timers::cancel(t);
    }
    Ok(())
}

fn post(c: &PushConfig, update: &Value) -> std::result::Result<(), Failure> {
    let url = Url::parse(&c.url).ok_or_else(|| Failure::Refused(format!("{} is not an http(s) URL", c.url)))?;
    let auth = c.authentication.as_ref().map(|a| if a.credentials.is_empty() { a.scheme.clone() } else { format!("{} {}", a.scheme, a.credentials) });
    let mut headers = vec![("a2a-version", crate::cards::PROTOCOL_VERSION)];
    if !c.token.is_empty() {
        headers.push(("x-a2a-notification-token", c.token.as_str()));
    }
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    let body = update.to_string();
    match http::request("POST", &url, "", &headers, Some(("application/json", body.as_bytes())), 64 << 10) {
        Ok((200..=299, _)) => Ok(()),
        Ok((status @ (408 | 429 | 500..=599), _)) => Err(Failure::Transient(format!("the endpoint answered {status}"))),
        Ok((status, _)) => Err(Failure::Refused(format!("the endpoint refused it with {status}"))),
        Err(e) if e.contains("HttpRequestDenied") => {
            Err(Failure::Refused(format!("{} is not among the hosts this deployment allows the bridge to reach", url.authority)))
        }
        Err(e) => Err(Failure::Transient(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_checked() {
        let ok =
            parse(&json!({"url": "http://127.0.0.1:9/hook", "token": "t", "authentication": {"scheme": "Bearer", "credentials": "c"}}), "task-1", "p").unwrap();
        assert_eq!(ok.wire()["authentication"]["scheme"], "Bearer");
        assert!(ok.id.starts_with("push"));
        assert!(parse(&json!({"url": "http://h/", "unknown": 1}), "task-1", "p").is_ok(), "unknown fields are ignored");
        for bad in [
            json!({"url": "ftp://x/y"}),
            json!({"url": "http://h/", "token": 3}),
            json!({"url": "http://h/", "authentication": {"scheme": "Bearer x"}}),
            json!({"url": "http://h/", "authentication": {"scheme": "Basic", "credentials": "a\r\nX-Evil: 1"}}),
            json!("http://h/"),
        ] {
            assert!(parse(&bad, "task-1", "p").is_err(), "{bad}");
        }
    }
}
