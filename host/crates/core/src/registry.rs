//! One tenant's directory: sessions, agents and scopes.

use foldhash::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::model::{Agent, Scope};
use super::tracked::{Created, Tracked};
use map_protocol::rpc::{codes, RpcError};

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
    /// When a connection last took the session up: its creation, or its
    /// latest resume (presence counts from here).
    #[serde(skip)]
    pub connected_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disconnected_at: Option<u64>,
    /// What happens to the agents when the session ends: unregister, orphan or
    /// grace-period (kept until the resume window closes), as `map/connect`
    /// said, or `map/disconnect` since.
    #[serde(skip)]
    pub agent_behavior: String,
    #[serde(skip)]
    pub capabilities: Value,
    /// What `map/permissions/update` changed of its grants (none: nothing).
    #[serde(skip)]
    pub permissions: Option<Granted>,
    /// Who opened it (a resume must come from the same principal).
    #[serde(skip)]
    pub principal: std::sync::Arc<str>,
    /// SHA-256 (hex) of its current resume token.
    #[serde(skip)]
    pub resume_hash: String,
    /// The node that serves it, when that is another node of a cluster.
    #[serde(skip)]
    pub home: Option<std::sync::Arc<str>>,
}

impl Created for SessionInfo {
    fn created_at(&self) -> u64 {
        self.created_at
    }
}

impl Created for Agent {
    fn created_at(&self) -> u64 {
        self.lifecycle.created_at
    }
}

impl Created for Scope {
    fn created_at(&self) -> u64 {
        self.created_at
    }
}

/// Whether declared capabilities hold `true` at a dotted path (no empty segments).
pub fn declares(capabilities: &Value, path: &str) -> bool {
    let mut at = capabilities;
    for key in path.split('.') {
        match at.get(key) {
            Some(next) if !key.is_empty() => at = next,
            _ => return false,
        }
    }
    at == &Value::Bool(true)
}

/// Whether declared capabilities take part in a group at a dotted path:
/// `true` there, or a JSON object without `"enabled": false` (`{"mail":
/// {"canJoin": true}}` declares `mail`).
pub fn declares_group(capabilities: &Value, path: &str) -> bool {
    let mut at = capabilities;
    for key in path.split('.') {
        match at.get(key) {
            Some(next) if !key.is_empty() => at = next,
            _ => return false,
        }
    }
    match at {
        Value::Bool(b) => *b,
        Value::Object(group) => group.get("enabled") != Some(&Value::Bool(false)),
        _ => false,
    }
}

/// Who is looking, for agent visibility.
pub struct Viewer<'a> {
    pub session: &'a str,
    pub participant_type: &'a str,
}

/// Looked up on every send: foldhash (seeded per process) instead of SipHash.
#[derive(Default)]
pub struct Registry {
    pub sessions: Tracked<SessionInfo>,
    /// participant id → session id
    pub participants: HashMap<String, String>,
    pub agents: Tracked<Agent>,
    pub scopes: Tracked<Scope>,
    /// participant id → the principal that first used it; nobody else may claim it.
    pub participant_owners: HashMap<String, std::sync::Arc<str>>,
    /// The tenant's agent-level templates (`[tenants.agent_permissions]`).
    pub agent_policy: std::sync::Arc<super::agent_permissions::Policy>,
    /// Agent-level rules are in use (a template narrows something, or some
    /// agent has overrides or a non-public visibility): until then the
    /// checks of `agent_permissions` cost one load. Never turns off.
    pub agent_rules: bool,
    /// `sessions_with_capability` answers by path, with the sessions'
    /// generation they were found at.
    capable: HashMap<String, (u64, Vec<String>)>,
}

/// Capability paths whose sessions are kept (plugins name them; a few do).
const CAPABLE_PATHS: usize = 16;

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
    /// The viewer's own agents' `canSee.agents` narrows this further (see `agent_permissions`).
    pub fn visible(&self, agent: &Agent, viewer: &Viewer) -> bool {
        if agent.session == viewer.session || matches!(viewer.participant_type, "system" | "gateway") {
            return true;
        }
        let exposed = match agent.visibility.as_deref().unwrap_or("public") {
            "public" => true,
            "parent-only" => agent.parent.as_ref().and_then(|p| self.agents.get(p)).is_some_and(|p| p.session == viewer.session),
            "scope" => self
                .sessions
                .get(viewer.session)
                .is_some_and(|s| s.agents.iter().filter_map(|a| self.agents.get(a)).any(|mine| mine.scopes.iter().any(|sc| agent.scopes.contains(sc)))),
            _ => false,
        };
        exposed && super::agent_permissions::sees_agent(self, viewer.session, agent)
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
        self.agents.in_order().collect()
    }

    /// The sessions whose capabilities, as declared at `map/connect`, hold
    /// `true` at a dotted path (`mail.canObserve`), detached ones included
    /// (their frames wait for a resume), in id order. Found by a walk of
    /// every session once per change to the sessions, not once per call: a
    /// plugin asks on every event it sends to observers.
    pub fn sessions_with_capability(&mut self, path: &str) -> Vec<String> {
        let generation = self.sessions.generation();
        if let Some((_, found)) = self.capable.get(path).filter(|(g, _)| *g == generation) {
            return found.clone();
        }
        let mut found: Vec<String> = self.sessions.values().filter(|s| declares(&s.capabilities, path)).map(|s| s.id.clone()).collect();
        found.sort();
        if self.capable.len() >= CAPABLE_PATHS && !self.capable.contains_key(path) {
            self.capable.clear();
        }
        self.capable.insert(path.to_string(), (generation, found.clone()));
        found
    }

    /// The session an id reaches, as `map/send` finds it: an agent's owning
    /// session (none while the agent is orphaned), else a participant's.
    /// Every answer about who an id is and whether it is connected reads
    /// this, so none can disagree with delivery.
    pub fn session_for(&self, id: &str) -> Option<&SessionInfo> {
        match self.agents.get(id) {
            Some(agent) => self.sessions.get(&agent.session),
            None => self.sessions.get(self.participants.get(id)?),
        }
    }

    /// Since when (Unix ms) an agent or participant id has had a live,
    /// connected session (see `session_for`): an agent since it registered
    /// (or since its session resumed, if later), a participant since its
    /// session was last taken up. `None` for unknown ids, orphaned agents
    /// and detached sessions.
    pub fn connected_since(&self, id: &str) -> Option<u64> {
        let session = self.session_for(id).filter(|s| s.connected)?;
        Some(self.agents.get(id).map_or(session.connected_at, |a| a.lifecycle.created_at.max(session.connected_at)))
    }

    /// Whether a new session of `principal` may take `id` as its participant
    /// id: not while another session is connected as that participant or
    /// owns an agent of that id (3000), so an id never names two sessions.
    /// A detached session of this node holding it gives way: its id is
    /// returned, to be ended first (agents of the same principal only, and
    /// only if ending it leaves no orphan of that id, unless `reclaiming`
    /// it; an orphan of that id likewise only to be reclaimed).
    pub fn participant_id_holders(&self, id: &str, principal: &str, reclaiming: bool) -> Result<Vec<String>, RpcError> {
        let taken = |what: &str| {
            Err(RpcError::new(codes::AGENT_EXISTS, format!("{what} {id} already exists; a participant id may name no other session's participant or agent")))
        };
        let mut yielding = Vec::new();
        if let Some(holder) = self.participants.get(id).and_then(|s| self.sessions.get(s)) {
            if holder.connected {
                return taken("Participant");
            }
            // Another node's detached session keeps its agents; the id moves here.
            if holder.home.is_none() {
                yielding.push(holder.id.clone());
            }
        }
        if let Some(agent) = self.agents.get(id) {
            let owner = self.sessions.get(&agent.session);
            let leaves = owner.is_some_and(|s| {
                !s.connected && s.home.is_none() && map_protocol::ids::secrets_equal(&s.principal, principal) && (reclaiming || s.agent_behavior != "orphan")
            });
            if !(leaves || (agent.session.is_empty() && reclaiming)) {
                return taken("Agent");
            }
            yielding.extend(owner.map(|s| s.id.clone()).filter(|s| !yielding.contains(s)));
        }
        Ok(yielding)
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
        let mut seen = std::collections::HashSet::from([id.to_string()]);
        let mut level = vec![id.to_string()];
        for _ in 0..depth {
            let next: Vec<String> =
                level.iter().filter_map(|a| self.agents.get(a)).flat_map(|a| a.children.iter()).filter(|c| seen.insert(c.to_string())).cloned().collect();
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

impl super::agent_permissions::Agents for Registry {
    fn agent(&self, id: &str) -> Option<&Agent> {
        self.agents.get(id)
    }

    fn owned_by(&self, session: &str) -> Vec<&Agent> {
        self.sessions.get(session).map(|s| s.agents.iter().filter_map(|a| self.agents.get(a)).collect()).unwrap_or_default()
    }

    fn rules(&self) -> Option<&super::agent_permissions::Policy> {
        self.agent_rules.then_some(&*self.agent_policy)
    }
}

/// What `map/permissions/update` changed for one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Granted {
    /// Capability group → flag → value, over the participant type's grants.
    pub overrides: Map<String, Value>,
    /// Counts the updates; in a cluster the serving node keeps the highest.
    pub rev: u64,
    /// The node serving the session has this change (always so there); on
    /// another node that made it, not until the serving node writes it back.
    #[serde(skip, default)]
    pub confirmed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Lifecycle;
    use serde_json::json;

    fn session(id: &str, participant: &str, capabilities: Value, connected_at: u64) -> SessionInfo {
        SessionInfo {
            id: id.into(),
            participant_id: participant.into(),
            participant_type: "client".into(),
            name: None,
            agents: Vec::new(),
            connected: true,
            created_at: 1,
            connected_at,
            disconnected_at: None,
            agent_behavior: "grace-period".into(),
            capabilities,
            permissions: None,
            principal: "p".into(),
            resume_hash: String::new(),
            home: None,
        }
    }

    fn agent(id: &str, session: &str, registered: u64) -> Agent {
        Agent {
            id: id.into(),
            owner_id: "p".into(),
            name: None,
            description: None,
            role: None,
            parent: None,
            children: Vec::new(),
            state: "active".into(),
            scopes: Vec::new(),
            visibility: None,
            permission_overrides: None,
            capabilities: None,
            metadata: None,
            environment: None,
            capability_descriptor: None,
            lifecycle: Lifecycle { created_at: registered, last_state_change: registered, exit_reason: None },
            session: session.into(),
            suspended_from: None,
        }
    }

    fn registry(sessions: Vec<SessionInfo>) -> Registry {
        let mut reg = Registry::default();
        for s in sessions {
            reg.participants.insert(s.participant_id.clone(), s.id.clone());
            reg.sessions.insert(s.id.clone(), s);
        }
        reg
    }

    #[test]
    fn a_capability_counts_only_when_true_at_its_path() {
        let caps = json!({"mail": {"canObserve": true, "canJoin": "yes"}, "flat": true});
        assert!(declares(&caps, "mail.canObserve"));
        assert!(declares(&caps, "flat"));
        assert!(!declares(&caps, "mail.canJoin"), "only the boolean true counts");
        assert!(!declares(&caps, "mail"), "an object is not true");
        assert!(!declares(&caps, "mail.canObserve.more"));
        assert!(!declares(&caps, "mail..canObserve"));
        assert!(!declares(&caps, ""));
        assert!(!declares(&Value::Null, "mail.canObserve"));
    }

    #[test]
    fn a_group_is_declared_as_true_or_as_an_object_not_switched_off() {
        let caps = json!({"mail": {"canJoin": true}, "on": true, "off": false, "none": null, "word": "yes", "x": {"enabled": false}, "y": {"enabled": true}});
        assert!(declares_group(&caps, "mail"));
        assert!(declares_group(&caps, "on"));
        assert!(declares_group(&caps, "y"));
        assert!(declares_group(&caps, "mail.canJoin"));
        for path in ["off", "none", "word", "x", "absent", "mail.canObserve", "", "mail..canJoin"] {
            assert!(!declares_group(&caps, path), "{path}");
        }
        assert!(!declares_group(&Value::Null, "mail"));
    }

    #[test]
    fn sessions_with_a_capability_include_detached_ones() {
        let mut detached = session("s3", "p3", json!({"mail": {"canObserve": true}}), 5);
        detached.connected = false;
        let mut reg = registry(vec![
            session("s2", "p2", json!({"mail": {"canObserve": true}}), 5),
            session("s1", "p1", json!({"mail": {"canObserve": false}}), 5),
            detached,
            session("s0", "p0", Value::Null, 5),
        ]);
        assert_eq!(reg.sessions_with_capability("mail.canObserve"), ["s2", "s3"]);
        assert!(reg.sessions_with_capability("mail.canCreate").is_empty());
        // Answers kept by path follow every change to the sessions.
        reg.sessions.insert("s4".into(), session("s4", "p4", json!({"mail": {"canObserve": true}}), 6));
        assert_eq!(reg.sessions_with_capability("mail.canObserve"), ["s2", "s3", "s4"]);
        reg.sessions.remove("s2");
        assert_eq!(reg.sessions_with_capability("mail.canObserve"), ["s3", "s4"]);
        reg.sessions.get_mut("s3").unwrap().capabilities = Value::Null;
        assert_eq!(reg.sessions_with_capability("mail.canObserve"), ["s4"]);
        reg.sessions.insert_quiet("s5".into(), session("s5", "p5", json!({"mail": {"canObserve": true}}), 7));
        assert_eq!(reg.sessions_with_capability("mail.canObserve"), ["s4", "s5"], "a change applied from another node counts too");
        for i in 0..CAPABLE_PATHS + 2 {
            reg.sessions_with_capability(&format!("x{i}.y"));
        }
        assert!(reg.capable.len() <= CAPABLE_PATHS, "paths kept are bounded");
        assert_eq!(reg.sessions_with_capability("mail.canObserve"), ["s4", "s5"]);
    }

    #[test]
    fn connected_since_by_participant_and_agent() {
        let mut reg = registry(vec![session("s1", "p1", Value::Null, 100), session("s2", "p2", Value::Null, 500)]);
        reg.agents.insert("a1".into(), agent("a1", "s1", 150));
        reg.agents.insert("a2".into(), agent("a2", "s2", 300));
        reg.agents.insert("orphan".into(), agent("orphan", "", 50));
        assert_eq!(reg.connected_since("p1"), Some(100), "a participant: when its session connected");
        assert_eq!(reg.connected_since("a1"), Some(150), "an agent: when it registered");
        assert_eq!(reg.connected_since("a2"), Some(500), "…or when its session resumed, if later");
        assert_eq!(reg.connected_since("orphan"), None);
        assert_eq!(reg.connected_since("nobody"), None);
        reg.sessions.get_mut("s1").unwrap().connected = false;
        assert_eq!(reg.connected_since("p1"), None, "a dropped session awaiting resume is not connected");
        assert_eq!(reg.connected_since("a1"), None);
    }

    #[test]
    fn an_agent_id_reaches_its_owner_before_a_participant_of_that_id() {
        let mut reg = registry(vec![session("s1", "p1", Value::Null, 100), session("s2", "x", Value::Null, 200)]);
        reg.agents.insert("x".into(), agent("x", "s1", 150));
        reg.sessions.get_mut("s2").unwrap().connected = false;
        assert_eq!(reg.session_for("x").map(|s| s.id.as_str()), Some("s1"), "as map/send {{agent}} finds it");
        assert_eq!(reg.connected_since("x"), Some(150));
        reg.agents.get_mut("x").unwrap().session = String::new();
        assert_eq!(reg.session_for("x").map(|s| s.id.as_str()), None, "an orphan reaches nobody");
        assert_eq!(reg.connected_since("x"), None);
    }

    #[test]
    fn a_participant_id_is_had_only_where_no_other_session_holds_it() {
        let mut reg = registry(vec![session("s1", "p1", Value::Null, 100), session("s2", "p2", Value::Null, 100)]);
        reg.agents.insert("a1".into(), agent("a1", "s1", 150));
        reg.agents.insert("a2".into(), agent("a2", "s2", 150));
        reg.agents.insert("orphan".into(), agent("orphan", "", 50));
        let code = |r: Result<Vec<String>, RpcError>| r.map_err(|e| e.code);
        assert_eq!(code(reg.participant_id_holders("p1", "p", false)), Err(codes::AGENT_EXISTS), "a connected participant");
        assert_eq!(code(reg.participant_id_holders("a1", "p", false)), Err(codes::AGENT_EXISTS), "a connected session's agent");
        assert_eq!(code(reg.participant_id_holders("fresh", "p", false)), Ok(vec![]));
        assert_eq!(code(reg.participant_id_holders("orphan", "p", false)), Err(codes::AGENT_EXISTS), "an orphan, unless reclaimed");
        assert_eq!(code(reg.participant_id_holders("orphan", "p", true)), Ok(vec![]));
        reg.sessions.get_mut("s1").unwrap().connected = false;
        assert_eq!(code(reg.participant_id_holders("p1", "p", false)), Ok(vec!["s1".into()]), "a detached session gives way");
        assert_eq!(code(reg.participant_id_holders("a1", "p", false)), Ok(vec!["s1".into()]), "…for its agent too");
        assert_eq!(code(reg.participant_id_holders("a1", "q", false)), Err(codes::AGENT_EXISTS), "not to another principal");
        reg.sessions.get_mut("s1").unwrap().agent_behavior = "orphan".into();
        assert_eq!(code(reg.participant_id_holders("a1", "p", false)), Err(codes::AGENT_EXISTS), "its end would leave an orphan of that id");
        assert_eq!(code(reg.participant_id_holders("a1", "p", true)), Ok(vec!["s1".into()]), "…that this session reclaims");
        reg.sessions.get_mut("s1").unwrap().home = Some("other-node".into());
        assert_eq!(code(reg.participant_id_holders("a1", "p", true)), Err(codes::AGENT_EXISTS), "another node's session cannot be ended here");
        assert_eq!(code(reg.participant_id_holders("p1", "p", false)), Ok(vec![]), "its participant id moves here");
    }
}
