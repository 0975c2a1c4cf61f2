//! What the hub keeps: jobs as MAP clients see them, registered agents, and
//! each job's history.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::proto;

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Test,
    Translation,
}

impl Kind {
    /// Session ids carry the kind, as the protocol's reference hub does.
    pub fn session_prefix(self) -> &'static str {
        match self {
            Kind::Test => "JOB",
            Kind::Translation => "TRN",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for a capable agent.
    Queued,
    /// Offered to one agent, which has not answered yet.
    Proposed,
    /// Accepted by an agent.
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Proposed => "proposed",
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    pub id: String,
    pub kind: Kind,
    #[serde(rename = "type")]
    pub job_type: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_format: Option<String>,
    /// The agent (client id) it is proposed to or run by, or was last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The current proposal's or run's session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The proto3 JSON of the `TestResult` or `TranslationResult`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Agents that declined it or let a proposal lapse: never asked again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declined_by: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// One entry of a job's history: a change of status, or what the agent
/// reported (`state`/`message` of its status, or a telemetry record).
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub at: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The agent's own state name (e.g. `TEST_STATE_RUNNING`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Value>,
}

/// A registered agent.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    pub client_id: String,
    pub display_name: String,
    /// The proto3 JSON of each `Capability`.
    pub capabilities: Vec<Value>,
    pub registered_at: String,
}

impl Agent {
    /// Whether one of its capabilities takes jobs of this kind and type.
    pub fn can_take(&self, kind: Kind, job_type: &str) -> bool {
        self.capabilities.iter().any(|c| match kind {
            Kind::Test => c["test"]["type"] == job_type,
            Kind::Translation => c["translation"]["type"] == job_type,
        })
    }
}

/// The (kind, type) a capability offers, `None` when its `format` is unset.
pub fn offer(c: &proto::Capability) -> Option<(Kind, &str)> {
    match c.format.as_ref()? {
        proto::capability::Format::Test(t) => Some((Kind::Test, t.r#type.as_str())),
        proto::capability::Format::Translation(t) => Some((Kind::Translation, t.r#type.as_str())),
    }
}
