//! The A2A methods an agent's JSON-RPC URL answers (`<base>/agents/<id>`).

use map_plugin_sdk::{ids, metrics, router, HttpResponse};
use serde_json::{json, Value};

use crate::compat;
use crate::jsonrpc::{self, answer, count, flag, history_length, Fault, Request, Version, INTERNAL, TASK_NOT_CANCELABLE, UNSUPPORTED_OPERATION};
use crate::message;
use crate::settings::Settings;
use crate::stream;
use crate::task::{self, Change, Task, TASKS};
use crate::{progress, push};

/// The 1.0 methods (A2A §9.4); under another version they are refused.
const CORE: [&str; 11] = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
];

/// A method of the other version than the request's gets VersionNotSupported,
/// as the official SDK answers (A2A §3.6.2: the requested version's semantics).
fn version_fault(method: &str, legacy: bool, version: Version) -> Option<Fault> {
    let fault = |said: &str, is: &str| {
        Fault::new(
            jsonrpc::VERSION_NOT_SUPPORTED,
            format!("{method} is an A2A {is} method, and this request is A2A {said} (its A2A-Version header; none means 0.3)"),
        )
    };
    match (legacy, version) {
        (true, Version::V1) => Some(fault("1.0", "0.3")),
        (false, Version::V03) if CORE.contains(&method) => Some(fault("0.3", "1.0")),
        _ => None,
    }
}

/// Dispatch one request for agent `agent`.
pub fn handle(agent: &str, mut req: Request, s: &Settings) -> HttpResponse {
    // A 0.3 method name: the same method, in and out of 0.3 shapes.
    let legacy = compat::method(&req.method);
    if let Some(f) = version_fault(&req.method, legacy.is_some(), req.version) {
        return answer(200, &req.id, Err(f));
    }
    if let Some(core) = legacy {
        req.params = compat::params_in(&req.method, &req.params);
        req.method = core.to_string();
    }
    let legacy = legacy.is_some();
    let p = &req.params;
    let result = match req.method.as_str() {
        "SendMessage" => send(agent, p, s).and_then(|(t, _)| settle(t, p, s)),
        "SendStreamingMessage" => return streaming(agent, &req, s, legacy),
        "GetTask" => get(agent, p),
        "ListTasks" => list(agent, p),
        "CancelTask" => cancel(agent, p, s),
        "SubscribeToTask" => return subscribe(agent, &req, s, legacy),
        "CreateTaskPushNotificationConfig" => push::create(agent, p, s),
        "GetTaskPushNotificationConfig" => push::get(agent, p),
        "ListTaskPushNotificationConfigs" => push::list(agent, p),
        "DeleteTaskPushNotificationConfig" => push::delete(agent, p),
        "GetExtendedAgentCard" => Err(Fault::new(jsonrpc::EXTENDED_CARD_NOT_CONFIGURED, "this agent has no extended card")),
        m => Err(Fault::new(jsonrpc::METHOD_NOT_FOUND, format!("no method {m:?}"))),
    };
    let outcome = match &result {
        Ok(_) => "ok",
        Err(_) => "error",
    };
    metrics::count("a2a_requests_total", &[("method", method_label(&req.method)), ("result", outcome)], 1);
    answer(200, &req.id, if legacy { result.map(|r| compat::result_for(&req.method, &r)) } else { result })
}

fn method_label(m: &str) -> &'static str {
    ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask"].into_iter().find(|x| *x == m).unwrap_or("other")
}

/// A task the agent serves, or TaskNotFound (tasks of other agents and
/// tenants are not visible here).
pub fn owned(agent: &str, id: &str) -> Result<Task, Fault> {
    match TASKS.get(id).map_err(Fault::store)? {
        Some(t) if t.agent == agent => Ok(t),
        _ => Err(Fault::task_not_found(id)),
    }
}

fn task_id(p: &Value) -> Result<String, Fault> {
    message::id(p.get("id").unwrap_or(&Value::Null), "id").map_err(Fault::params)
}

/// Record the client's message (a new task, or the next turn of one that
/// waits for input) and deliver it to the agent as `map/message`.
pub fn send(agent: &str, p: &Value, s: &Settings) -> Result<(Task, u64), Fault> {
    let config = p.get("configuration").cloned().unwrap_or(json!({}));
    if !config.is_object() {
        return Err(Fault::params("configuration must be an object"));
    }
    // Checked before anything is recorded; kept once the task exists.
    let pushing = match config.get("taskPushNotificationConfig") {
        None | Some(Value::Null) => None,
        Some(c) => Some(push::parse(c, "", "configuration.taskPushNotificationConfig")?),
    };
    // Role is required of a client's message (A2A §4.1.4); the bridge's agents may leave it out.
    if p["message"].is_object() && p["message"].get("role").is_none() {
        return Err(Fault::params("message.role is required (ROLE_USER)"));
    }
    let msg = message::message(p.get("message").unwrap_or(&Value::Null), "message", "ROLE_USER").map_err(Fault::params)?;
    if router::connected_since(&[agent.to_string()]).first().copied().flatten().is_none() {
        return Err(Fault::new(INTERNAL, format!("agent {agent} is not connected (messages are not queued)")));
    }
    let (task, from) = match msg.get("taskId").and_then(Value::as_str) {
        Some(id) => {
            let t = owned(agent, id)?;
            if task::is_terminal(t.state()) {
                return Err(Fault::new(UNSUPPORTED_OPERATION, format!("task {id} is {}: a terminal task takes no more messages", t.state())));
            }
            if msg.get("contextId").is_some_and(|c| *c != json!(t.context_id)) {
                return Err(Fault::params(format!("message.contextId does not match task {id}'s")));
            }
            let seq = t.seq;
            let c = Change { state: Some("working"), message: Some(msg.clone()), user: true, ..Change::default() };
            let t = progress::change(id, &c, s).map_err(Fault::store)?.map_err(|st| Fault::new(UNSUPPORTED_OPERATION, format!("task {id} is {st}")))?;
            (t, seq)
        }
        None => {
            let context = msg.get("contextId").and_then(Value::as_str).map(String::from).unwrap_or_else(|| ids::new_id("ctx"));
            let t = progress::create(agent, &context, &msg, s).map_err(Fault::store)?;
            let t = t.ok_or_else(|| Fault::new(INTERNAL, format!("this tenant holds {} tasks, its limit", s.max_tasks_per_tenant)))?;
            (t, 0)
        }
    };
    if let Some(mut c) = pushing {
        c.task_id = task.id.clone();
        push::add(c, from, s)?;
    }
    deliver(&task, &msg, s)?;
    Ok((task, from))
}

fn deliver(task: &Task, msg: &Value, s: &Settings) -> Result<(), Fault> {
    let payload = json!({"a2a": {"method": "SendMessage", "taskId": task.id, "contextId": task.context_id, "message": msg}});
    let meta = json!({"protocol": "a2a", "a2a": {"taskId": task.id, "contextId": task.context_id}});
    let sent = router::send(&json!({"agent": task.agent}), &payload, Some(&meta));
    if sent.as_ref().ok().and_then(|r| r["delivered"].as_array()).is_none_or(Vec::is_empty) {
        // Not delivered: the task fails rather than wait for nobody.
        let why = json!({"messageId": ids::new_id("msg"), "role": "ROLE_AGENT", "taskId": task.id, "contextId": task.context_id, "parts": [{"text": format!("agent {} could not be reached", task.agent)}]});
        let _ = progress::change(&task.id, &Change { state: Some("failed"), message: Some(why), ..Change::default() }, s);
        return Err(Fault::new(INTERNAL, format!("agent {} could not be reached", task.agent)));
    }
    Ok(())
}

/// A blocking SendMessage: wait (bounded) for the agent's first reply or a
/// settled state; the reply message, else the task as it is then.
fn settle(t: Task, p: &Value, s: &Settings) -> Result<Value, Fault> {
    let config = &p["configuration"];
    let history = history_length(config)?;
    if flag(config, "returnImmediately")? {
        return Ok(json!({"task": t.wire(history, true)}));
    }
    let deadline = ids::now_ms() + s.blocking_wait_ms;
    let mut t = t;
    loop {
        if let Some(m) = &t.first_reply {
            return Ok(json!({"message": m}));
        }
        if task::is_settled(t.state()) || ids::now_ms() >= deadline {
            return Ok(json!({"task": t.wire(history, true)}));
        }
        stream::pause();
        t = TASKS.get(&t.id).map_err(Fault::store)?.ok_or_else(|| Fault::task_not_found(&t.id))?;
    }
}

fn get(agent: &str, p: &Value) -> Result<Value, Fault> {
    let t = owned(agent, &task_id(p)?)?;
    Ok(t.wire(history_length(p)?, true))
}

fn cancel(agent: &str, p: &Value, s: &Settings) -> Result<Value, Fault> {
    let id = task_id(p)?;
    owned(agent, &id)?;
    let t = progress::change(&id, &Change { state: Some("canceled"), ..Change::default() }, s)
        .map_err(Fault::store)?
        .map_err(|st| Fault::new(TASK_NOT_CANCELABLE, format!("task {id} is {st}: a terminal task cannot be canceled")))?;
    // The agent hears of it; the task is canceled whether or not it listens.
    let payload = json!({"a2a": {"method": "CancelTask", "taskId": t.id, "contextId": t.context_id}});
    let meta = json!({"protocol": "a2a", "a2a": {"taskId": t.id, "contextId": t.context_id, "canceled": true}});
    let _ = router::send(&json!({"agent": t.agent}), &payload, Some(&meta));
    Ok(t.wire(None, true))
}

/// ListTasks: the agent's tasks, newest first, `pageSize` (1..100, 50) a
/// page; `nextPageToken` resumes after the last one given.
fn list(agent: &str, p: &Value) -> Result<Value, Fault> {
    let size = count(p, "pageSize", 100)?.unwrap_or(50).max(1) as usize;
    let context = message::optional_id(p.get("contextId").unwrap_or(&Value::Null), "contextId").map_err(Fault::params)?;
    let state = match p.get("status").and_then(Value::as_str) {
        None | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(s) => Some(task::parse_state(s).ok_or_else(|| Fault::params(format!("status {s:?} is not a task state")))?),
    };
    let history = history_length(p)?;
    let artifacts = flag(p, "includeArtifacts")?;
    let token = match p.get("pageToken").and_then(Value::as_str).filter(|t| !t.is_empty()) {
        Some(t) if t.len() <= 256 && t.contains('/') => Some(t.to_string()),
        Some(_) => return Err(Fault::params("pageToken is not one this server gave")),
        None => None,
    };
    let (mut tasks, mut total, mut next) = (vec![], 0u64, None);
    let mut last = String::new();
    let mut range = task::BY_TIME.all().reverse();
    if let Some(t) = &token {
        range = range.before(t.clone());
    }
    // The whole range after the token is read to count it (a tenant holds at most maxTasksPerTenant).
    range
        .each(|e| {
            let Some(t) = TASKS.get(&e.value)? else { return Ok(true) };
            let matches = t.agent == agent && context.as_ref().is_none_or(|c| *c == t.context_id) && state.is_none_or(|s| s == t.state());
            if matches {
                total += 1;
                if tasks.len() < size {
                    tasks.push(t.wire(history, artifacts));
                    last = e.key.clone();
                } else if next.is_none() {
                    next = Some(last.clone());
                }
            }
            Ok(true)
        })
        .map_err(Fault::store)?;
    Ok(json!({"tasks": tasks, "nextPageToken": next.unwrap_or_default(), "pageSize": size, "totalSize": total}))
}

fn streaming(agent: &str, req: &Request, s: &Settings, legacy: bool) -> HttpResponse {
    match send(agent, &req.params, s) {
        Ok((t, from)) => stream::follow(&req.id, &t.id, from, None, s, legacy),
        // An error before the stream opens is a plain answer, as the official SDK's server gives it.
        Err(f) => answer(200, &req.id, Err(f)),
    }
}

fn subscribe(agent: &str, req: &Request, s: &Settings, legacy: bool) -> HttpResponse {
    let start = task_id(&req.params).and_then(|id| owned(agent, &id));
    match start {
        Ok(t) if task::is_terminal(t.state()) => {
            answer(200, &req.id, Err(Fault::new(UNSUPPORTED_OPERATION, format!("task {} is {}: nothing more will happen", t.id, t.state()))))
        }
        Ok(t) => stream::follow(&req.id, &t.id, t.seq, Some(json!({"task": t.wire(None, true)})), s, legacy),
        Err(f) => answer(200, &req.id, Err(f)),
    }
}
