//! What the directory stream holds, as JSON: an agent, a scope, a session
//! (with the node serving it) or a subscription's checkpoint. Each record
//! names the node that wrote it (`origin`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use map_core::events::Filter;
use map_core::model::{Agent, Scope};
use map_core::registry::Granted;
use map_core::registry::SessionInfo;

#[derive(Serialize, Deserialize)]
pub(super) struct AgentRecord {
    pub origin: String,
    pub session: String,
    #[serde(default)]
    pub suspended_from: Option<String>,
    #[serde(flatten)]
    pub agent: Agent,
}

#[derive(Serialize, Deserialize)]
pub(super) struct ScopeRecord {
    pub origin: String,
    #[serde(default)]
    pub members: Vec<String>,
    #[serde(flatten)]
    pub scope: Scope,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SessionRecord {
    origin: String,
    /// The node serving it.
    pub home: String,
    id: String,
    participant_id: String,
    participant_type: String,
    #[serde(default)]
    name: Option<String>,
    agents: Vec<String>,
    connected: bool,
    created_at: u64,
    connected_at: u64,
    #[serde(default)]
    disconnected_at: Option<u64>,
    agent_behavior: String,
    #[serde(default)]
    capabilities: Value,
    /// Changed by `map/permissions/update` (on any node; the serving node keeps the newest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Granted>,
    principal: String,
    resume_hash: String,
}

impl SessionRecord {
    pub fn of(origin: &str, s: &SessionInfo) -> SessionRecord {
        SessionRecord {
            origin: origin.to_string(),
            home: s.home.as_deref().unwrap_or(origin).to_string(),
            id: s.id.clone(),
            participant_id: s.participant_id.clone(),
            participant_type: s.participant_type.clone(),
            name: s.name.clone(),
            agents: s.agents.clone(),
            connected: s.connected,
            created_at: s.created_at,
            connected_at: s.connected_at,
            disconnected_at: s.disconnected_at,
            agent_behavior: s.agent_behavior.clone(),
            capabilities: s.capabilities.clone(),
            permissions: s.permissions.clone(),
            principal: s.principal.to_string(),
            resume_hash: s.resume_hash.clone(),
        }
    }

    pub fn into_info(self) -> SessionInfo {
        // Written by the serving node itself: it has the change.
        let confirmed = self.origin == self.home;
        SessionInfo {
            id: self.id,
            participant_id: self.participant_id,
            participant_type: self.participant_type,
            name: self.name,
            agents: self.agents,
            connected: self.connected,
            created_at: self.created_at,
            connected_at: self.connected_at,
            disconnected_at: self.disconnected_at,
            agent_behavior: self.agent_behavior,
            capabilities: self.capabilities,
            permissions: self.permissions.map(|p| Granted { confirmed, ..p }),
            principal: self.principal.into(),
            resume_hash: self.resume_hash,
            home: Some(self.home.into()),
        }
    }
}

/// A subscription's position, as the directory keeps it for a resume elsewhere.
#[derive(serde::Serialize, serde::Deserialize, Clone)]
pub struct Checkpoint {
    pub session: String,
    pub filter: Filter,
    pub sequence: u64,
    /// The last event sent (or the newest logged when it began; none: the log was empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
    /// Its events are held (`map/subscriptions/pause`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

impl Checkpoint {
    /// Whether it names the same position and pause (a subscription's filter never changes).
    pub fn same_place(&self, other: &Checkpoint) -> bool {
        self.sequence == other.sequence && self.last == other.last && self.paused == other.paused
    }
}

/// What of another node's agent this node may change and must then write:
/// everything but its children, which each node keeps from the children's
/// own records (see `put_agent`).
pub(super) fn essence(agent: &Agent) -> Vec<u8> {
    let record = AgentRecord {
        origin: String::new(),
        session: agent.session.clone(),
        suspended_from: agent.suspended_from.clone(),
        agent: Agent { children: Vec::new(), ..agent.clone() },
    };
    serde_json::to_vec(&record).expect("agents serialise")
}
