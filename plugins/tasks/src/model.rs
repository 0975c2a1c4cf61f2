//! A task as the wire shows it, and as the store keeps it.
//!
//! The wire form echoes only what was given: an absent field stays absent
//! (not `null`). `assignee` alone can also be `null` (unassigned), so it
//! is a double option: absent, `null`, or an agent id.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Task states of the specification (richer ones go in `meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Open,
    InProgress,
    Blocked,
    Completed,
    Failed,
}

/// A field that may be given as `null`: `Some(None)`, unlike an absent one.
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub assignee: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

impl Task {
    /// The agent it is assigned to, if any.
    pub fn assigned_to(&self) -> Option<&str> {
        self.assignee.as_ref().and_then(|a| a.as_deref())
    }
}

/// What the store keeps: the task, who created it, where it sits in
/// creation order (the key of its `order` entry, a ULID, which also tells
/// when it was made) and when it last changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub task: Task,
    pub created_by: String,
    pub order: String,
    /// Unix milliseconds of the last change (absent: never changed, or
    /// stored before this was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_fields_stay_absent_and_a_null_assignee_stays_null() {
        let t: Task = serde_json::from_value(json!({"id": "t-1", "title": "x"})).unwrap();
        assert_eq!(serde_json::to_value(&t).unwrap(), json!({"id": "t-1", "title": "x"}));
        let t: Task = serde_json::from_value(json!({"id": "t-1", "assignee": null})).unwrap();
        assert_eq!(t.assignee, Some(None));
        assert_eq!(serde_json::to_value(&t).unwrap(), json!({"id": "t-1", "assignee": null}));
        let t: Task = serde_json::from_value(json!({"id": "t-1", "assignee": "a", "status": "in_progress"})).unwrap();
        assert_eq!((t.assigned_to(), t.status), (Some("a"), Some(Status::InProgress)));
        assert!(serde_json::from_value::<Task>(json!({"id": "t", "status": "done"})).is_err());
    }
}
