//! Request params of the four methods, in every form a client sends them:
//! the SDK's (`{task: {...}}`, `{taskId, agentId}`, `{filter, limit,
//! cursor}`) and the flat ones beside them (`{title, ...}`, `{taskId,
//! assignee}`, `{assignee, status}`). `_meta` is accepted and ignored.
//! Anything malformed is -32602 naming the field.

use map_plugin_sdk::params::{check_id, page_size, OneOrMany};
use map_plugin_sdk::{Error, Result};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::{present, Status};

/// Longest task or agent id, in bytes.
pub const MAX_ID: usize = 256;
/// Tasks per `list` page unless `limit` says otherwise, and at most.
pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 1000;

/// A task to create (`id` optional: one is made when absent).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    pub id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub assignee: Option<Option<String>>,
    pub title: Option<String>,
    pub status: Option<Status>,
    pub description: Option<String>,
    pub meta: Option<Map<String, Value>>,
    #[serde(rename = "_meta")]
    _meta: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wrapped {
    task: NewTask,
    #[serde(rename = "_meta")]
    _meta: Option<IgnoredAny>,
}

fn decode<T: for<'de> Deserialize<'de>>(method: &str, value: Value) -> Result<T> {
    serde_json::from_value(value).map_err(|e| Error::invalid_params(format!("Invalid params for {method}: {e}")))
}

/// `map/tasks/create {task: {...}}`, or the task's fields flat.
pub fn create(text: &str) -> Result<NewTask> {
    const METHOD: &str = "map/tasks/create";
    let object: Map<String, Value> = map_plugin_sdk::params::parse(METHOD, text)?;
    let task = match object.contains_key("task") {
        true => decode::<Wrapped>(METHOD, Value::Object(object))?.task,
        false => decode::<NewTask>(METHOD, Value::Object(object))?,
    };
    if let Some(id) = &task.id {
        check_id("task.id", id, MAX_ID)?;
    }
    if let Some(Some(agent)) = &task.assignee {
        check_id("task.assignee", agent, MAX_ID)?;
    }
    Ok(task)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AssignParams {
    task_id: String,
    agent_id: Option<String>,
    assignee: Option<String>,
    #[serde(rename = "_meta")]
    _meta: Option<IgnoredAny>,
}

/// `map/tasks/assign {taskId, agentId}` (or `assignee`): the task and the agent.
pub fn assign(text: &str) -> Result<(String, String)> {
    let p: AssignParams = map_plugin_sdk::params::parse("map/tasks/assign", text)?;
    let agent = p.agent_id.or(p.assignee).ok_or_else(|| Error::invalid_params("Invalid params for map/tasks/assign: missing field `agentId`"))?;
    check_id("taskId", &p.task_id, MAX_ID)?;
    check_id("agentId", &agent, MAX_ID)?;
    Ok((p.task_id, agent))
}

/// `map/tasks/update`: the fields to change; `assignee: null` unassigns,
/// `meta` merges into the task's. `result` (not kept) rides on
/// `task.completed`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Update {
    pub task_id: String,
    pub status: Option<Status>,
    pub title: Option<String>,
    pub description: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub assignee: Option<Option<String>>,
    pub meta: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "present")]
    pub result: Option<Value>,
    #[serde(rename = "_meta")]
    _meta: Option<IgnoredAny>,
}

pub fn update(text: &str) -> Result<Update> {
    let p: Update = map_plugin_sdk::params::parse("map/tasks/update", text)?;
    check_id("taskId", &p.task_id, MAX_ID)?;
    if let Some(Some(agent)) = &p.assignee {
        check_id("assignee", agent, MAX_ID)?;
    }
    Ok(p)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Filter {
    assignee: Option<String>,
    status: Option<OneOrMany<Status>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    filter: Option<Filter>,
    limit: Option<u32>,
    cursor: Option<String>,
    assignee: Option<String>,
    status: Option<OneOrMany<Status>>,
    #[serde(rename = "_meta")]
    _meta: Option<IgnoredAny>,
}

/// `map/tasks/list`, checked.
#[derive(Debug, PartialEq)]
pub struct List {
    /// Only tasks of this agent (an empty one filters nothing, as in the SDK's server).
    pub assignee: Option<String>,
    /// Only tasks in one of these states (status-less tasks never match).
    pub statuses: Option<Vec<Status>>,
    pub limit: u32,
    pub cursor: Option<String>,
}

pub fn list(text: &str) -> Result<List> {
    let p: ListParams = map_plugin_sdk::params::parse("map/tasks/list", text)?;
    let filter = p.filter.unwrap_or_default();
    let assignee = filter.assignee.or(p.assignee).filter(|a| !a.is_empty());
    let statuses = filter.status.or(p.status).map(OneOrMany::into_vec);
    Ok(List { assignee, statuses, limit: page_size(p.limit, DEFAULT_LIMIT, MAX_LIMIT)?, cursor: p.cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_takes_the_sdk_form_and_the_flat_one() {
        let t = create(r#"{"task": {"title": "a", "assignee": null}, "_meta": {}}"#).unwrap();
        assert_eq!((t.title.as_deref(), t.assignee), (Some("a"), Some(None)));
        let t = create(r#"{"id": "t-1", "status": "open"}"#).unwrap();
        assert_eq!((t.id.as_deref(), t.status), (Some("t-1"), Some(Status::Open)));
        assert!(create(r#"{"task": {"title": "a", "priority": 1}}"#).unwrap_err().message().contains("priority"));
        assert!(create(r#"{"task": {"id": ""}}"#).is_err());
        assert!(create(r#"{"task": {"meta": 5}}"#).is_err());
        assert!(create("[]").is_err());
    }

    #[test]
    fn assign_update_and_list_forms() {
        assert_eq!(assign(r#"{"taskId": "t", "agentId": "a"}"#).unwrap(), ("t".into(), "a".into()));
        assert_eq!(assign(r#"{"taskId": "t", "assignee": "b"}"#).unwrap(), ("t".into(), "b".into()));
        assert!(assign(r#"{"taskId": "t"}"#).unwrap_err().message().contains("agentId"));
        let u = update(r#"{"taskId": "t", "assignee": null, "result": null}"#).unwrap();
        assert_eq!((u.assignee, u.result), (Some(None), Some(Value::Null)));
        assert!(update(r#"{"taskId": "t", "status": "done"}"#).is_err());
        let l = list(r#"{"filter": {"status": ["open", "blocked"], "assignee": ""}, "limit": 5}"#).unwrap();
        assert_eq!(l, List { assignee: None, statuses: Some(vec![Status::Open, Status::Blocked]), limit: 5, cursor: None });
        assert_eq!(list(r#"{"assignee": "a", "status": "open"}"#).unwrap().assignee.as_deref(), Some("a"));
        assert_eq!(list("{}").unwrap().limit, DEFAULT_LIMIT);
        assert!(list(r#"{"limit": 0}"#).is_err());
    }
}
