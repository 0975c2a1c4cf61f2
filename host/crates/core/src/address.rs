//! `map/send` addressing: parse every address form and resolve it to recipients.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::agent_permissions::{self, Party};
use super::model::Agent;
use super::registry::{Registry, Viewer};
use map_protocol::rpc::{codes, RpcError};

#[derive(Debug, Clone, PartialEq)]
pub enum Relation {
    Parent,
    Children,
    Ancestors,
    Descendants,
    Siblings,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Address {
    /// A plain string: an agent id, or `agent:<id>` / `scope:<id>`.
    Bare(String),
    Agent(String),
    Agents(Vec<String>),
    Scope(String),
    Role {
        role: String,
        within: Option<String>,
    },
    Relative {
        relation: Relation,
        depth: Option<usize>,
    },
    Broadcast,
    System,
    Participant(String),
    /// `all`, `agents` or `clients`.
    Participants(String),
    Federated {
        system: String,
        agent: String,
    },
    Many(Vec<Address>),
}

fn bad(msg: impl Into<String>) -> RpcError {
    RpcError::invalid_params(format!("Invalid address: {}", msg.into()))
}

fn string_list(v: &Value) -> Option<Vec<String>> {
    v.as_array()?.iter().map(|x| x.as_str().map(String::from)).collect()
}

/// `{"agent": "…"}` and nothing else: the form nearly every send uses.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JustAgent {
    agent: String,
}

impl Address {
    /// Parse `to` as sent; the common `{"agent": …}` skips building a JSON tree.
    pub fn from_json(raw: &RawValue) -> Result<Address, RpcError> {
        let text = raw.get();
        if text.starts_with('{') {
            if let Ok(a) = serde_json::from_str::<JustAgent>(text) {
                return Ok(Address::Agent(a.agent));
            }
        }
        let v: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        Address::parse(&v)
    }

    pub fn parse(v: &Value) -> Result<Address, RpcError> {
        match v {
            Value::String(s) if !s.is_empty() => Ok(Address::Bare(s.clone())),
            Value::Array(items) if !items.is_empty() => Ok(Address::Many(items.iter().map(Address::parse).collect::<Result<_, _>>()?)),
            Value::Object(m) => {
                let get_str = |k: &str| m.get(k).and_then(Value::as_str).map(String::from);
                let truthy = |k: &str| m.get(k) == Some(&Value::Bool(true));
                if let (Some(system), Some(agent)) = (get_str("system"), get_str("agent")) {
                    return Ok(Address::Federated { system, agent });
                }
                if let Some(a) = get_str("agent") {
                    return Ok(Address::Agent(a));
                }
                if let Some(v) = m.get("agents") {
                    return match string_list(v) {
                        Some(list) if !list.is_empty() => Ok(Address::Agents(list)),
                        _ => Err(bad("`agents` must be a non-empty list of agent ids")),
                    };
                }
                if let Some(s) = get_str("scope") {
                    return Ok(Address::Scope(s));
                }
                if let Some(role) = get_str("role") {
                    return Ok(Address::Role { role, within: get_str("within") });
                }
                let depth = m.get("depth").and_then(Value::as_u64).map(|d| d as usize);
                for (key, relation) in [
                    ("parent", Relation::Parent),
                    ("children", Relation::Children),
                    ("ancestors", Relation::Ancestors),
                    ("descendants", Relation::Descendants),
                    ("siblings", Relation::Siblings),
                ] {
                    if truthy(key) {
                        return Ok(Address::Relative { relation, depth });
                    }
                }
                if truthy("broadcast") {
                    return Ok(Address::Broadcast);
                }
                if truthy("system") {
                    return Ok(Address::System);
                }
                if let Some(p) = get_str("participant") {
                    return Ok(Address::Participant(p));
                }
                if let Some(kind) = get_str("participants") {
                    if matches!(kind.as_str(), "all" | "agents" | "clients") {
                        return Ok(Address::Participants(kind));
                    }
                    return Err(bad("`participants` must be all, agents or clients"));
                }
                Err(bad("unrecognised address object"))
            }
            _ => Err(bad("`to` must be a string, an address object or a non-empty array")),
        }
    }
}

/// The sender as routing sees it.
pub struct Sender<'a> {
    pub session: &'a str,
    pub agent: Option<&'a str>,
    /// The sending session's participant type (agent visibility depends on it).
    pub participant_type: &'a str,
    pub participant_id: &'a str,
    /// For a message routed in from another system: that system's id.
    pub remote_system: Option<&'a str>,
}

impl Sender<'_> {
    /// The sender as agents' `acceptsFrom` rules tell senders apart.
    fn party<'r>(&'r self, reg: &'r Registry) -> Party<'r> {
        if let Some(system) = self.remote_system {
            return Party::System(system);
        }
        match self.agent.and_then(|a| reg.agents.get(a)) {
            Some(agent) => Party::Agent(agent),
            None if matches!(self.participant_type, "system" | "gateway") => Party::System(self.participant_id),
            None => Party::Client(self.participant_id),
        }
    }
}

/// One resolved recipient: the id reported in `delivered`, the session to deliver to.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipient {
    pub id: String,
    pub session: String,
}

fn none_reached(what: &str) -> RpcError {
    RpcError::new(codes::ADDRESS_NOT_FOUND, format!("Address reaches no recipient: {what}"))
}

fn push(out: &mut Vec<Recipient>, id: &str, session: &str) {
    if !out.iter().any(|r| r.id == id) {
        out.push(Recipient { id: id.to_string(), session: session.to_string() });
    }
}

struct Resolver<'a> {
    reg: &'a Registry,
    sender: &'a Sender<'a>,
    out: Vec<Recipient>,
}

impl Resolver<'_> {
    fn viewer(&self) -> Viewer<'_> {
        Viewer { session: self.sender.session, participant_type: self.sender.participant_type }
    }

    /// Why the agent-level rules keep this sender from `agent`; nothing to
    /// look up (not even who sends) until the tenant uses such rules.
    fn refused(&self, agent: &Agent) -> Option<String> {
        self.reg.agent_rules.then(|| agent_permissions::refuses_message(self.reg, &self.sender.party(self.reg), agent)).flatten()
    }

    /// Add an agent named explicitly: it must exist and be reachable.
    fn explicit_agent(&mut self, id: &str) -> Result<(), RpcError> {
        let agent = self.reg.visible_agent(id, &self.viewer())?;
        if agent.state == "stopped" {
            return Err(RpcError::new(codes::AGENT_TERMINATED, format!("Agent {id} is stopped")));
        }
        if !self.reg.sessions.contains_key(&agent.session) {
            return Err(RpcError::new(codes::DELIVERY_FAILED, format!("Agent {id} has no connected owner")));
        }
        if let Some(why) = self.refused(agent) {
            return Err(RpcError::new(codes::PERMISSION_DENIED, why));
        }
        let session = &agent.session;
        push(&mut self.out, id, session);
        Ok(())
    }

    /// Add agents selected by a group address; the sender, hidden and
    /// unreachable agents are left out. A group that holds no one right now
    /// reaches no one: that is not an error.
    fn group<'b>(&mut self, ids: impl IntoIterator<Item = &'b String>) {
        // A group may be large: its own ids are told apart by a set (no
        // allocation until the first), those reached before by a scan.
        let before = self.out.len();
        let mut seen: foldhash::HashSet<&'b str> = foldhash::HashSet::default();
        for id in ids {
            if Some(id.as_str()) == self.sender.agent {
                continue;
            }
            let Some(agent) = self.reg.agents.get(id) else { continue };
            if agent.state == "stopped" || !self.reg.sessions.contains_key(&agent.session) || !self.reg.visible(agent, &self.viewer()) {
                continue;
            }
            if self.refused(agent).is_some() || self.out[..before].iter().any(|r| r.id == *id) || !seen.insert(id) {
                continue;
            }
            self.out.push(Recipient { id: id.clone(), session: agent.session.clone() });
        }
    }

    fn sender_agent(&self) -> Result<&str, RpcError> {
        self.sender.agent.ok_or_else(|| RpcError::invalid_params("A relative address needs a sending agent: register an agent first"))
    }

    fn scope(&mut self, id: &str) -> Result<(), RpcError> {
        let scope = self.reg.scope(id)?;
        if scope.send_policy == "members" && !self.sender.agent.is_some_and(|a| scope.members.iter().any(|m| m == a)) {
            return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Only members may send to scope {id}")));
        }
        if let Some(why) = self.reg.agent_rules.then(|| agent_permissions::refuses_scope(self.reg, &self.sender.party(self.reg), scope)).flatten() {
            return Err(RpcError::new(codes::PERMISSION_DENIED, why));
        }
        self.group(scope.members.iter());
        Ok(())
    }

    fn resolve(&mut self, addr: &Address) -> Result<(), RpcError> {
        let reg = self.reg;
        match addr {
            Address::Bare(s) => {
                if let Some(id) = s.strip_prefix("agent:") {
                    return self.explicit_agent(id);
                }
                if let Some(id) = s.strip_prefix("scope:") {
                    return self.scope(id);
                }
                match (reg.agents.contains_key(s), reg.scopes.contains_key(s)) {
                    (true, true) => Err(RpcError::new(codes::ADDRESS_AMBIGUOUS, format!("{s:?} names both an agent and a scope; use agent:{s} or scope:{s}"))),
                    (false, true) => self.scope(s),
                    _ => self.explicit_agent(s),
                }
            }
            Address::Agent(id) => self.explicit_agent(id),
            Address::Agents(ids) => ids.iter().try_for_each(|id| self.explicit_agent(id)),
            Address::Scope(id) => self.scope(id),
            Address::Role { role, within } => {
                let members: Vec<String> = match within {
                    Some(scope) => reg.scope(scope)?.members.clone(),
                    None => reg.agents_sorted().into_iter().map(|a| a.id.clone()).collect(),
                };
                let ids: Vec<String> = members.into_iter().filter(|id| reg.agents.get(id).and_then(|a| a.role.as_deref()) == Some(role)).collect();
                self.group(ids.iter());
                Ok(())
            }
            Address::Relative { relation, depth } => {
                let me = self.sender_agent()?.to_string();
                let depth = depth.unwrap_or(usize::MAX).max(1);
                let ids: Vec<String> = match relation {
                    Relation::Parent => reg.ancestors(&me, 1),
                    Relation::Ancestors => reg.ancestors(&me, depth),
                    Relation::Children => reg.descendants(&me, 1),
                    Relation::Descendants => reg.descendants(&me, depth),
                    Relation::Siblings => match reg.agents.get(&me).and_then(|a| a.parent.as_ref()).and_then(|p| reg.agents.get(p)) {
                        Some(parent) => parent.children.clone(),
                        None => Vec::new(),
                    },
                };
                self.group(ids.iter());
                Ok(())
            }
            Address::Broadcast => {
                let ids: Vec<String> = reg.agents_sorted().into_iter().map(|a| a.id.clone()).collect();
                self.group(ids.iter());
                Ok(())
            }
            // The router itself is always reachable: connected `system` participants get a copy.
            Address::System => {
                self.participants(|t| t == "system");
                Ok(())
            }
            Address::Participant(p) => {
                let session = reg.participants.get(p).ok_or_else(|| none_reached(&format!("participant {p} is not connected")))?;
                push(&mut self.out, p, session);
                Ok(())
            }
            Address::Participants(kind) => {
                match kind.as_str() {
                    "agents" => self.participants(|t| t == "agent"),
                    "clients" => self.participants(|t| t == "client"),
                    _ => self.participants(|_| true),
                }
                Ok(())
            }
            Address::Federated { system, .. } => {
                Err(RpcError::new(codes::FEDERATION_UNAVAILABLE, format!("Federation is not configured: system {system:?} is unreachable")))
            }
            Address::Many(items) => items.iter().try_for_each(|a| self.resolve(a)),
        }
    }

    fn participants(&mut self, kind: impl Fn(&str) -> bool) {
        let mut sessions: Vec<_> = self.reg.sessions.values().filter(|s| s.id != self.sender.session && kind(&s.participant_type)).collect();
        sessions.sort_by_key(|s| s.created_at);
        for s in sessions {
            push(&mut self.out, &s.participant_id, &s.id);
        }
    }
}

/// Resolve an address to its recipients. A named target that does not exist
/// is an error (2001 agent, 2002 scope, 2000 participant); a group or
/// relative address that holds no one resolves to no recipients.
pub fn resolve(reg: &Registry, addr: &Address, sender: &Sender) -> Result<Vec<Recipient>, RpcError> {
    let mut r = Resolver { reg, sender, out: Vec::new() };
    r.resolve(addr)?;
    Ok(r.out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_every_form() {
        let p = |v: Value| Address::parse(&v).unwrap();
        assert_eq!(p(json!("a1")), Address::Bare("a1".into()));
        assert_eq!(p(json!({"agent": "a1"})), Address::Agent("a1".into()));
        assert_eq!(p(json!({"agents": ["a", "b"]})), Address::Agents(vec!["a".into(), "b".into()]));
        assert_eq!(p(json!({"scope": "s"})), Address::Scope("s".into()));
        assert_eq!(p(json!({"role": "w", "within": "s"})), Address::Role { role: "w".into(), within: Some("s".into()) });
        assert_eq!(p(json!({"descendants": true, "depth": 2})), Address::Relative { relation: Relation::Descendants, depth: Some(2) });
        assert_eq!(p(json!({"broadcast": true})), Address::Broadcast);
        assert_eq!(p(json!({"system": true})), Address::System);
        assert_eq!(p(json!({"system": "other", "agent": "x"})), Address::Federated { system: "other".into(), agent: "x".into() });
        assert_eq!(p(json!({"participant": "p"})), Address::Participant("p".into()));
        assert_eq!(p(json!({"participants": "clients"})), Address::Participants("clients".into()));
        assert!(matches!(p(json!([{"agent": "a"}, "b"])), Address::Many(v) if v.len() == 2));
        for bad in [json!(""), json!([]), json!({"agents": []}), json!({"participants": "x"}), json!({"nope": 1}), json!(3)] {
            assert_eq!(Address::parse(&bad).unwrap_err().code, codes::INVALID_PARAMS, "{bad}");
        }
    }
}
