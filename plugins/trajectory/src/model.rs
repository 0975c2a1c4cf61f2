//! What is stored: the checkpoint as clients see it, and the record around
//! it with the manifest of its content artifacts.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A trajectory checkpoint (the SDK's `TrajectoryCheckpoint`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub id: String,
    pub agent_id: String,
    /// Unix milliseconds, set by the server when the checkpoint is reported.
    pub timestamp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The agent's own work session (not the MAP session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// How an artifact was given: a JSON string is kept as its text, anything
/// else as its JSON text. Either way the artifact's bytes are that text's UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    Text,
    Json,
}

/// One stored content artifact; its bytes are in `keys::CHUNKS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub name: String,
    pub kind: ArtifactKind,
    pub total_bytes: u64,
    /// Bytes per chunk (the last one may be shorter).
    pub chunk_bytes: u64,
    pub total_chunks: u32,
    /// SHA-256 of the whole artifact, lower-case hex.
    pub checksum: String,
}

/// Everything kept about one checkpoint, under its id in `keys::CHECKPOINTS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub checkpoint: Checkpoint,
    /// Report order within the tenant; orders checkpoints of one millisecond.
    pub seq: u64,
    /// The participant that reported it.
    pub reported_by: String,
    /// Key prefix of this report's artifact chunks.
    pub blob: String,
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
}

impl Record {
    pub fn artifact(&self, name: &str) -> Option<(usize, &Artifact)> {
        self.artifacts.iter().enumerate().find(|(_, a)| a.name == name)
    }
}
