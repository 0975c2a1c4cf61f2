//! Agents and scopes as the wire shows them, and a sent message as observers see it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use map_protocol::rpc::{codes, RpcError};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    pub id: String,
    /// Participant id of the session that owns the agent; empty while it
    /// is orphaned, and `null` on the wire then (the SDK's `isOrphanedAgent`).
    #[serde(serialize_with = "owner_or_null", deserialize_with = "null_or_owner")]
    pub owner_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Shared: every event about the agent carries its role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Arc<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    pub state: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
    /// Its own agent-level rules (see `agent_permissions`), merged per section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_overrides: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Where the agent runs (an object, kept as registered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Value>,
    /// What the agent offers, for discovery: `capabilities[].id`, `tags`,
    /// `accepts[].contentType` are what `map/agents/list` filters on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_descriptor: Option<Value>,
    pub lifecycle: Lifecycle,
    /// The owning session (not on the wire).
    #[serde(skip)]
    pub session: String,
    /// The state before `map/agents/suspend`, which resume restores.
    #[serde(skip)]
    pub suspended_from: Option<String>,
}

fn owner_or_null<S: serde::Serializer>(owner: &str, s: S) -> Result<S::Ok, S::Error> {
    if owner.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(owner)
    }
}

fn null_or_owner<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    pub created_at: u64,
    pub last_state_change: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scope {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    pub join_policy: String,
    pub visibility: String,
    pub send_policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    pub created_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Member agent ids, in join order (on the wire through `members`).
    #[serde(skip)]
    pub members: Vec<String>,
}

impl Scope {
    /// A scope with the default policy: anyone joins, anyone sees, anyone sends.
    pub fn open(id: &str, created_by: &str) -> Scope {
        Scope {
            id: id.to_string(),
            name: None,
            parent: None,
            join_policy: "open".into(),
            visibility: "public".into(),
            send_policy: "anyone".into(),
            metadata: None,
            created_at: map_protocol::ids::now_ms(),
            created_by: Some(created_by.to_string()),
            members: Vec::new(),
        }
    }
}

const STATES: &[&str] = &["registered", "active", "busy", "idle", "suspended", "stopping", "stopped", "failed", "orphaned"];

/// A state name the specification knows, or a custom `x-<name>`.
pub fn valid_state(state: &str) -> bool {
    STATES.contains(&state) || (state.len() > 2 && state.starts_with("x-"))
}

/// Check a state change: `stopped` is terminal, names must be known.
pub fn check_transition(agent: &Agent, to: &str) -> Result<(), RpcError> {
    if !valid_state(to) {
        return Err(RpcError::invalid_params(format!("Unknown agent state {to:?}")));
    }
    if agent.state == "stopped" && to != "stopped" {
        return Err(RpcError::new(codes::AGENT_TERMINATED, format!("Agent {} is stopped", agent.id)));
    }
    Ok(())
}

/// `map/agents/register` and `map/agents/spawn` params.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterParams {
    pub agent_id: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub role: Option<Arc<str>>,
    pub parent: Option<String>,
    pub scopes: Vec<String>,
    pub visibility: Option<String>,
    pub capabilities: Option<Value>,
    pub metadata: Option<Value>,
    pub environment: Option<Value>,
    pub capability_descriptor: Option<Value>,
    pub state: Option<String>,
    pub permission_overrides: Option<Value>,
}

/// A delivered message, as observers see it.
#[derive(Debug, Clone)]
pub struct Observed {
    pub id: String,
    pub from: String,
    /// JSON text of the address as sent.
    pub to: String,
    pub timestamp: u64,
    /// JSON text of the payload (`null` when none).
    pub payload: String,
    pub meta: Value,
    pub delivered: Vec<String>,
    /// Nested observer calls it comes from.
    pub hops: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        assert!(valid_state("busy"));
        assert!(valid_state("x-thinking"));
        assert!(!valid_state("x-"));
        assert!(!valid_state("sleeping"));
    }
}

/// `map/connect`'s params, kept with a connection that still owes its credentials.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConnectParams {
    pub protocol_version: Option<Value>,
    pub participant_type: Option<String>,
    pub participant_id: Option<String>,
    pub name: Option<String>,
    pub capabilities: Option<Value>,
    pub session_id: Option<String>,
    pub resume_token: Option<String>,
    pub reclaim_agents: Option<Vec<String>>,
    pub disconnect_policy: Option<DisconnectPolicy>,
    pub auth: Option<AuthParams>,
    /// Draft `map/initialize`: `full` or `acp-compat`.
    pub mode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DisconnectPolicy {
    pub agent_behavior: Option<String>,
    pub grace_period_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct AuthParams {
    pub method: Option<String>,
    /// The SDK sends `credential`; the schema says `token`.
    pub credential: Option<String>,
    pub token: Option<String>,
}
