//! One tenant's directory: sessions, agents and scopes.

use foldhash::HashMap;

use serde::Serialize;
use serde_json::Value;

use super::model::{Agent, Scope};
use crate::rpc::{codes, RpcError};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub id: String,
    pub participant_id: String,
    pub participant_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Agents the session owns, in registration order.
    pub agents: Vec<String>,
    pub connected: bool,
    pub created_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disconnected_at: Option<u64>,
    /// What happens to the agents when the session ends: unregister, orphan or
    /// grace-period (kept until the resume window closes).
    #[serde(skip)]
    pub agent_behavior: String,
    #[serde(skip)]
    pub capabilities: Value,
}

/// Who is looking, for agent visibility.
pub struct Viewer<'a> {
    pub session: &'a str,
    pub participant_type: &'a str,
}

/// Looked up on every send: foldhash (seeded per process) instead of SipHash.
#[derive(Default)]
pub struct Registry {
    pub sessions: HashMap<String, SessionInfo>,
    /// participant id → session id
    pub participants: HashMap<String, String>,
    pub agents: HashMap<String, Agent>,
    pub scopes: HashMap<String, Scope>,
    /// participant id → the principal that first used it; nobody else may claim it.
    pub participant_owners: HashMap<String, std::sync::Arc<str>>,
}

impl Registry {
    pub fn agent(&self, id: &str) -> Result<&Agent, RpcError> {
        self.agents.get(id).ok_or_else(|| RpcError::new(codes::AGENT_NOT_FOUND, format!("Agent not found: {id}")))
    }

    pub fn agent_mut(&mut self, id: &str) -> Result<&mut Agent, RpcError> {
        self.agents.get_mut(id).ok_or_else(|| RpcError::new(codes::AGENT_NOT_FOUND, format!("Agent not found: {id}")))
    }

    pub fn scope(&self, id: &str) -> Result<&Scope, RpcError> {
        self.scopes.get(id).ok_or_else(|| RpcError::new(codes::SCOPE_NOT_FOUND, format!("Scope not found: {id}")))
    }

    pub fn scope_mut(&mut self, id: &str) -> Result<&mut Scope, RpcError> {
        self.scopes.get_mut(id).ok_or_else(|| RpcError::new(codes::SCOPE_NOT_FOUND, format!("Scope not found: {id}")))
    }

    /// Whether a session may see an agent, by the agent's `visibility`:
    /// `public` (or none) everyone; `parent-only` the sessions owning it or
    /// its parent; `scope` sessions owning an agent in one of its scopes;
    /// `system` system and gateway participants. The owner and system
    /// participants always see it.
    pub fn visible(&self, agent: &Agent, viewer: &Viewer) -> bool {
        let rule = agent.visibility.as_deref().unwrap_or("public");
        if rule == "public" || agent.session == viewer.session || matches!(viewer.participant_type, "system" | "gateway") {
            return true;
        }
        match rule {
            "parent-only" => agent.parent.as_ref().and_then(|p| self.agents.get(p)).is_some_and(|p| p.session == viewer.session),
            "scope" => self.sessions.get(viewer.session).is_some_and(|s| {
                s.agents.iter().filter_map(|a| self.agents.get(a)).any(|mine| mine.scopes.iter().any(|sc| agent.scopes.contains(sc)))
            }),
            _ => false,
        }
    }

    /// The sessions that may see an agent now (its events' audience).
    pub fn audience_of(&self, agent: &Agent) -> Vec<String> {
        self.sessions
            .values()
            .filter(|s| self.visible(agent, &Viewer { session: &s.id, participant_type: &s.participant_type }))
            .map(|s| s.id.clone())
            .collect()
    }

    /// An agent the viewer may see; a hidden one is "not found" (2001).
    pub fn visible_agent(&self, id: &str, viewer: &Viewer) -> Result<&Agent, RpcError> {
        self.agent(id).ok().filter(|a| self.visible(a, viewer)).ok_or_else(|| RpcError::new(codes::AGENT_NOT_FOUND, format!("Agent not found: {id}")))
    }

    /// Agents in a stable order: by creation time, then id.
    pub fn agents_sorted(&self) -> Vec<&Agent> {
        let mut all: Vec<&Agent> = self.agents.values().collect();
        all.sort_by(|a, b| (a.lifecycle.created_at, &a.id).cmp(&(b.lifecycle.created_at, &b.id)));
        all
    }

    /// Ancestors of an agent, nearest first, at most `depth` levels.
    pub fn ancestors(&self, id: &str, depth: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = self.agents.get(id).and_then(|a| a.parent.clone());
        while let Some(p) = cur {
            if out.len() >= depth || out.contains(&p) {
                break;
            }
            cur = self.agents.get(&p).and_then(|a| a.parent.clone());
            out.push(p);
        }
        out
    }

    /// Descendants of an agent, breadth first, at most `depth` levels.
    pub fn descendants(&self, id: &str, depth: usize) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut level = vec![id.to_string()];
        for _ in 0..depth {
            let next: Vec<String> = level
                .iter()
                .filter_map(|a| self.agents.get(a))
                .flat_map(|a| a.children.iter().cloned())
                .filter(|c| c != id && !out.contains(c))
                .collect();
            if next.is_empty() {
                break;
            }
            out.extend(next.iter().cloned());
            level = next;
        }
        out
    }

    /// Remove agents and every trace of them, in time linear in their number
    /// and the sizes of the scopes and families they touch.
    pub fn remove_agents(&mut self, ids: &[String]) -> Vec<Agent> {
        let gone: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        let removed: Vec<Agent> = ids.iter().filter_map(|id| self.agents.remove(id)).collect();
        let mut scopes = std::collections::HashSet::new();
        let mut parents = std::collections::HashSet::new();
        let mut sessions = std::collections::HashSet::new();
        for a in &removed {
            scopes.extend(a.scopes.iter().map(String::as_str));
            parents.extend(a.parent.as_deref().filter(|p| !gone.contains(p)));
            sessions.insert(a.session.as_str());
            for c in a.children.iter().filter(|c| !gone.contains(c.as_str())) {
                if let Some(child) = self.agents.get_mut(c) {
                    child.parent = None;
                }
            }
        }
        for s in scopes {
            if let Some(scope) = self.scopes.get_mut(s) {
                scope.members.retain(|m| !gone.contains(m.as_str()));
            }
        }
        for p in parents {
            if let Some(parent) = self.agents.get_mut(p) {
                parent.children.retain(|c| !gone.contains(c.as_str()));
            }
        }
        for s in sessions {
            if let Some(session) = self.sessions.get_mut(s) {
                session.agents.retain(|a| !gone.contains(a.as_str()));
            }
        }
        removed
    }

    /// Remove an agent and every trace of it (scopes, parent's children, owner's list).
    pub fn remove_agent(&mut self, id: &str) -> Option<Agent> {
        let agent = self.agents.remove(id)?;
        for s in &agent.scopes {
            if let Some(scope) = self.scopes.get_mut(s) {
                scope.members.retain(|m| m != id);
            }
        }
        if let Some(p) = agent.parent.as_ref().and_then(|p| self.agents.get_mut(p)) {
            p.children.retain(|c| c != id);
        }
        for c in &agent.children {
            if let Some(child) = self.agents.get_mut(c) {
                child.parent = None;
            }
        }
        if let Some(session) = self.sessions.get_mut(&agent.session) {
            session.agents.retain(|a| a != id);
        }
        Some(agent)
    }
}
