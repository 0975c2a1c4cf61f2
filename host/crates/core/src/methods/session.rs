//! map/connect, map/authenticate, map/disconnect and the sessions extension.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::lifecycle::release_agents;
use crate::model::{AuthParams, ConnectParams, DisconnectPolicy};
use crate::registry::SessionInfo;
use crate::{Active, Conn, ConnState, Gateway, Out, PROTOCOL_VERSION};
use crate::{Authenticated, Tenant};
use map_protocol::ids;
use map_protocol::rpc::{codes, Request, RpcError};

impl AuthParams {
    fn secret(&self) -> Option<&str> {
        self.credential.as_deref().or(self.token.as_deref())
    }
}

/// How long the answer to a session taken over from another node waits for
/// the shared directory to have it.
const ADOPTION_SAVED_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Capabilities this gateway grants every participant.
fn granted_capabilities() -> Value {
    json!({
        "observation": {"canObserve": true, "canQuery": true},
        "messaging": {"canSend": true, "canReceive": true, "canBroadcast": true},
        "lifecycle": {"canSpawn": true, "canRegister": true, "canUnregister": true, "canSteer": true, "canStop": true},
        "scopes": {"canCreateScopes": true, "canManageScopes": true},
        "streaming": {"supportsAck": true, "supportsFlowControl": true, "supportsPause": true},
        "extensions": [
            {"uri": "urn:map:ext:steering:1"},
            {"uri": "urn:map:ext:sessions:1"}
        ],
    })
}

/// What a participant of this type gets: the core's grants plus each plugin's.
pub(crate) fn capabilities(tenant: &Tenant, participant_type: &str) -> Value {
    let mut caps = granted_capabilities();
    tenant.extensions().advertise(&mut caps, participant_type);
    super::workspace::advertise(&tenant.workspace_config(), &mut caps, participant_type);
    super::resources::advertise(tenant.extensions().resource_kinds(), &mut caps);
    super::credentials::advertise(tenant, &mut caps, participant_type);
    caps
}

/// `capabilities` with what `map/permissions/update` changed for the session.
fn effective_capabilities(active: &Active) -> Value {
    let granted = capabilities(&active.tenant, &active.participant_type);
    crate::permissions::effective(granted, active.tenant.registry.lock().sessions.get(&active.session_id))
}

/// Who the session is; `expiresAt` (Unix ms) when its credential expires.
pub(crate) fn principal(gw: &Gateway, active: &Active) -> Value {
    let mut p = json!({"id": &*active.principal, "issuer": crate::tenants::jwt::ISSUER, "claims": {"tenant": active.tenant.id, "participantId": active.participant_id}});
    if let Some(at) = gw.live(&active.session_id).and_then(|l| l.expiry.expires_at()) {
        p["expiresAt"] = json!(at);
    }
    p
}

/// Who the connection's credentials say it is: `Ok(None)` means none were
/// given and anonymous access is not allowed. An error names the method tried.
/// `none` is a credential where a tenant accepts it, else the lack of one.
fn caller_for(gw: &Gateway, conn: &mut Conn, auth: Option<&AuthParams>) -> Result<Option<Authenticated>, (String, RpcError)> {
    let given = auth.and_then(|a| Some((a.method.as_deref()?, a))).filter(|(m, _)| *m != "none" || gw.tenants.accepts_none());
    let (method, secret) = match (given, conn.preset_auth.clone()) {
        (Some((method, a)), _) => (method.to_string(), a.secret().map(String::from)),
        (None, Some((method, secret))) => (method, Some(secret)),
        (None, None) => return Ok(gw.tenants.anonymous(conn.loopback)),
    };
    gw.authenticate(conn, &method, secret.as_deref()).map(Some).map_err(|e| (method, e))
}

/// A credential was refused (rather than malformed, or the address throttled).
pub(crate) fn refused(e: &RpcError) -> bool {
    matches!(e.code, codes::AUTH_FAILED | codes::TOKEN_EXPIRED)
}

/// A refusal as the SDK's `AuthError {code, message}`.
pub(crate) fn auth_error(gw: &Gateway, method: &str, e: &RpcError) -> Value {
    let code = if e.code == codes::TOKEN_EXPIRED {
        "expired"
    } else if !gw.tenants.offered_methods().contains(&method) {
        "method_not_supported"
    } else {
        "invalid_credentials"
    };
    json!({"code": code, "message": e.message})
}

/// The answer of a connect that needs credentials first (`error`: why the
/// ones given were refused). The connection stays open and waits for
/// `map/authenticate` or another `map/connect`.
fn auth_required(gw: &Gateway, conn: &mut Conn, p: ConnectParams, error: Option<Value>) -> Value {
    let session_id = ids::session_id();
    let mut result = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "sessionId": session_id,
        "capabilities": {},
        "systemInfo": {"name": gw.config.server.name, "version": env!("CARGO_PKG_VERSION")},
        "authRequired": {"methods": gw.tenants.offered_methods(), "required": true},
    });
    if let Some(id) = &p.participant_id {
        result["participantId"] = json!(id);
    }
    if let Some(e) = error {
        result["error"] = e;
    }
    conn.state = ConnState::Pending(Box::new(p), session_id);
    result
}

pub fn connect(gw: &Arc<Gateway>, conn: &mut Conn, req: &Request) -> Result<Out, RpcError> {
    let p: ConnectParams = req.params()?;
    let draft = req.method == "map/initialize";
    if matches!(conn.state, ConnState::Active(_)) {
        return Err(RpcError::invalid_request("This connection already has a session; call map/disconnect first"));
    }
    if !draft && p.protocol_version.as_ref().is_some_and(|v| v.as_u64() != Some(PROTOCOL_VERSION)) {
        return Err(RpcError::invalid_params(format!("Unsupported protocolVersion; this gateway speaks {PROTOCOL_VERSION}")));
    }
    let participant_type = p.participant_type.clone().unwrap_or_else(|| "client".into());
    if !matches!(participant_type.as_str(), "client" | "agent" | "gateway" | "system") {
        return Err(RpcError::invalid_params("participantType must be client, agent, gateway or system"));
    }
    if let Some(b) = p.disconnect_policy.as_ref().and_then(|d| d.agent_behavior.as_deref()) {
        check_behavior("disconnectPolicy", b)?;
    }
    let caller = match caller_for(gw, conn, p.auth.as_ref()) {
        Ok(caller) => caller,
        Err((method, e)) if refused(&e) => {
            let error = auth_error(gw, &method, &e);
            return Ok(auth_required(gw, conn, p, Some(error)).into());
        }
        Err((_, e)) => return Err(e),
    };

    if let Some(token) = p.resume_token.as_deref() {
        // A resume token alone is not enough: the caller must also be the
        // principal that opened the session.
        let resumable = gw.resumable(token).filter(|live| {
            caller.as_ref().is_some_and(|c| Arc::ptr_eq(&c.tenant, &live.session.tenant) && ids::secrets_equal(&c.principal, &live.session.principal))
        });
        let (resumed, adopted) = match resumable {
            Some(_) => (gw.resume_session(conn, token, caller.as_ref().and_then(|c| c.expires_at)), false),
            // Not here: perhaps a session of a cluster node that has died.
            None => (caller.as_ref().and_then(|c| gw.adopt_session(conn, c, token)), true),
        };
        if let Some((active, token, owned)) = resumed {
            let mut result = connect_result(gw, &active, draft, &p);
            result["reconnected"] = json!(true);
            result["resumeToken"] = json!(token);
            result["ownedAgents"] = json!(owned);
            // Taken over from another node: answer once the shared directory
            // names this node, so a send made after the answer, from any
            // node, finds the session here.
            if let Some(saved) = adopted.then(|| active.tenant.registry.saved()).flatten() {
                return Ok(Out::Later(Box::pin(async move {
                    if tokio::time::timeout(ADOPTION_SAVED_WITHIN, saved).await.is_err() {
                        tracing::warn!(session = %active.session_id, "a session taken over from another node is not yet in the shared directory");
                    }
                    Ok(result.into())
                })));
            }
            return Ok(result.into());
        }
    }

    let Some(caller) = caller else {
        return Ok(auth_required(gw, conn, p, None).into());
    };
    let active = start_session(gw, conn, caller, &p, ids::session_id())?;
    let mut result = connect_result(gw, &active, draft, &p);
    result["resumeToken"] = json!(gw.live(&active.session_id).map(|l| l.resume_token));
    if let Some(ids) = p.reclaim_agents.as_deref().filter(|ids| !ids.is_empty()) {
        result["reclaimedAgents"] = json!(super::takeover::reclaim(&active, ids));
    }
    Ok(result.into())
}

fn start_session(gw: &Arc<Gateway>, conn: &mut Conn, caller: Authenticated, p: &ConnectParams, session_id: String) -> Result<Active, RpcError> {
    let tenant = caller.tenant.clone();
    let participant_type = p.participant_type.clone().unwrap_or_else(|| "client".into());
    let participant_id = match &p.participant_id {
        Some(id) if !id.is_empty() => {
            if id.len() > 256 {
                return Err(RpcError::invalid_params("participantId must be at most 256 characters"));
            }
            let reclaiming = p.reclaim_agents.as_ref().is_some_and(|r| r.contains(id));
            super::takeover::claim_participant_id(gw, &tenant, &caller.principal, id, reclaiming)?;
            id.clone()
        }
        _ => ids::prefixed(&participant_type),
    };
    let behavior = p.disconnect_policy.as_ref().and_then(|d| d.agent_behavior.clone()).unwrap_or_else(|| "grace-period".into());
    let now = ids::now_ms();
    let info = SessionInfo {
        id: session_id,
        participant_id,
        participant_type,
        name: p.name.clone(),
        agents: Vec::new(),
        connected: true,
        created_at: now,
        connected_at: now,
        disconnected_at: None,
        agent_behavior: behavior,
        capabilities: p.capabilities.clone().unwrap_or(Value::Null),
        permissions: None,
        principal: caller.principal.clone(),
        resume_hash: String::new(),
        home: None,
    };
    Ok(gw.open_session(conn, caller, info))
}

fn connect_result(gw: &Gateway, active: &Active, draft: bool, p: &ConnectParams) -> Value {
    let mut result = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "sessionId": active.session_id,
        "participantId": active.participant_id,
        "capabilities": effective_capabilities(active),
        "systemInfo": {"name": gw.config.server.name, "version": env!("CARGO_PKG_VERSION")},
        "principal": principal(gw, active),
    });
    if draft {
        result["mode"] = json!(p.mode.clone().unwrap_or_else(|| "full".into()));
        result["serverInfo"] = result["systemInfo"].clone();
    }
    result
}

pub fn authenticate(gw: &Arc<Gateway>, conn: &mut Conn, req: &Request) -> Result<Out, RpcError> {
    let a: AuthParams = req.params()?;
    let method = a.method.clone().ok_or_else(|| RpcError::invalid_params("method is required"))?;
    let caller = gw.authenticate(conn, &method, a.secret())?;
    match std::mem::replace(&mut conn.state, ConnState::Fresh) {
        ConnState::Pending(params, session_id) => {
            let active = match start_session(gw, conn, caller, &params, session_id.clone()) {
                Ok(a) => a,
                Err(e) => {
                    conn.state = ConnState::Pending(params, session_id);
                    return Err(e);
                }
            };
            let token = gw.live(&active.session_id).map(|l| l.resume_token);
            Ok(json!({
                "success": true,
                "sessionId": active.session_id,
                "participantId": active.participant_id,
                "principal": principal(gw, &active),
                "resumeToken": token,
            })
            .into())
        }
        ConnState::Active(active) => {
            let same = Arc::ptr_eq(&active.tenant, &caller.tenant) && ids::secrets_equal(&active.principal, &caller.principal);
            if same {
                // The same principal's credential again: its expiry is the session's now.
                credential_renewed(gw, conn, &active, caller.expires_at);
            }
            let result = json!({
                "success": true,
                "sessionId": active.session_id,
                "participantId": active.participant_id,
                "principal": principal(gw, &active),
            });
            conn.state = ConnState::Active(active);
            if !same {
                return Err(RpcError::new(codes::AUTH_FAILED, "The credential belongs to another principal than this session's"));
            }
            Ok(result.into())
        }
        ConnState::Fresh => Err(RpcError::new(codes::AUTH_REQUIRED, "Not connected: call map/connect first")),
    }
}

/// What a disconnect policy may say becomes of the agents.
fn check_behavior(field: &str, behavior: &str) -> Result<(), RpcError> {
    match behavior {
        "unregister" | "orphan" | "grace-period" => Ok(()),
        _ => Err(RpcError::invalid_params(format!("{field}.agentBehavior must be unregister, orphan or grace-period"))),
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DisconnectParams {
    reason: Option<String>,
    /// Replaces the one `map/connect` gave (the SDK's `TestServer` reads `policy`).
    #[serde(alias = "disconnectPolicy")]
    policy: Option<DisconnectPolicy>,
    /// Draft `map/shutdown`: also unregister the caller's agents.
    cascade: bool,
}

/// The session's disconnect policy now: the one given at disconnect, kept
/// for the session's end, else the one given at connect.
fn behavior_now(active: &Active, given: Option<String>) -> String {
    let mut reg = active.tenant.registry.lock();
    match (given, reg.sessions.get_mut(&active.session_id)) {
        (Some(given), Some(info)) => {
            info.agent_behavior.clone_from(&given);
            given
        }
        (given, info) => given.or(info.map(|i| i.agent_behavior.clone())).unwrap_or_default(),
    }
}

/// Say goodbye: the agents are unregistered or orphaned now, as the policy
/// says (`grace-period` keeps them until the resume window closes).
pub fn disconnect(gw: &Arc<Gateway>, conn: &mut Conn, req: &Request) -> Result<Out, RpcError> {
    let active = conn.active()?.clone();
    let p: DisconnectParams = req.params()?;
    let given = p.policy.and_then(|d| d.agent_behavior);
    if let Some(b) = &given {
        check_behavior("policy", b)?;
    }
    let reason = p.reason.unwrap_or_else(|| "disconnected".into());
    let behavior = if p.cascade { "unregister".into() } else { behavior_now(&active, given) };
    if behavior != "grace-period" {
        release_agents(&active.tenant, &active.session_id, behavior == "orphan", &reason);
    }
    let info = active.tenant.registry.lock().sessions.get(&active.session_id).cloned();
    // The session id stops admitting HTTP requests; its resume token still resumes it.
    if let Some(live) = gw.live(&active.session_id) {
        live.disconnected.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    let token = gw.connection_closed(conn);
    conn.left = Some(active);
    let mut session = json!(info);
    session["connected"] = json!(false);
    session["disconnectedAt"] = json!(ids::now_ms());
    Ok(json!({"success": true, "session": session, "resumeToken": token}).into())
}

pub fn list(conn: &mut Conn) -> Result<Out, RpcError> {
    let active = conn.active()?;
    let reg = active.tenant.registry.lock();
    let mut sessions: Vec<&SessionInfo> = reg.sessions.values().filter(|s| s.participant_id == active.participant_id).collect();
    sessions.sort_by_key(|s| s.created_at);
    Ok(json!({"sessions": sessions}).into())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct SessionRef {
    session_id: Option<String>,
}

fn not_found(id: &str) -> RpcError {
    RpcError::new(codes::SESSION_NOT_FOUND, format!("Session not found: {id}"))
}

/// Take over a detached session of the same participant.
pub fn load(gw: &Arc<Gateway>, conn: &mut Conn, req: &Request) -> Result<Out, RpcError> {
    let active = conn.active()?.clone();
    let id = req.params::<SessionRef>()?.session_id.ok_or_else(|| RpcError::invalid_params("sessionId is required"))?;
    if id == active.session_id {
        return Ok(json!({"sessionId": id, "restored": false}).into());
    }
    let live = gw
        .live(&id)
        .filter(|l| Arc::ptr_eq(&l.session.tenant, &active.tenant) && l.session.participant_id == active.participant_id)
        .ok_or_else(|| not_found(&id))?;
    if active.tenant.registry.lock().sessions.get(&id).is_none_or(|s| s.connected) {
        return Err(RpcError::new(codes::SESSION_IN_USE, format!("Session {id} is in use by another connection")));
    }
    // Leave the current (empty-handed) session, then resume the old one
    // with the current one's credential.
    let current = active.session_id.clone();
    let expires_at = gw.live(&current).and_then(|l| l.expiry.expires_at());
    gw.connection_closed(conn);
    gw.expire(&current, "replaced by map/session/load");
    gw.resume_session(conn, &live.resume_token, expires_at).ok_or_else(|| not_found(&id))?;
    Ok(json!({"sessionId": id, "restored": true}).into())
}

pub fn close(gw: &Arc<Gateway>, conn: &mut Conn, req: &Request) -> Result<Out, RpcError> {
    let active = conn.active()?.clone();
    let id = req.params::<SessionRef>()?.session_id.unwrap_or_else(|| active.session_id.clone());
    let info = active.tenant.registry.lock().sessions.get(&id).cloned().filter(|s| s.participant_id == active.participant_id).ok_or_else(|| not_found(&id))?;
    if id == active.session_id {
        gw.connection_closed(conn);
    }
    gw.expire(&id, "session closed");
    let mut session = json!(info);
    session["connected"] = json!(false);
    session["closedAt"] = json!(ids::now_ms());
    Ok(json!({"session": session}).into())
}

/// The session holds a credential expiring at `expires_at` now: a changed
/// expiry is announced anew (a notice due at once follows the answer).
pub(super) fn credential_renewed(gw: &Gateway, conn: &mut Conn, active: &Active, expires_at: Option<u64>) {
    if let Some(live) = gw.live(&active.session_id) {
        conn.deferred.extend(live.expiry.refreshed(expires_at, &active.outbox));
    }
}
