//! A session's permissions: the capabilities the gateway grants its
//! participant type, changed per session by `map/permissions/update`, and
//! the capability flag each method needs.
//!
//! Every grant is open by default, so only a revoked flag (`false`) refuses
//! anything: the method answers 1003 before it runs.

use std::sync::atomic::Ordering;

use serde_json::{Map, Value};

use super::address::Address;
use super::registry::SessionInfo;
use super::Active;
use map_protocol::rpc::{codes, RpcError};

/// The capability flag a method needs, as the SDK's `CAPABILITY_REQUIREMENTS`
/// names it (`map/send` is checked while it routes: see `may_send`).
/// `map/unsubscribe` needs none, so a revoked observer can still let go.
pub fn required(method: &str) -> Option<&'static str> {
    Some(match method {
        "map/subscribe" | "map/replay" => OBSERVE,
        "map/agents/list" | "map/agents/get" | "map/scopes/list" | "map/scopes/get" | "map/scopes/members" | "map/structure/graph" => "observation.canQuery",
        "map/agents/register" | "map/agents/update" => "lifecycle.canRegister",
        "map/agents/spawn" => "lifecycle.canSpawn",
        "map/agents/unregister" => "lifecycle.canUnregister",
        "map/agents/stop" | "map/agents/suspend" | "map/agents/resume" => "lifecycle.canStop",
        "map/inject" => "lifecycle.canSteer",
        "map/scopes/create" => "scopes.canCreateScopes",
        "map/scopes/delete" => "scopes.canManageScopes",
        "map/federation/connect" | "map/federation/route" => "federation.canFederate",
        "mail/create" | "mail/close" => "mail.canCreate",
        "mail/get" | "mail/list" | "mail/join" | "mail/leave" | "mail/turn" | "mail/thread/list" => "mail.canJoin",
        "mail/invite" => "mail.canInvite",
        "mail/turns/list" | "mail/summary" | "mail/replay" => "mail.canViewHistory",
        "mail/thread/create" => "mail.canCreateThreads",
        "workspace/search" => "workspace.canSearch",
        "workspace/list" => "workspace.canList",
        "workspace/read" => "workspace.canRead",
        "trajectory/checkpoint" => "trajectory.canReport",
        "trajectory/list" | "trajectory/get" => "trajectory.canQuery",
        "trajectory/content" => "trajectory.canRequestContent",
        "map/tasks/create" => "tasks.canCreate",
        "map/tasks/assign" => "tasks.canAssign",
        "map/tasks/update" => "tasks.canUpdate",
        "map/tasks/list" => "tasks.canList",
        _ => return None,
    })
}

/// The value a session's changes set at `group.flag`, if they set one.
pub fn changed(info: &SessionInfo, path: &str) -> Option<bool> {
    let (group, flag) = path.split_once('.')?;
    info.permissions.as_ref()?.overrides.get(group)?.get(flag)?.as_bool()
}

/// Whether the session's flag at `path` has been revoked.
pub fn revoked(info: &SessionInfo, path: &str) -> bool {
    changed(info, path) == Some(false)
}

/// What subscribing and replay need, and what a subscription delivers by.
pub const OBSERVE: &str = "observation.canObserve";

/// Whether a session may observe now: its subscriptions deliver only while
/// it may (see `Fabric::observing`).
pub fn observes(info: &SessionInfo) -> bool {
    !revoked(info, OBSERVE)
}

pub fn denied(path: &str) -> RpcError {
    RpcError::new(codes::PERMISSION_DENIED, format!("Permission denied: {path} is revoked for this session"))
}

/// Refuse a method whose flag the caller's session has had revoked.
/// Costs one atomic load until some session of the tenant has changes.
pub fn check(active: &Active, method: &str) -> Result<(), RpcError> {
    // Every request passes here: a tenant nobody restricted pays one load,
    // not the method table's string compares.
    if !active.tenant.restricted.load(Ordering::Relaxed) {
        return Ok(());
    }
    match required(method) {
        Some(path) => check_flag(active, path),
        None => Ok(()),
    }
}

/// Refuse if the caller's session has had the flag at `path` revoked.
pub fn check_flag(active: &Active, path: &str) -> Result<(), RpcError> {
    if !active.tenant.restricted.load(Ordering::Relaxed) {
        return Ok(());
    }
    let reg = active.tenant.registry.lock();
    match reg.sessions.get(&active.session_id) {
        Some(info) if revoked(info, path) => Err(denied(path)),
        _ => Ok(()),
    }
}

/// `map/send` from a session (checked where the send reads the directory
/// anyway): `messaging.canSend`, and `messaging.canBroadcast` for an address
/// that reaches a group (a scope, a role, everyone).
pub fn may_send(info: Option<&SessionInfo>, addr: &Address) -> Result<(), RpcError> {
    let Some(info) = info.filter(|i| i.permissions.is_some()) else { return Ok(()) };
    if revoked(info, "messaging.canSend") {
        return Err(denied("messaging.canSend"));
    }
    if revoked(info, "messaging.canBroadcast") && reaches_group(addr) {
        return Err(denied("messaging.canBroadcast"));
    }
    Ok(())
}

fn reaches_group(addr: &Address) -> bool {
    match addr {
        Address::Scope(_) | Address::Role { .. } | Address::Broadcast | Address::Participants(_) => true,
        Address::Bare(s) => s.starts_with("scope:"),
        Address::Many(all) => all.iter().any(reaches_group),
        _ => false,
    }
}

/// Set each given flag, group by group; other flags and groups stay.
pub fn merge(into: &mut Map<String, Value>, changes: &Map<String, Value>) {
    for (group, flags) in changes {
        let Value::Object(flags) = flags else { continue };
        let slot = into.entry(group.clone()).or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(slot) = slot {
            slot.extend(flags.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
}

/// What a session may do: `granted` (the participant type's capabilities)
/// with the session's changes over it.
pub fn effective(mut granted: Value, info: Option<&SessionInfo>) -> Value {
    if let (Value::Object(base), Some(p)) = (&mut granted, info.and_then(|i| i.permissions.as_ref())) {
        merge(base, &p.overrides);
    }
    granted
}

/// Whether effective permissions hold `true` at `group.flag`.
pub fn holds(effective: &Value, path: &str) -> bool {
    super::registry::declares(effective, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn a_merge_sets_given_flags_and_keeps_the_rest() {
        let mut into = obj(json!({"messaging": {"canSend": true, "canReceive": true}, "scopes": {"canCreateScopes": true}}));
        merge(&mut into, &obj(json!({"messaging": {"canSend": false}, "lifecycle": {"canRegister": false}})));
        assert_eq!(
            Value::Object(into),
            json!({"messaging": {"canSend": false, "canReceive": true}, "scopes": {"canCreateScopes": true}, "lifecycle": {"canRegister": false}})
        );
    }

    #[test]
    fn group_addresses_are_told_apart_from_named_ones() {
        let parse = |v: Value| Address::from_json(&serde_json::value::to_raw_value(&v).unwrap()).unwrap();
        assert!(reaches_group(&parse(json!({"scope": "s"}))));
        assert!(reaches_group(&parse(json!({"broadcast": true}))));
        assert!(reaches_group(&parse(json!([{"agent": "a"}, {"role": "r"}]))));
        assert!(!reaches_group(&parse(json!({"agent": "a"}))));
        assert!(!reaches_group(&parse(json!("a"))));
    }

    #[test]
    fn methods_open_to_everyone_need_no_flag() {
        for m in ["map/send", "map/unsubscribe", "map/connect", "map/permissions/update", "map/auth/refresh"] {
            assert_eq!(required(m), None, "{m}");
        }
        assert_eq!(required("map/subscribe"), Some("observation.canObserve"));
        assert_eq!(required("map/agents/register"), Some("lifecycle.canRegister"));
    }
}
