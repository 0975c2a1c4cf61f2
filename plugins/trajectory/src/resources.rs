//! Checkpoints as MAP resources of the type `x-trajectory/checkpoint`
//! (`map/resources/list` and `get`), under the same rule as
//! `trajectory/list` and `trajectory/get`: every checkpoint of the tenant,
//! for a caller that did not give up `trajectory.canQuery`, and none for one
//! that did (an empty list, "not found"). Newest first, in
//! `trajectory/list`'s pages, with its filter (`agentId`, `sessionId`,
//! `afterTimestamp`, `beforeTimestamp`). Artifacts stay with
//! `trajectory/content`.

use map_plugin_sdk::resources::{Page, Query, Resource, Resources};
use map_plugin_sdk::{Caller, Error, ErrorRange, Result};
use serde_json::{json, Map, Value};

use crate::access::{self, Capability};
use crate::model::Checkpoint;
use crate::params::{check_id, ListFilter};
use crate::settings::Settings;
use crate::{error, repo};

pub const KIND: &str = "x-trajectory/checkpoint";

/// The filter keys taken; `trajectory/list` ignores others, a resource
/// filter refuses them.
const FILTER_KEYS: [&str; 4] = ["agentId", "sessionId", "afterTimestamp", "beforeTimestamp"];

/// Whether the caller reads checkpoints at all.
fn sees_checkpoints(caller: &Caller) -> bool {
    Settings::load().enabled && access::require(caller, Capability::Query).is_ok()
}

/// A checkpoint as a resource: named by its label (else its id), owned by
/// its agent, `recorded` (a checkpoint does not change once reported; a new
/// report under its id replaces it, with a new time); its work session and
/// own metadata in `metadata`.
pub fn resource(cp: Checkpoint) -> Resource {
    let mut metadata = Map::new();
    if let Some(session) = &cp.session_id {
        metadata.insert("sessionId".into(), json!(session));
    }
    if let Some(own) = cp.metadata {
        metadata.insert("metadata".into(), Value::Object(own));
    }
    let name = cp.label.unwrap_or_else(|| cp.id.clone());
    Resource::new(cp.id, name, "recorded", cp.agent_id, cp.timestamp).metadata(metadata)
}

fn parse_filter(query: &Query) -> Result<ListFilter> {
    if let Some(key) = query.filter.keys().find(|k| !FILTER_KEYS.contains(&k.as_str())) {
        return Err(Error::invalid_params(format!("Invalid filter for {KIND}: unknown field {key:?}, expected one of {FILTER_KEYS:?}")));
    }
    query.filter()
}

pub struct CheckpointResources;

impl Resources for CheckpointResources {
    const ERRORS: ErrorRange = error::ERRORS;

    fn kinds() -> Vec<String> {
        // Off for the tenant: no kind to advertise.
        if Settings::load().enabled {
            vec![KIND.into()]
        } else {
            Vec::new()
        }
    }

    fn list(caller: &Caller, query: &Query) -> Result<Page> {
        let filter = parse_filter(query)?;
        if !sees_checkpoints(caller) {
            return Ok(Page::default());
        }
        if let Some(cursor) = &query.cursor {
            check_id("cursor", cursor)?;
        }
        let (checkpoints, cursor) = crate::query::page(&filter, query.cursor.as_deref(), query.limit)?;
        Ok(Page { resources: checkpoints.into_iter().map(resource).collect(), cursor, total: None })
    }

    fn get(caller: &Caller, _kind: &str, id: &str) -> Result<Option<Resource>> {
        if !sees_checkpoints(caller) || check_id("id", id).is_err() {
            return Ok(None);
        }
        Ok(repo::load(id)?.map(|record| resource(record.checkpoint)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_as_a_resource() {
        let mut own = Map::new();
        own.insert("branch".into(), json!("main"));
        let cp = Checkpoint {
            id: "cp-1".into(),
            agent_id: "coder".into(),
            timestamp: 42,
            label: Some("tests pass".into()),
            session_id: Some("work-1".into()),
            metadata: Some(own),
        };
        let r = resource(cp);
        assert_eq!((r.id.as_str(), r.name.as_str(), r.status.as_str(), r.owner_id.as_str()), ("cp-1", "tests pass", "recorded", "coder"));
        assert_eq!((r.created_at, r.updated_at), (42, 42));
        assert_eq!(r.metadata.get("sessionId"), Some(&json!("work-1")));
        assert_eq!(r.metadata.get("metadata"), Some(&json!({"branch": "main"})));
        let bare = resource(Checkpoint { id: "cp-2".into(), agent_id: "a".into(), timestamp: 1, label: None, session_id: None, metadata: None });
        assert_eq!((bare.name.as_str(), bare.metadata.len()), ("cp-2", 0));
    }

    #[test]
    fn unknown_filter_keys_are_invalid_params() {
        let q = |f: Value| Query { kind: KIND.into(), filter: f.as_object().unwrap().clone(), cursor: None, limit: 10 };
        assert_eq!(parse_filter(&q(json!({"agentId": "a", "afterTimestamp": 5}))).unwrap().agent_id.as_deref(), Some("a"));
        assert_eq!(parse_filter(&q(json!({"colour": "red"}))).unwrap_err().code(), Some(-32602));
        assert_eq!(parse_filter(&q(json!({"agentId": 5}))).unwrap_err().code(), Some(-32602));
    }
}
