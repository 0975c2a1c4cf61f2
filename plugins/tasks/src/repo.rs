//! Storage layout on the host's ordered key-value store.
//!
//! | collection    | key                        | value      |
//! |---------------|----------------------------|------------|
//! | `tasks`       | `<task id>`                | Record     |
//! | `order`       | `<order>`                  | task id    |
//! | `by-assignee` | `<agent id>/<order>`       | task id    |
//!
//! `<order>` is a ULID made when the task is created, so `order` lists
//! tasks in creation order and is what a listing cursor names. Indexes are
//! written in the same batch as the record; a change goes through a
//! compare-and-swap on the record's version. Agent ids are escaped (`%`,
//! `/`).

use map_plugin_sdk::store::{keys, retry, retry_times, Attempt, Batch, Collection, Text};
use map_plugin_sdk::Result;

use crate::model::{Record, Status};

pub const TASKS: Collection<Record> = Collection::new("tasks");
pub const ORDER: Collection<String, Text> = Collection::new("order");
pub const BY_ASSIGNEE: Collection<String, Text> = Collection::new("by-assignee");

/// Entries read per index page while listing.
const SCAN_PAGE: u32 = 256;
/// Attempts of a change before it is a retryable storage error: agents and
/// clients updating one task at once (on PostgreSQL every concurrent
/// transaction on the record conflicts) get more than the SDK's default.
const CHANGE_ATTEMPTS: u32 = 64;

fn assignee_prefix(agent: &str) -> String {
    format!("{}/", keys::escape(agent))
}

fn assignee_key(agent: &str, order: &str) -> String {
    format!("{}{order}", assignee_prefix(agent))
}

/// Store a new task with its indexes; `false` when its id is taken.
pub fn create(record: &Record) -> Result<bool> {
    let id = &record.task.id;
    let mut batch = Batch::new();
    batch.expect_absent(&TASKS, id.as_str()).put(&TASKS, id.as_str(), record).put(&ORDER, record.order.as_str(), id);
    if let Some(agent) = record.task.assigned_to() {
        batch.put(&BY_ASSIGNEE, assignee_key(agent, &record.order), id);
    }
    // A conflict is the id taken, or (on PostgreSQL) a concurrent write: look.
    retry(|| match batch.commit()?.is_conflict() {
        false => Ok(Attempt::Done(true)),
        true if TASKS.exists(id)? => Ok(Attempt::Done(false)),
        true => Ok(Attempt::Retry),
    })
}

/// Change a task: `change` turns the stored record into the new one (it
/// may run more than once, on fresh reads). `None` when there is no such
/// task; else the record before and after.
pub fn modify(id: &str, mut change: impl FnMut(&mut Record) -> Result<()>) -> Result<Option<(Record, Record)>> {
    retry_times(CHANGE_ATTEMPTS, || {
        let current = TASKS.get_versioned(id)?;
        let Some(before) = current.value else { return Ok(Attempt::Done(None)) };
        let mut after = before.clone();
        change(&mut after)?;
        after.updated_at = Some(map_plugin_sdk::ids::now_ms());
        let mut batch = Batch::new();
        batch.expect_version(&TASKS, id, current.version).put(&TASKS, id, &after);
        let (was, is) = (before.task.assigned_to(), after.task.assigned_to());
        if was != is {
            if let Some(agent) = was {
                batch.delete(&BY_ASSIGNEE, assignee_key(agent, &before.order));
            }
            if let Some(agent) = is {
                batch.put(&BY_ASSIGNEE, assignee_key(agent, &after.order), &id.to_string());
            }
        }
        Ok(batch.commit()?.then(|_| Some((before, after))))
    })
}

/// Is `cursor` one this plugin handed out (an order key)?
pub fn valid_cursor(cursor: &str) -> bool {
    cursor.len() == map_plugin_sdk::ids::ULID_LEN && cursor.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Up to `limit` tasks in creation order after `cursor`, of `assignee` if
/// given, in one of `statuses` if given; and whether more follow.
pub fn page(assignee: Option<&str>, statuses: Option<&[Status]>, cursor: Option<&str>, limit: usize) -> Result<(Vec<Record>, bool)> {
    let (index, prefix) = match assignee {
        Some(agent) => (BY_ASSIGNEE, assignee_prefix(agent)),
        None => (ORDER, String::new()),
    };
    let mut range = index.prefix(prefix.clone());
    if let Some(cursor) = cursor {
        range = range.after(format!("{prefix}{cursor}"));
    }
    let wanted =
        |r: &Record| assignee.is_none_or(|a| r.task.assigned_to() == Some(a)) && statuses.is_none_or(|s| r.task.status.is_some_and(|x| s.contains(&x)));
    let mut found = Vec::new();
    loop {
        let page = range.page(SCAN_PAGE)?;
        let ids: Vec<String> = page.entries.into_iter().map(|e| e.value).collect();
        for record in TASKS.get_many(&ids)?.into_iter().flatten().filter(|r| wanted(r)) {
            if found.len() == limit {
                return Ok((found, true));
            }
            found.push(record);
        }
        match page.next {
            Some(next) => range = range.resume(Some(next)),
            None => return Ok((found, false)),
        }
    }
}
