//! `task.*` events in the tenant's event stream, with the upstream
//! spellings and data shapes. Every participant of the tenant may see
//! them, as every task. The write an event reports is already durable, so
//! a failure here is logged (by the SDK), not answered to the client.

use map_plugin_sdk::events;
use serde_json::{json, Value};

use crate::model::{Status, Task};

pub const CREATED: &str = "task.created";
pub const ASSIGNED: &str = "task.assigned";
pub const STATUS: &str = "task.status";
pub const COMPLETED: &str = "task.completed";

pub fn created(task: &Task) {
    events::emit(CREATED, &json!({ "task": task }));
}

pub fn assigned(task: &str, agent: &str) {
    events::emit(ASSIGNED, &json!({ "taskId": task, "agentId": agent }));
}

/// A status change (`previous` is `open` for a task that had none), and
/// `task.completed` when it became `completed`.
pub fn status_changed(task: &str, previous: Option<Status>, current: Status, result: Option<&Value>) {
    events::emit(STATUS, &json!({ "taskId": task, "previous": previous.unwrap_or(Status::Open), "current": current }));
    if current == Status::Completed {
        let mut data = json!({ "taskId": task });
        if let Some(result) = result {
            data["result"] = result.clone();
        }
        events::emit(COMPLETED, &data);
    }
}
