//! Other nodes' directory entries brought into this node's copy of a
//! tenant's directory (without being written back): agents with their
//! links, scopes, sessions with the node serving them, and the checkpoints
//! of their subscriptions, kept for a resume here.

use serde_json::Value;

use super::records::{essence, AgentRecord, Checkpoint, ScopeRecord, SessionRecord};
use super::{served_here, Mirrored, MirroredTenant, AGENT, SCOPE, SESSION, SUBSCRIPTION};
use crate::untoken;
use map_core::model::Agent;
use map_core::registry::Granted;
use map_core::registry::Registry;

/// Bring one directory entry into its tenant's directory. `body` is none
/// for a removal; this node's own entries, coming back, are skipped.
pub(super) fn apply(node: &str, tenants: &foldhash::HashMap<String, MirroredTenant>, key: &str, value: &[u8]) {
    let mut parts = key.splitn(3, '.');
    let (Some(t), Some(kind), Some(id)) = (parts.next(), parts.next(), parts.next()) else { return };
    let (Some(t), Some(id)) = (tenants.get(t), untoken(id)) else { return };
    let Ok(value) = serde_json::from_slice::<Value>(value) else { return };
    if value.get("origin").and_then(Value::as_str) == Some(node) {
        return;
    }
    let body = (value.get("gone") != Some(&Value::Bool(true))).then_some(value);
    if kind == SESSION && body.as_ref().is_some_and(|b| b.get("permissions").is_some_and(|p| !p.is_null())) {
        t.tenant.restricted.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let mut reg = t.tenant.registry.lock();
    let mut taken = None;
    match kind {
        AGENT => apply_agent(&mut reg, &t.mirrored, id, body),
        SCOPE => apply_scope(&mut reg, id, body),
        SESSION => taken = apply_session(&mut reg, &t.mirrored, id, body),
        SUBSCRIPTION => apply_subscription(&reg, &t.mirrored, id, body),
        _ => {}
    }
    drop(reg);
    // Its subscriptions here follow the session's new permissions (told outside the directory's lock).
    if let Some((session, allowed)) = taken {
        t.tenant.fabric.observing(&session, allowed);
    }
}

/// Another node's agent set or removed; an agent served here is never removed by another node.
fn apply_agent(reg: &mut Registry, mirrored: &Mirrored, id: String, body: Option<Value>) {
    match body {
        Some(v) => {
            if let Ok(r) = serde_json::from_value::<AgentRecord>(v) {
                let mut agent = r.agent;
                agent.session = r.session;
                agent.suspended_from = r.suspended_from;
                mirrored.applied.lock().insert(id, essence(&agent));
                put_agent(reg, agent);
            }
        }
        None => {
            let mine = reg.agents.get(&id).is_some_and(|a| served_here(reg, &a.session));
            if !mine {
                mirrored.applied.lock().remove(&id);
                remove_agent(reg, &id);
            }
        }
    }
}

fn apply_scope(reg: &mut Registry, id: String, body: Option<Value>) {
    match body {
        Some(v) => {
            if let Ok(r) = serde_json::from_value::<ScopeRecord>(v) {
                let mut scope = r.scope;
                // Members follow the agents' own records (each written by
                // one node), not the scope's (written by every node a member joins on).
                scope.members = match reg.scopes.get(&id) {
                    Some(known) => known.members.clone(),
                    None => reg.agents_sorted().into_iter().filter(|a| a.scopes.contains(&id)).map(|a| a.id.clone()).collect(),
                };
                reg.scopes.insert_quiet(id, scope);
            }
        }
        None => {
            reg.scopes.remove_quiet(&id);
        }
    }
}

/// Another node's session set or ended, and with it the route to that node.
/// Permissions another node changed for a session served here are taken:
/// that session, and whether it may observe now.
fn apply_session(reg: &mut Registry, mirrored: &Mirrored, id: String, body: Option<Value>) -> Option<(String, bool)> {
    match body {
        Some(v) => {
            let r = serde_json::from_value::<SessionRecord>(v).ok()?;
            if served_here(reg, &id) {
                return take_permissions(reg, &id, r.permissions).map(|allowed| (id, allowed));
            }
            let info = r.into_info();
            let home = info.home.clone().expect("records name their node");
            reg.participants.insert(info.participant_id.clone(), info.id.clone());
            reg.sessions.insert_quiet(id.clone(), info);
            mirrored.routes.write().insert(id, home);
        }
        None => {
            if served_here(reg, &id) {
                return None;
            }
            if let Some(info) = reg.sessions.remove_quiet(&id) {
                if reg.participants.get(&info.participant_id).is_some_and(|s| *s == id) {
                    reg.participants.remove(&info.participant_id);
                }
            }
            mirrored.routes.write().remove(&id);
            mirrored.parked.lock().remove(&id);
        }
    }
    None
}

/// Permissions another node changed for a session served here: kept when
/// newer than this node's, and so written back as this node's record, which
/// tells the other node they apply here now. Whether the session may
/// observe, when they were kept.
fn take_permissions(reg: &mut Registry, id: &str, theirs: Option<Granted>) -> Option<bool> {
    let theirs = theirs?;
    let newer = reg.sessions.get(id).is_some_and(|s| s.permissions.as_ref().is_none_or(|mine| mine.rev < theirs.rev));
    let s = reg.sessions.get_mut(id).filter(|_| newer)?;
    s.permissions = Some(Granted { confirmed: true, ..theirs });
    Some(map_core::permissions::observes(s))
}

/// A checkpoint of another node's subscription, parked under its session
/// for a resume here (or dropped).
fn apply_subscription(reg: &Registry, mirrored: &Mirrored, id: String, body: Option<Value>) {
    match body {
        Some(v) => {
            let Ok(c) = serde_json::from_value::<Checkpoint>(v) else { return };
            if served_here(reg, &c.session) {
                return;
            }
            let mut parked = mirrored.parked.lock();
            let list = parked.entry(c.session.clone()).or_default();
            list.retain(|(sub, _)| *sub != id);
            list.push((id, c));
        }
        None => {
            for list in mirrored.parked.lock().values_mut() {
                list.retain(|(sub, _)| *sub != id);
            }
        }
    }
}

/// Mirror another node's agent. Its children and scope memberships are
/// kept from the links of each agent's own record (a child names its
/// parent, a member its scopes): several nodes may add children or
/// members to one agent or scope at once, but each agent's record is
/// written by one node.
fn put_agent(reg: &mut Registry, mut agent: Agent) {
    reg.agent_rules |= map_core::agent_permissions::uses_rules(&agent);
    let id = agent.id.clone();
    let old = reg.agents.get(&id).map(|a| (a.parent.clone(), a.scopes.clone(), a.children.clone()));
    let (old_parent, old_scopes) = match old {
        Some((parent, scopes, children)) => {
            agent.children = children;
            (parent, scopes)
        }
        None => {
            agent.children = reg.agents_sorted().into_iter().filter(|a| a.parent.as_deref() == Some(id.as_str())).map(|a| a.id.clone()).collect();
            (None, Vec::new())
        }
    };
    if old_parent != agent.parent {
        if let Some(p) = old_parent.as_deref().and_then(|p| reg.agents.get_mut_quiet(p)) {
            p.children.retain(|c| *c != id);
        }
        if let Some(p) = agent.parent.as_deref().and_then(|p| reg.agents.get_mut_quiet(p)) {
            if !p.children.contains(&id) {
                p.children.push(id.clone());
            }
        }
    }
    for s in old_scopes.iter().filter(|s| !agent.scopes.contains(s)) {
        if let Some(scope) = reg.scopes.get_mut_quiet(s) {
            scope.members.retain(|m| *m != id);
        }
    }
    for s in agent.scopes.iter().filter(|s| !old_scopes.contains(s)) {
        if let Some(scope) = reg.scopes.get_mut_quiet(s) {
            if !scope.members.contains(&id) {
                scope.members.push(id.clone());
            }
        }
    }
    reg.agents.insert_quiet(id, agent);
}

/// Forget another node's agent and its links.
fn remove_agent(reg: &mut Registry, id: &str) {
    let Some(agent) = reg.agents.remove_quiet(id) else { return };
    if let Some(p) = agent.parent.as_deref().and_then(|p| reg.agents.get_mut_quiet(p)) {
        p.children.retain(|c| c != id);
    }
    for s in &agent.scopes {
        if let Some(scope) = reg.scopes.get_mut_quiet(s) {
            scope.members.retain(|m| m != id);
        }
    }
}
