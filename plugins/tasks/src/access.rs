//! Who may do what. Each method needs its flag of the capability group:
//! the tenant grants it by participant type (clients and agents unless
//! configured), and a participant may give it up by declaring
//! `tasks.<flag>: false` at `map/connect`. Every task of the tenant is
//! visible to whoever may list; an agent session changes only tasks
//! assigned to or created by its agents, unless the tenant lets agents
//! update any task.

use map_plugin_sdk::{router, Caller, Result};
use serde_json::Value;

use crate::error::{assignment_failed, permission_denied};
use crate::model::Record;
use crate::settings::{self, Flag};

/// Refuse (14003) a caller without `flag`.
pub fn require(caller: &Caller, flag: Flag) -> Result<()> {
    let name = format!("tasks.{}", flag.capability());
    if !settings::granted(flag, &caller.participant_type) {
        return Err(permission_denied(format!("{name} is not granted to {} participants here", caller.participant_type), &name));
    }
    let declared: Value = serde_json::from_str(&caller.capabilities).unwrap_or(Value::Null);
    if declared.pointer(&format!("/tasks/{}", flag.capability())) == Some(&Value::Bool(false)) {
        return Err(permission_denied(format!("The participant declared {name}: false"), &name));
    }
    Ok(())
}

/// Who a new task is recorded as created by: the caller's first agent, else the participant.
pub fn creator(caller: &Caller) -> String {
    caller.agent_ids.first().cloned().unwrap_or_else(|| caller.participant_id.clone())
}

/// Refuse (14003) an agent session changing a task that is not its agents'.
pub fn may_change(caller: &Caller, record: &Record) -> Result<()> {
    if caller.participant_type != "agent" || settings::agents_update_any() {
        return Ok(());
    }
    let ours = |id: &str| caller.agent_ids.iter().any(|a| a == id);
    let assigned = record.task.assigned_to().is_some_and(ours);
    if assigned || ours(&record.created_by) || record.created_by == caller.participant_id {
        return Ok(());
    }
    Err(permission_denied(format!("Task {} is neither assigned to nor created by this session's agents", record.task.id), "tasks.canUpdate"))
}

/// Refuse (14002) an assignee the tenant does not accept: with
/// `registered_assignees`, one that is no agent the caller can see.
pub fn assignable(task: Option<&str>, agent: &str) -> Result<()> {
    if settings::registered_assignees() && router::agent(agent).is_none() {
        return Err(assignment_failed(task, agent, "no such agent is registered in this tenant"));
    }
    Ok(())
}
