//! Request params of the four methods, as the MAP SDK sends them.

use std::collections::BTreeMap;

use map_plugin_sdk::{params, Result};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Longest checkpoint id, agent id, work session id or artifact name, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Most artifacts one checkpoint may carry.
pub const MAX_ARTIFACTS: usize = 64;
/// Largest `trajectory/list` page.
pub const MAX_LIMIT: u32 = 500;
pub const DEFAULT_LIMIT: u32 = 50;

/// `trajectory/checkpoint {checkpoint, content?}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report<'a> {
    pub checkpoint: CheckpointInput,
    /// Artifacts by name, borrowed from the request text: a multi-megabyte
    /// transcript is not copied before it is chunked.
    #[serde(default, borrow)]
    pub content: Option<BTreeMap<String, &'a RawValue>>,
}

/// A reported checkpoint; a `timestamp` sent along is ignored, the server sets it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointInput {
    pub id: Option<String>,
    pub agent_id: Option<String>,
    pub label: Option<String>,
    pub session_id: Option<String>,
    pub metadata: Option<Map<String, Value>>,
}

/// `trajectory/list {filter?, limit?, cursor?}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct List {
    pub filter: Option<ListFilter>,
    pub limit: Option<u32>,
    /// The id of the last checkpoint of the previous page (its `nextCursor`).
    pub cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListFilter {
    pub agent_id: Option<String>,
    pub session_id: Option<String>,
    /// Only checkpoints strictly after this Unix-ms time.
    pub after_timestamp: Option<u64>,
    /// Only checkpoints strictly before this Unix-ms time.
    pub before_timestamp: Option<u64>,
}

/// `trajectory/get {checkpointId}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Get {
    pub checkpoint_id: String,
}

/// `trajectory/content {checkpointId, include?}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Content {
    pub checkpoint_id: String,
    /// Artifact names to return; absent: all of them.
    pub include: Option<Vec<String>>,
}

/// An identifier the client chose: present, not empty, not too long.
pub fn check_id(what: &str, value: &str) -> Result<()> {
    params::check_id(what, value, MAX_ID_BYTES)
}

impl List {
    pub fn page_size(&self) -> Result<u32> {
        params::page_size(self.limit, DEFAULT_LIMIT, MAX_LIMIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use map_plugin_sdk::params::{parse, parse_borrowed};

    #[test]
    fn report_borrows_artifacts_and_ignores_timestamp() {
        let text = r#"{"checkpoint":{"id":"c1","timestamp":5,"label":"l"},"content":{"t":"a\nb","m":{"k":1}}}"#;
        let r: Report = parse_borrowed("m", text).unwrap();
        assert_eq!(r.checkpoint.id.as_deref(), Some("c1"));
        let content = r.content.unwrap();
        assert_eq!(content["t"].get(), r#""a\nb""#);
        assert_eq!(content["m"].get(), r#"{"k":1}"#);
    }

    #[test]
    fn bad_params_are_invalid_params() {
        assert_eq!(parse::<Get>("trajectory/get", "{}").unwrap_err().code(), Some(-32602));
        assert_eq!(parse::<List>("trajectory/list", r#"{"limit":"x"}"#).unwrap_err().code(), Some(-32602));
        assert_eq!(parse::<List>("trajectory/list", r#"{"limit":0}"#).unwrap().page_size().unwrap_err().code(), Some(-32602));
        assert_eq!(parse::<List>("trajectory/list", r#"{"limit":100000}"#).unwrap().page_size().unwrap(), MAX_LIMIT);
        assert!(check_id("id", "").is_err());
        assert!(check_id("id", &"x".repeat(MAX_ID_BYTES + 1)).is_err());
    }
}
