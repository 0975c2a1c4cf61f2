//! Agent methods: register/spawn, unregister, update, stop/suspend/resume,
//! list, inject.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::agent_permissions;
use crate::events::NewEvent;
use crate::lifecycle::agent_event;
use crate::model::{check_transition, Agent, Lifecycle, RegisterParams, Scope};
use crate::registry::Registry;
use crate::tracked::Position;
use crate::{Active, Out};
use map_protocol::ids;
use map_protocol::rpc::{codes, Request, RpcError};

fn publish(active: &Active, events: Vec<NewEvent>) {
    crate::lifecycle::publish_agent_events(&active.tenant, events);
}

fn scope_event(kind: &'static str, scope: &str, agent: &Agent) -> NewEvent {
    let mut ev = agent_event(kind, agent, json!({"scopeId": scope, "agentId": agent.id}));
    ev.source.scope_id = Some(scope.to_string());
    // A scope event concerns its own scope, not the agent's other memberships.
    ev.facets.scopes = vec![scope.to_string()];
    ev
}

pub fn register(active: &Active, req: &Request, spawn: bool) -> Result<Out, RpcError> {
    let mut p: RegisterParams = req.params()?;
    check_registration(&p)?;
    let overrides = p.permission_overrides.take().map(|v| agent_permissions::parse(&v, false)).transpose().map_err(RpcError::invalid_params)?;
    let mut events = Vec::new();
    let agent = {
        let mut reg = active.tenant.registry.lock();
        let id = p.agent_id.clone().unwrap_or_else(|| ids::prefixed("agent"));
        check_placement(&reg, active, &id, p.parent.as_deref(), spawn)?;
        if let Some(o) = &overrides {
            may_override(&reg, active, p.role.as_deref(), o)?;
        }
        p.permission_overrides = overrides.filter(|o| !o.is_empty()).map(Value::Object);
        // Scopes that do not exist yet are created with the default policy.
        for s in &p.scopes {
            if !reg.scopes.contains_key(s) {
                let scope = Scope::open(s, &active.participant_id);
                events.push(super::scopes::scope_only_event("scope_created", &scope, active, json!({"scope": scope})));
                reg.scopes.insert(s.clone(), scope);
            }
        }
        let agent = new_agent(active, id, p);
        link(&mut reg, active, &agent);
        events.push(agent_event("agent_registered", &agent, json!({"agent": agent})));
        for s in &agent.scopes {
            events.push(scope_event("scope_member_joined", s, &agent));
        }
        reg.agent_rules |= agent_permissions::uses_rules(&agent);
        reg.agents.insert(agent.id.clone(), agent.clone());
        agent
    };
    publish(active, events);
    Ok(json!({"agent": agent}).into())
}

/// Overrides of what the tenant's templates set are for admins only.
fn may_override(reg: &Registry, active: &Active, role: Option<&str>, changes: &Map<String, Value>) -> Result<(), RpcError> {
    let policy = &reg.agent_policy;
    let admin = policy.is_admin(&active.participant_type, &active.principal);
    policy.check_overrides(role, changes, admin).map_err(|e| RpcError::new(codes::PERMISSION_DENIED, e))
}

/// What can be checked of a registration before the directory is locked.
fn check_registration(p: &RegisterParams) -> Result<(), RpcError> {
    if p.agent_id.as_ref().is_some_and(|id| id.is_empty() || id.len() > 256) {
        return Err(RpcError::invalid_params("agentId must be 1 to 256 characters"));
    }
    if p.scopes.iter().any(|s| s.is_empty() || s.len() > 256) {
        return Err(RpcError::invalid_params("scope ids must be 1 to 256 characters"));
    }
    if let Some(state) = &p.state {
        if !crate::model::valid_state(state) {
            return Err(RpcError::invalid_params(format!("Unknown agent state {state:?}")));
        }
    }
    for (name, value) in [("environment", &p.environment), ("capabilityDescriptor", &p.capability_descriptor)] {
        if value.as_ref().is_some_and(|v| !v.is_object()) {
            return Err(RpcError::invalid_params(format!("{name} must be an object")));
        }
    }
    Ok(())
}

/// The id is free (no agent has it, and no other session is the participant
/// of that id: an id names one session), the parent exists, and only the
/// parent's session spawns under it.
fn check_placement(reg: &Registry, active: &Active, id: &str, parent: Option<&str>, spawn: bool) -> Result<(), RpcError> {
    if reg.agents.contains_key(id) {
        return Err(RpcError::new(codes::AGENT_EXISTS, format!("Agent already exists: {id}")));
    }
    if reg.participants.get(id).is_some_and(|s| *s != active.session_id) {
        return Err(RpcError::new(codes::AGENT_EXISTS, format!("Participant {id} already exists; an agent id may name no other session's participant")));
    }
    let Some(parent) = parent else { return Ok(()) };
    let parent = reg.agent(parent)?;
    if spawn && parent.session != active.session_id {
        return Err(RpcError::new(codes::PERMISSION_DENIED, "Only the parent's own session may spawn children under it"));
    }
    Ok(())
}

fn new_agent(active: &Active, id: String, p: RegisterParams) -> Agent {
    let now = ids::now_ms();
    Agent {
        id,
        owner_id: active.participant_id.clone(),
        name: p.name,
        description: p.description,
        role: p.role,
        parent: p.parent,
        children: Vec::new(),
        state: p.state.unwrap_or_else(|| "registered".into()),
        scopes: dedup(p.scopes),
        visibility: p.visibility,
        permission_overrides: p.permission_overrides,
        capabilities: p.capabilities,
        metadata: p.metadata,
        environment: p.environment,
        capability_descriptor: p.capability_descriptor,
        lifecycle: Lifecycle { created_at: now, last_state_change: now, exit_reason: None },
        session: active.session_id.clone(),
        suspended_from: None,
    }
}

/// The new agent as its parent's child, its scopes' member and its session's own.
fn link(reg: &mut Registry, active: &Active, agent: &Agent) {
    if let Some(parent) = agent.parent.as_ref().and_then(|pid| reg.agents.get_mut(pid)) {
        parent.children.push(agent.id.clone());
    }
    for s in &agent.scopes {
        if let Some(scope) = reg.scopes.get_mut(s) {
            scope.members.push(agent.id.clone());
        }
    }
    if let Some(session) = reg.sessions.get_mut(&active.session_id) {
        session.agents.push(agent.id.clone());
    }
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(x.clone()));
    v
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct AgentRef {
    agent_id: Option<String>,
    reason: Option<String>,
}

fn agent_id(p: &AgentRef) -> Result<&str, RpcError> {
    p.agent_id.as_deref().ok_or_else(|| RpcError::invalid_params("agentId is required"))
}

fn owned<'a>(reg: &'a mut Registry, active: &Active, id: &str) -> Result<&'a mut Agent, RpcError> {
    let agent = reg.agent_mut(id)?;
    if agent.session != active.session_id {
        return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Agent {id} belongs to another session")));
    }
    Ok(agent)
}

pub fn unregister(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: AgentRef = req.params()?;
    let id = agent_id(&p)?;
    let agent = {
        let mut reg = active.tenant.registry.lock();
        owned(&mut reg, active, id)?;
        reg.remove_agent(id).expect("checked above")
    };
    let reason = p.reason.clone().unwrap_or_else(|| "unregistered".into());
    publish(active, vec![agent_event("agent_unregistered", &agent, json!({"agentId": id, "agent": agent, "reason": reason}))]);
    Ok(json!({"agent": agent, "unregistered": true}).into())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct UpdateParams {
    agent_id: Option<String>,
    state: Option<String>,
    metadata: Option<Map<String, Value>>,
    name: Option<String>,
    description: Option<String>,
    role: Option<String>,
    capabilities: Option<Value>,
    environment: Option<Map<String, Value>>,
    capability_descriptor: Option<Map<String, Value>>,
    permission_overrides: Option<Value>,
}

fn state_event(agent: &Agent, previous: &str, reason: Option<&str>) -> NewEvent {
    agent_event(
        "agent_state_changed",
        agent,
        json!({"agentId": agent.id, "agent": agent, "previousState": previous, "newState": agent.state, "reason": reason}),
    )
}

pub fn update(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: UpdateParams = req.params()?;
    let id = p.agent_id.as_deref().ok_or_else(|| RpcError::invalid_params("agentId is required"))?;
    let overrides = p.permission_overrides.as_ref().map(|v| agent_permissions::parse(v, true)).transpose().map_err(RpcError::invalid_params)?;
    let mut events = Vec::new();
    let agent = {
        let mut reg = active.tenant.registry.lock();
        if let Some(changes) = &overrides {
            let role = owned(&mut reg, active, id)?.role.clone();
            may_override(&reg, active, p.role.as_deref().or(role.as_deref()), changes)?;
            reg.agent_rules = true;
        }
        let policy = reg.agent_policy.clone();
        let agent = owned(&mut reg, active, id)?;
        if let Some(state) = &p.state {
            check_transition(agent, state)?;
        }
        let previous = agent.state.clone();
        if let Some(meta) = p.metadata {
            let mut merged = agent.metadata.take().and_then(|m| m.as_object().cloned()).unwrap_or_default();
            for (k, v) in meta {
                if v.is_null() {
                    merged.remove(&k);
                } else {
                    merged.insert(k, v);
                }
            }
            agent.metadata = Some(Value::Object(merged));
        }
        if p.name.is_some() {
            agent.name = p.name;
        }
        if p.description.is_some() {
            agent.description = p.description;
        }
        if p.role.is_some() {
            agent.role = p.role.map(Into::into);
        }
        if p.capabilities.is_some() {
            agent.capabilities = p.capabilities;
        }
        if let Some(environment) = p.environment {
            agent.environment = Some(Value::Object(environment));
        }
        if let Some(descriptor) = p.capability_descriptor {
            agent.capability_descriptor = Some(Value::Object(descriptor));
        }
        if let Some(state) = p.state.filter(|s| *s != previous) {
            agent.state = state;
            agent.lifecycle.last_state_change = ids::now_ms();
            events.push(state_event(agent, &previous, None));
        }
        if let Some(changes) = overrides {
            let mut merged = agent.permission_overrides.take().and_then(|m| m.as_object().cloned()).unwrap_or_default();
            agent_permissions::merge(&mut merged, &changes);
            agent.permission_overrides = (!merged.is_empty()).then_some(Value::Object(merged));
            let data = json!({"agentId": agent.id, "changes": changes, "effectivePermissions": policy.effective(agent), "updatedBy": active.participant_id});
            events.push(agent_event("permissions_agent_updated", agent, data));
        }
        agent.clone()
    };
    publish(active, events);
    Ok(json!({"agent": agent}).into())
}

/// stop / suspend / resume: by the owner, or by a client, gateway or system participant.
pub fn control(active: &Active, req: &Request, target: &str) -> Result<Out, RpcError> {
    let p: AgentRef = req.params()?;
    let id = agent_id(&p)?;
    let mut events = Vec::new();
    let agent = {
        let mut reg = active.tenant.registry.lock();
        reg.visible_agent(id, &active.viewer())?;
        let agent = reg.agent_mut(id)?;
        if agent.session != active.session_id && active.participant_type == "agent" {
            return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Agent {id} belongs to another session")));
        }
        let previous = agent.state.clone();
        match (target, previous.as_str()) {
            (_, "stopped") if target != "stopped" => return Err(RpcError::new(codes::AGENT_TERMINATED, format!("Agent {id} is stopped"))),
            ("active", s) if s != "suspended" => return Err(RpcError::new(codes::STATE_INVALID, format!("Agent {id} is {s}, not suspended"))),
            _ => {}
        }
        // Resume goes back to the state the agent had before suspend; one
        // that had not started work (`registered`) comes back `idle`.
        let target = match target {
            "suspended" if previous != "suspended" => {
                agent.suspended_from = Some(previous.clone());
                target.to_string()
            }
            "active" => match agent.suspended_from.take() {
                Some(s) if s == "registered" => "idle".to_string(),
                Some(s) => s,
                None => target.to_string(),
            },
            _ => target.to_string(),
        };
        if previous != target {
            agent.state = target;
            agent.lifecycle.last_state_change = ids::now_ms();
            if agent.state == "stopped" {
                agent.lifecycle.exit_reason = p.reason.clone();
            }
            events.push(state_event(agent, &previous, p.reason.as_deref()));
        }
        agent.clone()
    };
    publish(active, events);
    Ok(json!({"agent": agent}).into())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ListFilter {
    states: Vec<String>,
    roles: Vec<String>,
    scopes: Vec<String>,
    parent: Option<String>,
    owner_id: Option<String>,
    has_children: Option<bool>,
    /// This gateway's own: only agents whose owner is connected now (true),
    /// or whose owner is not (false: dropped and may resume, or orphaned).
    connected: Option<bool>,
    #[serde(flatten)]
    offers: Offers,
}

/// Discovery filters over `capabilityDescriptor`; also accepted flat in the params.
#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
struct Offers {
    /// One of `capabilities[].id`.
    capability_id: Option<String>,
    /// Every one of these is in `tags`.
    tags: Vec<String>,
    /// One of `accepts[].contentType`.
    accepts: Option<String>,
}

impl Offers {
    fn merged(&self, flat: &Offers) -> Offers {
        Offers {
            capability_id: self.capability_id.clone().or(flat.capability_id.clone()),
            tags: self.tags.iter().chain(&flat.tags).cloned().collect(),
            accepts: self.accepts.clone().or(flat.accepts.clone()),
        }
    }

    fn admit(&self, agent: &Agent) -> bool {
        let descriptor = agent.capability_descriptor.as_ref();
        let listed = |list: &str, key: &str, want: &str| {
            descriptor
                .and_then(|d| d.get(list))
                .and_then(Value::as_array)
                .is_some_and(|items| items.iter().any(|i| i.get(key).and_then(Value::as_str) == Some(want)))
        };
        // Read under the directory lock for every agent a listing walks: no allocation.
        let tagged = |want: &str| descriptor.and_then(|d| d.get("tags")).and_then(Value::as_array).is_some_and(|t| t.iter().any(|x| x.as_str() == Some(want)));
        self.capability_id.as_deref().is_none_or(|id| listed("capabilities", "id", id))
            && self.accepts.as_deref().is_none_or(|ct| listed("accepts", "contentType", ct))
            && self.tags.iter().all(|t| tagged(t))
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ListParams {
    filter: ListFilter,
    // Flat forms of the schema.
    state: Option<String>,
    role: Option<String>,
    scope_id: Option<String>,
    parent: Option<String>,
    owner_id: Option<String>,
    #[serde(flatten)]
    offers: Offers,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// The agents list's cursor: the creation time and id of the last agent
/// listed, so a page costs its own size wherever it starts.
fn cursor_of(a: &Agent) -> String {
    format!("{}:{}", a.lifecycle.created_at, a.id)
}

fn position(cursor: &str) -> Result<Position, RpcError> {
    let (at, id) = cursor.split_once(':').ok_or_else(|| RpcError::invalid_params("Invalid cursor"))?;
    Ok((at.parse().map_err(|_| RpcError::invalid_params("Invalid cursor"))?, id.to_string()))
}

/// Read a piece at a time (see `Directory::walk`): a tenant of very many
/// agents does not stall other requests meanwhile.
pub fn list(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: ListParams = req.params()?;
    let f = &p.filter;
    let mut states = f.states.clone();
    states.extend(p.state.clone());
    let mut roles = f.roles.clone();
    roles.extend(p.role.clone());
    let mut scopes = f.scopes.clone();
    scopes.extend(p.scope_id.clone());
    let parent = f.parent.clone().or(p.parent.clone());
    let owner = f.owner_id.clone().or(p.owner_id.clone());
    let offers = f.offers.merged(&p.offers);
    let limit = p.limit.unwrap_or(100).clamp(1, 1000);
    let from = p.cursor.as_deref().map(position).transpose()?;
    let active = active.clone();
    // A federation peer's gateway sees what the tenant exposes to it.
    let federation = active.tenant.federation().cloned();
    let exposure = federation.as_ref().and_then(|f| f.shown_to(&active.principal)).map(|s| s.agents);
    Ok(Out::Later(Box::pin(async move {
        let f = &p.filter;
        let viewer = active.viewer();
        let keep = |reg: &Registry, a: &Agent| {
            exposure.as_ref().is_none_or(|e| e.admits(a))
                && reg.visible(a, &viewer)
                && (states.is_empty() || states.contains(&a.state))
                && (roles.is_empty() || a.role.as_deref().is_some_and(|r| roles.iter().any(|want| want == r)))
                && (scopes.is_empty() || a.scopes.iter().any(|s| scopes.contains(s)))
                && (parent.is_none() || a.parent == parent)
                && (owner.is_none() || owner.as_ref() == Some(&a.owner_id))
                && f.has_children.is_none_or(|h| h != a.children.is_empty())
                && f.connected.is_none_or(|c| c == reg.connected_since(&a.id).is_some())
                && offers.admit(a)
        };
        // One more than the page: whether another page follows.
        let mut agents = active.tenant.registry.walk(|r| &r.agents, from, limit + 1, |reg, a| keep(reg, a).then(|| a.clone())).await;
        let more = agents.len() > limit;
        agents.truncate(limit);
        let mut result = json!({"agents": agents});
        // Agents of other systems follow this system's, on the last page of
        // an unfiltered list (never for a peer: nothing is passed on).
        let unfiltered = states.is_empty()
            && roles.is_empty()
            && scopes.is_empty()
            && parent.is_none()
            && owner.is_none()
            && f.has_children.is_none()
            && f.connected.is_none()
            && offers.capability_id.is_none()
            && offers.tags.is_empty()
            && offers.accepts.is_none();
        if let (Some(fed), None, false, true) = (&federation, &exposure, more, unfiltered) {
            if let Some(list) = result["agents"].as_array_mut() {
                list.extend(fed.remote_agents());
            }
        }
        if let Some(last) = agents.last().filter(|_| more) {
            result["nextCursor"] = json!(cursor_of(last));
        }
        Ok(result.into())
    })))
}
