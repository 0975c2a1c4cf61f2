//! UAP jobs shown as tasks, read-only. Where the tenant also runs the UAP
//! hub, `map/tasks/list` goes on from the tenant's own tasks into the hub's
//! jobs (`uap/list`, called as the same caller, so the hub's own access
//! rules apply), each as a task with the id `uap:<jobId>` and the job as
//! the hub shows it under `meta.uap`: MAP clients and ACP editors see one
//! list. Changing a job stays with the hub (`uap/cancel`).

use map_plugin_sdk::{log, router, Result};
use serde_json::{json, Map, Value};

use crate::model::{Status, Task};

/// The id prefix of a job shown as a task; refused for the tenant's own tasks.
pub const PREFIX: &str = "uap:";
/// `uap/list` pages walked for one list page at most, when filters skip many jobs.
const MAX_PAGES: usize = 8;

/// Whether this id names a UAP job.
pub fn is_job(id: &str) -> bool {
    id.starts_with(PREFIX)
}

/// A job's status as a task state; the hub's own stays in `meta.uap.status`.
fn status(job: &Value) -> Option<Status> {
    Some(match job["status"].as_str()? {
        "queued" | "proposed" => Status::Open,
        "running" => Status::InProgress,
        "completed" => Status::Completed,
        "failed" | "cancelled" => Status::Failed,
        _ => return None,
    })
}

fn as_task(job: Value) -> Option<Task> {
    let id = job["id"].as_str()?;
    let mut meta = Map::new();
    let task = Task {
        id: format!("{PREFIX}{id}"),
        assignee: Some(job["agent"].as_str().map(str::to_string)),
        title: job["type"].as_str().map(|t| format!("UAP {t} job")),
        status: status(&job),
        description: None,
        meta: None,
    };
    meta.insert("uap".into(), job);
    Some(Task { meta: Some(meta), ..task })
}

/// One page of jobs: what the filters keep, up to `limit`, after `cursor`
/// (the hub's; `None` from the newest), and the cursor to go on from when
/// more may follow. No hub in the tenant, or one that refuses the caller,
/// shows no jobs.
pub fn page(assignee: Option<&str>, statuses: Option<&[Status]>, mut cursor: Option<String>, limit: usize) -> Result<(Vec<Task>, Option<String>)> {
    let wanted = |t: &Task| assignee.is_none_or(|a| t.assigned_to() == Some(a)) && statuses.is_none_or(|s| t.status.is_some_and(|x| s.contains(&x)));
    let mut found = Vec::new();
    for _ in 0..MAX_PAGES {
        // No more than are still wanted: a page never ends past a kept job,
        // so the hub's cursor skips nothing.
        let mut params = json!({ "limit": (limit - found.len()).clamp(1, 100) });
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let reply = match router::call("uap/list", &params) {
            Ok(r) => r,
            Err(e) if e.code == -32601 => return Ok((found, None)),
            Err(e) => {
                log::warn(&format!("uap/list for the task list failed: {} {}", e.code, e.message));
                return Ok((found, None));
            }
        };
        let jobs = reply["jobs"].as_array().cloned().unwrap_or_default();
        let more = reply["hasMore"].as_bool() == Some(true);
        cursor = reply["nextCursor"].as_str().map(str::to_string);
        found.extend(jobs.into_iter().filter_map(as_task).filter(wanted));
        if found.len() >= limit || !more || cursor.is_none() {
            break;
        }
    }
    Ok((found, cursor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_reads_as_a_task_with_the_job_under_meta() {
        let job = json!({"id": "job-1", "type": "test", "status": "running", "agent": "uap-agent-1", "kind": "test"});
        let task = as_task(job.clone()).unwrap();
        assert_eq!(task.id, "uap:job-1");
        assert_eq!((task.status, task.assigned_to()), (Some(Status::InProgress), Some("uap-agent-1")));
        assert_eq!(task.meta.unwrap()["uap"], job);
        let queued = as_task(json!({"id": "job-2", "type": "translation", "status": "queued"})).unwrap();
        assert_eq!((queued.status, queued.assignee), (Some(Status::Open), Some(None)));
        assert!(as_task(json!({"status": "queued"})).is_none());
        assert_eq!(status(&json!({"status": "cancelled"})), Some(Status::Failed));
    }
}
