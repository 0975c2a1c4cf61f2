//! Tasks as MAP resources of the type `x-tasks/task` (`map/resources/list`
//! and `get`), under the same rule as `map/tasks/list`: every task of the
//! tenant is visible to a caller that may list tasks (`tasks.canList`), and
//! none to another, who gets an empty list and "not found". The filter is
//! `map/tasks/list`'s (`{assignee?, status?}`), the order creation order.
//! UAP jobs, which `map/tasks/list` may show too, are the hub's, not here.

use map_plugin_sdk::ids;
use map_plugin_sdk::resources::{Page, Query, Resource, Resources};
use map_plugin_sdk::{Caller, Error, ErrorRange, Result};
use serde_json::{json, Map, Value};

use crate::model::Record;
use crate::settings::{self, Flag};
use crate::{access, error, params, repo};

pub const KIND: &str = "x-tasks/task";

/// Whether the caller sees tasks at all.
fn sees_tasks(caller: &Caller) -> bool {
    settings::enabled() && access::require(caller, Flag::List).is_ok()
}

/// A status word for a task that has none: tasks start open.
fn status(record: &Record) -> String {
    let status = record.task.status.map(|s| json!(s)).and_then(|s| s.as_str().map(String::from));
    status.unwrap_or_else(|| "open".into())
}

/// A task as a resource: named by its title (else its id), owned by whoever
/// created it; the assignee, description and `meta` in `metadata`.
pub fn resource(record: Record) -> Resource {
    let created = ids::time_of(&record.order).unwrap_or(0);
    let status = status(&record);
    let mut metadata = Map::new();
    if let Some(assignee) = &record.task.assignee {
        metadata.insert("assignee".into(), json!(assignee));
    }
    if let Some(description) = &record.task.description {
        metadata.insert("description".into(), json!(description));
    }
    if let Some(meta) = &record.task.meta {
        metadata.insert("meta".into(), Value::Object(meta.clone()));
    }
    let name = record.task.title.clone().unwrap_or_else(|| record.task.id.clone());
    Resource::new(record.task.id, name, status, record.created_by, created).updated_at(record.updated_at.unwrap_or(created)).metadata(metadata)
}

pub struct TaskResources;

impl Resources for TaskResources {
    const ERRORS: ErrorRange = error::ERRORS;

    fn kinds() -> Vec<String> {
        // Off for the tenant: no kind to advertise.
        if settings::enabled() {
            vec![KIND.into()]
        } else {
            Default::default()
        }
    }

    fn list(caller: &Caller, query: &Query) -> Result<Page> {
        if !sees_tasks(caller) {
            return Ok(Page::default());
        }
        // The filter is map/tasks/list's; its -32602 is the client's -32003.
        let filter = params::list(&json!({"filter": query.filter}).to_string()).map_err(|e| {
            let why = e.message().trim_start_matches("Invalid params for map/tasks/list: ");
            Error::invalid_params(format!("Invalid filter for {KIND}: {why}"))
        })?;
        if let Some(cursor) = query.cursor.as_deref().filter(|c| !repo::valid_cursor(c)) {
            return Err(Error::invalid_params(format!("Invalid cursor {cursor:?}: pass the cursor of a previous page")));
        }
        let (records, more) = repo::page(filter.assignee.as_deref(), filter.statuses.as_deref(), query.cursor.as_deref(), query.limit as usize)?;
        let cursor = if more { records.last().map(|r| r.order.clone()) } else { None };
        Ok(Page { resources: records.into_iter().map(resource).collect(), cursor, total: None })
    }

    fn get(caller: &Caller, _kind: &str, id: &str) -> Result<Option<Resource>> {
        if !sees_tasks(caller) || id.is_empty() || id.len() > params::MAX_ID {
            return Ok(None);
        }
        Ok(repo::TASKS.get(id)?.map(resource))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Task};

    #[test]
    fn a_task_as_a_resource() {
        let order = ids::ulid();
        let task = Task { id: "task-1".into(), assignee: Some(Some("a".into())), title: None, status: Some(Status::InProgress), description: None, meta: None };
        let r = resource(Record { task, created_by: "alice".into(), order: order.clone(), updated_at: None });
        assert_eq!((r.id.as_str(), r.name.as_str(), r.status.as_str(), r.owner_id.as_str()), ("task-1", "task-1", "in_progress", "alice"));
        assert_eq!(r.created_at, ids::time_of(&order).unwrap());
        assert_eq!(r.updated_at, r.created_at);
        assert_eq!(r.metadata.get("assignee"), Some(&json!("a")));
        let bare = Task { id: "t".into(), assignee: None, title: Some("x".into()), status: None, description: None, meta: None };
        let r = resource(Record { task: bare, created_by: "b".into(), order, updated_at: Some(7) });
        assert_eq!((r.name.as_str(), r.status.as_str(), r.updated_at), ("x", "open", 7));
    }
}
