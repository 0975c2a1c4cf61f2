//! The four methods. Each checks the caller's flag, reads and writes the
//! store through `repo`, announces what changed once it is durable, and
//! answers the form the SDK client reads: `{task}`, or `{tasks, hasMore,
//! nextCursor?}`.

use map_plugin_sdk::{ids, Call, Error, Reply, Result};
use serde::Serialize;
use serde_json::json;

use crate::access;
use crate::error::{permission_denied, task_exists, task_not_found};
use crate::events;
use crate::model::{Record, Task};
use crate::params::{self, Update};
use crate::repo;
use crate::settings::{self, Flag};
use crate::uap_jobs;

fn task_reply(task: &Task) -> Result<Reply> {
    Reply::json(&json!({ "task": task }))
}

/// A UAP job listed as a task is the hub's to change.
fn writable(id: &str, capability: &str) -> Result<()> {
    if uap_jobs::is_job(id) {
        return Err(permission_denied(format!("Task {id} is a UAP job, shown read-only: the hub changes it (uap/cancel ends it)"), capability));
    }
    Ok(())
}

/// `map/tasks/create`: the id given is kept, else one is made; only the
/// fields given are kept. A taken id is -32602.
pub fn create(call: &Call) -> Result<Reply> {
    access::require(call.caller, Flag::Create)?;
    let new = params::create(call.params)?;
    if new.id.as_deref().is_some_and(uap_jobs::is_job) {
        return Err(Error::invalid_params(format!("Task ids starting with {:?} name UAP jobs", uap_jobs::PREFIX)));
    }
    if let Some(Some(agent)) = &new.assignee {
        access::assignable(new.id.as_deref(), agent)?;
    }
    let task = Task {
        id: new.id.unwrap_or_else(|| ids::new_id("task")),
        assignee: new.assignee,
        title: new.title,
        status: new.status,
        description: new.description,
        meta: new.meta,
    };
    let record = Record { task, created_by: access::creator(call.caller), order: ids::ulid(), updated_at: None };
    if !repo::create(&record)? {
        return Err(task_exists(&record.task.id));
    }
    events::created(&record.task);
    task_reply(&record.task)
}

/// `map/tasks/assign {taskId, agentId}`: (re)assign; the agent need not be
/// registered unless the tenant says so.
pub fn assign(call: &Call) -> Result<Reply> {
    access::require(call.caller, Flag::Assign)?;
    let (id, agent) = params::assign(call.params)?;
    writable(&id, "tasks.canAssign")?;
    access::assignable(Some(&id), &agent)?;
    let assign = |r: &mut Record| {
        r.task.assignee = Some(Some(agent.clone()));
        Ok(())
    };
    let (_, after) = repo::modify(&id, assign)?.ok_or_else(|| task_not_found(&id))?;
    events::assigned(&id, &agent);
    task_reply(&after.task)
}

/// Apply the fields an update gives: `assignee: null` unassigns, `meta` merges.
fn apply(p: &Update, task: &mut Task) {
    if let Some(status) = p.status {
        task.status = Some(status);
    }
    if let Some(title) = &p.title {
        task.title = Some(title.clone());
    }
    if let Some(description) = &p.description {
        task.description = Some(description.clone());
    }
    if let Some(assignee) = &p.assignee {
        task.assignee = Some(assignee.clone());
    }
    if let Some(meta) = &p.meta {
        task.meta.get_or_insert_with(Default::default).extend(meta.clone());
    }
}

/// `map/tasks/update {taskId, ...}`: a status change is announced as
/// `task.status`, and a change to `completed` also as `task.completed`
/// (with the update's `result`, if any).
pub fn update(call: &Call) -> Result<Reply> {
    access::require(call.caller, Flag::Update)?;
    let p = params::update(call.params)?;
    writable(&p.task_id, "tasks.canUpdate")?;
    if let Some(Some(agent)) = &p.assignee {
        access::assignable(Some(&p.task_id), agent)?;
    }
    let change = |r: &mut Record| {
        access::may_change(call.caller, r)?;
        apply(&p, &mut r.task);
        Ok(())
    };
    let (before, after) = repo::modify(&p.task_id, change)?.ok_or_else(|| task_not_found(&p.task_id))?;
    if let Some(current) = after.task.status.filter(|s| before.task.status != Some(*s)) {
        events::status_changed(&p.task_id, before.task.status, current, p.result.as_ref());
    }
    task_reply(&after.task)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    tasks: Vec<Task>,
    has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// `map/tasks/list`: creation order, filtered by assignee and status; the
/// cursor is opaque (where the last page ended) and comes only with `hasMore`.
/// After the tenant's own tasks come the UAP hub's jobs, if it runs one
/// (`show_uap_jobs`), with cursors of their own (`uap:…`).
pub fn list(call: &Call) -> Result<Reply> {
    access::require(call.caller, Flag::List)?;
    let req = params::list(call.params)?;
    let (assignee, statuses, limit) = (req.assignee.as_deref(), req.statuses.as_deref(), req.limit as usize);
    let jobs_page = |from: Option<String>, n: usize| -> Result<(Vec<Task>, Option<String>)> {
        let (tasks, next) = uap_jobs::page(assignee, statuses, from, n)?;
        Ok((tasks, next.map(|c| format!("{}{c}", uap_jobs::PREFIX))))
    };
    if let Some(from) = req.cursor.as_deref().and_then(|c| c.strip_prefix(uap_jobs::PREFIX)) {
        let (tasks, next_cursor) = jobs_page(Some(from.to_string()).filter(|c| !c.is_empty()), limit)?;
        return Reply::json(&Page { tasks, has_more: next_cursor.is_some(), next_cursor });
    }
    if let Some(cursor) = req.cursor.as_deref().filter(|c| !repo::valid_cursor(c)) {
        return Err(Error::invalid_params(format!("Invalid cursor {cursor:?}: pass the nextCursor of a previous page")));
    }
    let (records, has_more) = repo::page(assignee, statuses, req.cursor.as_deref(), limit)?;
    let mut next_cursor = if has_more { records.last().map(|r| r.order.clone()) } else { None };
    let mut tasks: Vec<Task> = records.into_iter().map(|r| r.task).collect();
    if !has_more && settings::show_uap_jobs() {
        if tasks.len() < limit {
            let (jobs, next) = jobs_page(None, limit - tasks.len())?;
            tasks.extend(jobs);
            next_cursor = next;
        } else if !jobs_page(None, 1)?.0.is_empty() {
            next_cursor = Some(uap_jobs::PREFIX.to_string());
        }
    }
    Reply::json(&Page { tasks, has_more: next_cursor.is_some(), next_cursor })
}
