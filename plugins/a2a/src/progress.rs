//! A task's progress: each change is recorded ([`task`]) and then told to
//! those that follow the task beyond SSE: its push notification configs
//! ([`push`]) and its mail conversation ([`mail`]).

use map_plugin_sdk::Result;
use serde_json::Value;

use crate::settings::Settings;
use crate::task::{self, Change, Task};
use crate::{mail, push};

/// A new task ([`task::create`]), recorded in mail when the tenant wants it.
pub fn create(agent: &str, context_id: &str, message: &Value, s: &Settings) -> Result<Option<Task>> {
    let t = task::create(agent, context_id, message, s.max_tasks_per_tenant)?;
    if let (Some(t), true) = (&t, s.record_in_mail) {
        mail::record(t, t.history.first(), &[]);
    }
    Ok(t)
}

/// A change ([`task::change`]), then its followers.
pub fn change(id: &str, c: &Change, s: &Settings) -> Result<std::result::Result<Task, &'static str>> {
    let changed = task::change(id, c)?;
    if let Ok(t) = &changed {
        push::changed(id);
        if s.record_in_mail {
            mail::record(t, c.message.as_ref(), &c.artifacts);
        }
    }
    Ok(changed)
}
