//! Scope methods: create, list, get, delete, join, leave, members.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::agent_permissions;
use crate::events::{NewEvent, Source};
use crate::lifecycle::agent_event;
use crate::model::Scope;
use crate::registry::Registry;
use crate::{Active, Out};
use map_protocol::ids;
use map_protocol::rpc::{codes, Request, RpcError};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct CreateParams {
    scope_id: Option<String>,
    name: Option<String>,
    // `parentId` is what the SDK's own server reads.
    #[serde(alias = "parentId")]
    parent: Option<String>,
    join_policy: Option<String>,
    visibility: Option<String>,
    send_policy: Option<String>,
    metadata: Option<Value>,
}

fn one_of(value: Option<String>, allowed: &[&str], field: &str) -> Result<String, RpcError> {
    let v = value.unwrap_or_else(|| allowed[0].to_string());
    if allowed.contains(&v.as_str()) {
        Ok(v)
    } else {
        Err(RpcError::invalid_params(format!("{field} must be one of {}", allowed.join(", "))))
    }
}

pub(crate) fn scope_only_event(kind: &'static str, scope: &Scope, active: &Active, mut data: Value) -> NewEvent {
    if let Value::Object(d) = &mut data {
        d.entry("scopeId").or_insert_with(|| json!(scope.id));
        if let Some(name) = &scope.name {
            d.entry("name").or_insert_with(|| json!(name));
        }
    }
    let source = Source { participant_id: Some(active.participant_id.clone()), scope_id: Some(scope.id.clone()), agent_id: None };
    NewEvent::new(kind, source, data)
}

pub fn create(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: CreateParams = req.params()?;
    let scope = Scope {
        id: p.scope_id.clone().unwrap_or_else(|| ids::prefixed("scope")),
        name: p.name,
        parent: p.parent.clone(),
        join_policy: one_of(p.join_policy, &["open", "invite", "approval"], "joinPolicy")?,
        visibility: one_of(p.visibility, &["public", "private", "unlisted"], "visibility")?,
        send_policy: one_of(p.send_policy, &["anyone", "members"], "sendPolicy")?,
        metadata: p.metadata,
        created_at: ids::now_ms(),
        created_by: Some(active.participant_id.clone()),
        members: Vec::new(),
    };
    if scope.id.is_empty() {
        return Err(RpcError::invalid_params("scopeId must not be empty"));
    }
    {
        let mut reg = active.tenant.registry.lock();
        if reg.scopes.contains_key(&scope.id) {
            return Err(RpcError::invalid_params(format!("Scope already exists: {}", scope.id)));
        }
        if let Some(parent) = &p.parent {
            reg.scope(parent)?;
        }
        reg.scopes.insert(scope.id.clone(), scope.clone());
    }
    active.tenant.fabric.publish(scope_only_event("scope_created", &scope, active, json!({"scope": scope})));
    Ok(json!({"scope": scope}).into())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ScopeRef {
    scope_id: Option<String>,
    agent_id: Option<String>,
    parent: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

fn scope_id(p: &ScopeRef) -> Result<&str, RpcError> {
    p.scope_id.as_deref().ok_or_else(|| RpcError::invalid_params("scopeId is required"))
}

/// Private scopes are listed only to their creator, and an agent's
/// `canSee.scopes` narrows what its session sees.
fn visible(reg: &Registry, scope: &Scope, active: &Active) -> bool {
    (scope.visibility == "public" || scope.created_by.as_deref() == Some(active.participant_id.as_str()))
        && agent_permissions::sees_scope(reg, &active.session_id, scope)
}

/// A scope the caller's agents may see (by id, private ones too); a hidden
/// one is "not found" (2002).
fn seen<'a>(reg: &'a Registry, active: &Active, id: &str) -> Result<&'a Scope, RpcError> {
    reg.scope(id)
        .ok()
        .filter(|s| agent_permissions::sees_scope(reg, &active.session_id, s))
        .ok_or_else(|| RpcError::new(codes::SCOPE_NOT_FOUND, format!("Scope not found: {id}")))
}

/// Read a piece at a time and written out on a blocking thread: a tenant
/// of very many scopes does not stall other requests meanwhile.
pub fn list(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: ScopeRef = req.params()?;
    let active = active.clone();
    // A peer system lists the scopes shown to it.
    let shown = active.tenant.federation().and_then(|f| f.shown_to(&active.principal)).map(|s| s.scopes);
    Ok(Out::Later(Box::pin(async move {
        let keep = |reg: &Registry, s: &Scope| {
            shown.as_ref().is_none_or(|ids| ids.contains(&s.id)) && visible(reg, s, &active) && (p.parent.is_none() || s.parent == p.parent)
        };
        let scopes = active.tenant.registry.walk(|r| &r.scopes, None, usize::MAX, |reg, s| keep(reg, s).then(|| s.clone())).await;
        let text = tokio::task::spawn_blocking(move || serde_json::to_string(&json!({"scopes": scopes})).expect("scopes serialise"));
        text.await.map(Out::Text).map_err(|_| RpcError::internal("listing the scopes failed"))
    })))
}

pub fn get(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: ScopeRef = req.params()?;
    let reg = active.tenant.registry.lock();
    let scope = seen(&reg, active, scope_id(&p)?)?;
    Ok(json!({"scope": scope, "memberCount": scope.members.len()}).into())
}

pub fn delete(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: ScopeRef = req.params()?;
    let id = scope_id(&p)?;
    let scope = {
        let mut reg = active.tenant.registry.lock();
        let scope = reg.scope(id)?;
        if scope.created_by.as_deref() != Some(active.participant_id.as_str()) && active.participant_type == "agent" {
            return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Only the creator of scope {id} or a client may delete it")));
        }
        let scope = reg.scopes.remove(id).expect("checked above");
        for m in &scope.members {
            if let Some(a) = reg.agents.get_mut(m) {
                a.scopes.retain(|s| s != id);
            }
        }
        // Only the children change (and count as written).
        let children: Vec<String> = reg.scopes.values().filter(|s| s.parent.as_deref() == Some(id)).map(|s| s.id.clone()).collect();
        for child in children {
            if let Some(s) = reg.scopes.get_mut(&child) {
                s.parent = None;
            }
        }
        scope
    };
    active.tenant.fabric.publish(scope_only_event("scope_deleted", &scope, active, json!({"scopeId": id, "scope": scope})));
    Ok(json!({"scope": scope, "deleted": true}).into())
}

pub fn join(active: &Active, req: &Request, joining: bool) -> Result<Out, RpcError> {
    let p: ScopeRef = req.params()?;
    let id = scope_id(&p)?;
    let agent_id = p.agent_id.as_deref().ok_or_else(|| RpcError::invalid_params("agentId is required"))?;
    let (scope, agent, changed) = {
        let mut reg = active.tenant.registry.lock();
        let scope = reg.scope(id)?;
        let agent = reg.agent(agent_id)?;
        let own_agent = agent.session == active.session_id;
        if !own_agent && active.participant_type == "agent" {
            return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Agent {agent_id} belongs to another session")));
        }
        let creator = scope.created_by.as_deref() == Some(active.participant_id.as_str());
        if joining && scope.join_policy != "open" && !creator {
            return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Scope {id} is {}: only its creator adds members", scope.join_policy)));
        }
        let member = scope.members.iter().any(|m| m == agent_id);
        let changed = member != joining;
        if changed {
            let scope = reg.scope_mut(id)?;
            if joining {
                scope.members.push(agent_id.to_string());
            } else {
                scope.members.retain(|m| m != agent_id);
            }
            let agent = reg.agent_mut(agent_id)?;
            if joining {
                agent.scopes.push(id.to_string());
            } else {
                agent.scopes.retain(|s| s != id);
            }
        }
        (reg.scope(id)?.clone(), reg.agent(agent_id)?.clone(), changed)
    };
    if changed {
        let kind = if joining { "scope_member_joined" } else { "scope_member_left" };
        let mut ev = agent_event(kind, &agent, json!({"scopeId": id, "agentId": agent_id}));
        ev.source.scope_id = Some(id.to_string());
        // A scope event concerns its own scope, not the agent's other memberships.
        ev.facets.scopes = vec![id.to_string()];
        crate::lifecycle::publish_agent_events(&active.tenant, vec![ev]);
    }
    let flag = if joining { "joined" } else { "left" };
    Ok(json!({"scope": scope, "agent": agent, flag: true}).into())
}

pub fn members(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: ScopeRef = req.params()?;
    let reg = active.tenant.registry.lock();
    let scope = seen(&reg, active, scope_id(&p)?)?;
    // Only the page is copied: a scope may have very many members.
    let (members, next) = page(scope.members.iter().collect(), p.limit, p.cursor.as_deref())?;
    let mut result = json!({"members": members});
    if let Some(n) = next {
        result["nextCursor"] = json!(n);
    }
    Ok(result.into())
}

/// Cursor pagination over a stable order: the cursor is the offset to continue at.
fn page<T>(mut items: Vec<T>, limit: Option<usize>, cursor: Option<&str>) -> Result<(Vec<T>, Option<String>), RpcError> {
    let start = match cursor {
        Some(c) => c.parse::<usize>().map_err(|_| RpcError::invalid_params("Invalid cursor"))?,
        None => 0,
    };
    let limit = limit.unwrap_or(100).clamp(1, 1000);
    let total = items.len();
    let from = start.min(total);
    let out: Vec<T> = items.drain(from..(from + limit).min(total)).collect();
    let next = (start + out.len() < total).then(|| (start + out.len()).to_string());
    Ok((out, next))
}
