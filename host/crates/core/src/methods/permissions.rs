//! map/permissions/update: change what one participant's session may do,
//! from its next request on (no reconnect). Called by a principal in the
//! tenant's `admin_principals` or, where it names none, by a `system` participant.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::session::capabilities;
use crate::events::{NewEvent, Source, PERMISSIONS_UPDATED};
use crate::permissions::{effective, holds, merge, observes};
use crate::registry::Granted;
use crate::{Active, Gateway, Out, Tenant};
use map_protocol::rpc::{codes, Request, RpcError};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct UpdateParams {
    client_id: Option<String>,
    permissions: Option<Value>,
}

/// Top-level keys of the docs' `MAPClientPermissions`, which is not this method's shape.
const DOCS_SHAPE: &[&str] = &["visibility", "actions", "limits"];

/// Capability groups the gateway checks flags of (see `permissions::required`);
/// a group a plugin grants counts too.
const GROUPS: &[&str] = &["observation", "messaging", "lifecycle", "scopes", "federation", "mail", "workspace", "trajectory", "tasks"];

/// How long the answer waits for another cluster node serving the session to have the change.
const CONFIRM_WITHIN: Duration = Duration::from_secs(5);
const CONFIRM_POLL: Duration = Duration::from_millis(5);

pub fn update(gw: &Arc<Gateway>, active: &Active, req: &Request) -> Result<Out, RpcError> {
    let admins = admin_principals(gw, &active.tenant.id);
    let policy = active.tenant.registry.lock().agent_policy.clone();
    if !policy.is_admin(&active.participant_type, &active.principal) {
        let who = if admins.is_empty() { "system participants" } else { "the tenant's admin principals" };
        return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Only {who} may update permissions")));
    }
    let p: UpdateParams = req.params()?;
    let client_id = p.client_id.filter(|c| !c.is_empty()).ok_or_else(|| RpcError::invalid_params("clientId is required"))?;
    if client_id == active.participant_id {
        return Err(RpcError::new(codes::PERMISSION_DENIED, "A participant cannot change its own permissions"));
    }
    let caller_granted = capabilities(&active.tenant, &active.participant_type);
    let (target_type, caller) = {
        let reg = active.tenant.registry.lock();
        let target = reg.participants.get(&client_id).and_then(|s| reg.sessions.get(s)).ok_or_else(|| not_found(&client_id))?;
        (target.participant_type.clone(), effective(caller_granted, reg.sessions.get(&active.session_id)))
    };
    let granted = capabilities(&active.tenant, &target_type);
    let changes = changes_of(p.permissions, &granted)?;
    if let Some(path) = flags(&changes).find(|(path, on)| *on && !holds(&caller, path)).map(|(path, _)| path) {
        return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Cannot grant {path}: the caller does not hold it")));
    }
    let applied = apply(active, &client_id, &changes, granted, admins)?;
    if let Some(allowed) = applied.observes {
        active.tenant.fabric.observing(&applied.session, allowed);
    }
    let result = json!({"success": true, "effectivePermissions": applied.effective});
    let data = json!({"clientId": client_id, "changes": changes, "effectivePermissions": applied.effective, "updatedBy": active.participant_id});
    let source = Source { participant_id: Some(active.participant_id.clone()), ..Source::default() };
    active.tenant.emit(NewEvent { audience: Some(applied.audience), ..NewEvent::new(PERMISSIONS_UPDATED, source, data) });
    match applied.elsewhere {
        None => Ok(result.into()),
        Some(rev) => {
            let (tenant, session) = (active.tenant.clone(), applied.session);
            Ok(Out::Later(Box::pin(async move {
                if !confirmed(&tenant, &session, rev).await {
                    tracing::warn!(session = %session, "the node serving a session has not yet confirmed its new permissions");
                }
                Ok(result.into())
            })))
        }
    }
}

/// The tenant's `admin_principals`.
fn admin_principals<'a>(gw: &'a Gateway, tenant: &str) -> &'a [String] {
    gw.config.tenants.iter().find(|t| t.id == tenant).map_or(&[], |t| t.admin_principals.as_slice())
}

fn not_found(id: &str) -> RpcError {
    RpcError::new(codes::ADDRESS_NOT_FOUND, format!("Participant not found: {id}"))
}

/// The update's `permissions`, checked: capability groups of boolean flags.
fn changes_of(permissions: Option<Value>, granted: &Value) -> Result<Map<String, Value>, RpcError> {
    let bad = |msg: String| Err(RpcError::invalid_params(msg));
    let Some(Value::Object(changes)) = permissions else {
        return bad("permissions is required: capability groups of flags, e.g. {\"messaging\": {\"canSend\": false}}".into());
    };
    if let Some(key) = changes.keys().find(|k| DOCS_SHAPE.contains(&k.as_str())) {
        return bad(format!(
            "permissions takes capability groups (observation, messaging, lifecycle, scopes, …) as in ParticipantCapabilities; the MAPClientPermissions form ({key:?} of visibility, actions, limits) is not supported"
        ));
    }
    for (group, flags) in &changes {
        let known = GROUPS.contains(&group.as_str()) || (group != "streaming" && granted.get(group).is_some_and(Value::is_object));
        if !known {
            return bad(format!("permissions.{group} is not a capability group this gateway grants"));
        }
        let Value::Object(flags) = flags else { return bad(format!("permissions.{group} must be an object of boolean flags")) };
        if let Some(flag) = flags.iter().find(|(_, v)| !v.is_boolean()).map(|(k, _)| k) {
            return bad(format!("permissions.{group}.{flag} must be true or false"));
        }
    }
    Ok(changes)
}

/// Each changed flag as `group.flag` and its new value.
fn flags(changes: &Map<String, Value>) -> impl Iterator<Item = (String, bool)> + '_ {
    changes
        .iter()
        .filter_map(|(g, f)| f.as_object().map(|f| (g, f)))
        .flat_map(|(g, f)| f.iter().map(move |(k, v)| (format!("{g}.{k}"), v == &Value::Bool(true))))
}

/// What an applied update comes to.
struct Applied {
    session: String,
    effective: Value,
    /// Sessions that see the event: the target's, system and gateway
    /// participants', and admin principals'.
    audience: Vec<String>,
    /// The change's revision, when another cluster node serves the session.
    elsewhere: Option<u64>,
    /// Whether the session may observe now, when this node serves it (its
    /// subscriptions are told here; another node is told by the directory).
    observes: Option<bool>,
}

fn apply(active: &Active, client_id: &str, changes: &Map<String, Value>, granted: Value, admins: &[String]) -> Result<Applied, RpcError> {
    active.tenant.restricted.store(true, Ordering::Relaxed);
    let mut reg = active.tenant.registry.lock();
    let session = reg.participants.get(client_id).cloned().ok_or_else(|| not_found(client_id))?;
    let info = reg.sessions.get_mut(&session).ok_or_else(|| not_found(client_id))?;
    let mut granted_now = info.permissions.take().unwrap_or(Granted { overrides: Map::new(), rev: 0, confirmed: true });
    merge(&mut granted_now.overrides, changes);
    granted_now.rev += 1;
    granted_now.confirmed = info.home.is_none();
    let elsewhere = (!granted_now.confirmed).then_some(granted_now.rev);
    info.permissions = Some(granted_now);
    let observing = info.home.is_none().then(|| observes(info));
    let effective = effective(granted, Some(info));
    let mut audience: Vec<String> = reg
        .sessions
        .values()
        .filter(|s| matches!(s.participant_type.as_str(), "system" | "gateway") || admins.iter().any(|a| **a == *s.principal))
        .map(|s| s.id.clone())
        .collect();
    audience.push(session.clone());
    audience.push(active.session_id.clone());
    audience.sort();
    audience.dedup();
    Ok(Applied { session, effective, audience, elsewhere, observes: observing })
}

/// Wait (a while) until the node serving a session has permissions of
/// revision `rev`: it writes the session back to the shared directory once
/// it has them. True when it has, or the session is no longer another
/// node's connected session (whoever takes it up reads the directory).
async fn confirmed(tenant: &Tenant, session: &str, rev: u64) -> bool {
    let deadline = Instant::now() + CONFIRM_WITHIN;
    loop {
        let done = {
            let reg = tenant.registry.lock();
            reg.sessions.get(session).is_none_or(|s| s.home.is_none() || !s.connected || s.permissions.as_ref().is_some_and(|p| p.confirmed && p.rev >= rev))
        };
        if done {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(CONFIRM_POLL).await;
    }
}
