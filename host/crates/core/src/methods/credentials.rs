//! The credentials extension (`urn:map:ext:credentials:1`, `cred/*`): the
//! tenant's broker (`crate::credentials`) behind MAP. `cred/get` and
//! `cred/list` are for agent sessions that declared
//! `capabilities.credentials.canGet` / `canList` at `map/connect`; what
//! they get is granted to the principal the session authenticated as.
//! `cred/status` is for any session. Events and errors carry no credential.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::credentials::{Broker, Issued, Refused};
use crate::events::{NewEvent, Source};
use crate::registry::declares;
use crate::{Active, Conn, Out, Tenant};
use map_protocol::rpc::{codes, Request, RpcError};

pub const URI: &str = "urn:map:ext:credentials:1";

const NOT_ENABLED: i64 = 11000;
const DENIED: i64 = 11001;
const UNAVAILABLE: i64 = 11002;
const FAILED: i64 = 11003;

/// A `cred/` method's answer; `None` for other methods, and for `cred/`
/// in a tenant without a broker whose plugins serve it.
pub(super) fn dispatch(conn: &Conn, req: &Request) -> Option<Result<Out, RpcError>> {
    if !req.method.starts_with("cred/") {
        return None;
    }
    let active = match conn.active() {
        Ok(active) => active,
        Err(e) => return Some(Err(e)),
    };
    let Some(broker) = active.tenant.credentials() else {
        if active.tenant.extensions().serves(&req.method) {
            return None;
        }
        return Some(Err(match &*req.method {
            "cred/get" | "cred/list" | "cred/status" => RpcError::new(NOT_ENABLED, "The credentials broker is not enabled for this tenant"),
            other => RpcError::method_not_found(other),
        }));
    };
    Some(match &*req.method {
        "cred/get" => get(active, broker, req),
        "cred/list" => list(active, &broker),
        "cred/status" => Ok(json!({"providers": broker.providers()}).into()),
        other => Err(RpcError::method_not_found(other)),
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GetParams {
    scope: Option<String>,
    resource: Option<String>,
}

fn required(value: Option<String>, name: &str) -> Result<String, RpcError> {
    match value {
        Some(v) if v.contains('*') => Err(RpcError::invalid_params(format!("{name} names one thing: no `*`"))),
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(RpcError::invalid_params(format!("{name} is required"))),
    }
}

/// The agent id of a caller that may use `flag`: an agent session that
/// declared `capabilities.credentials.<flag>`. Its first registered agent,
/// else its participant id.
fn agent_caller(active: &Active, method: &str, flag: &str) -> Result<String, RpcError> {
    if active.participant_type != "agent" {
        return Err(RpcError::new(codes::PERMISSION_DENIED, format!("{method} is for agent sessions (participantType agent)")));
    }
    let reg = active.tenant.registry.lock();
    let session = reg.sessions.get(&active.session_id);
    if !session.is_some_and(|s| declares(&s.capabilities, &format!("credentials.{flag}"))) {
        return Err(RpcError::new(codes::PERMISSION_DENIED, format!("{method} needs capabilities.credentials.{flag} declared at map/connect")));
    }
    Ok(session.and_then(|s| s.agents.first().cloned()).unwrap_or_else(|| active.participant_id.clone()))
}

fn get(active: &Active, broker: Arc<Broker>, req: &Request) -> Result<Out, RpcError> {
    let p: GetParams = req.params()?;
    let (scope, resource) = (required(p.scope, "scope")?, required(p.resource, "resource")?);
    let agent_id = agent_caller(active, "cred/get", "canGet")?;
    let active = active.clone();
    Ok(Out::Later(Box::pin(async move {
        let emit = |kind: &'static str, data: Value| {
            let source = Source { agent_id: Some(agent_id.clone()), participant_id: Some(active.participant_id.clone()), scope_id: None };
            active.tenant.emit(NewEvent::new(kind, source, data));
        };
        match broker.get(&active.principal, &scope, &resource).await {
            Ok(issued) => {
                let expires_at = issued.expires_at.map(map_protocol::ids::iso8601);
                let mut data = json!({"agentId": agent_id, "scope": scope, "resource": resource, "credentialType": issued.credential_type});
                if let Some(at) = &expires_at {
                    data["expiresAt"] = json!(at);
                }
                emit("credential.issued", data);
                Ok(answer(issued, expires_at).into())
            }
            Err(Refused::Denied(reason)) => {
                emit("credential.denied", json!({"agentId": agent_id, "scope": scope, "resource": resource, "reason": reason}));
                Err(RpcError::new(DENIED, format!("Credential denied: {reason}")))
            }
            Err(Refused::Unavailable(why)) => Err(RpcError::new(UNAVAILABLE, format!("Credential provider unavailable: {why}"))),
            Err(Refused::Failed(why)) => Err(RpcError::new(FAILED, format!("Credential provider failed: {why}"))),
        }
    })))
}

fn answer(issued: Issued, expires_at: Option<String>) -> Value {
    let mut result = json!({"credentialType": issued.credential_type, "credential": issued.credential});
    if let Some(at) = expires_at {
        result["expiresAt"] = json!(at);
    }
    result
}

fn list(active: &Active, broker: &Broker) -> Result<Out, RpcError> {
    let agent_id = agent_caller(active, "cred/list", "canList")?;
    let granted = broker.granted(&active.principal);
    let constraints: serde_json::Map<String, Value> = granted.iter().map(|(scope, resources)| (scope.clone(), json!({"resources": resources}))).collect();
    let scopes: Vec<&String> = granted.iter().map(|(scope, _)| scope).collect();
    Ok(json!({"agentId": agent_id, "scopes": scopes, "constraints": constraints}).into())
}

/// The credentials capability group and URI, where the tenant has a broker.
pub(super) fn advertise(tenant: &Tenant, capabilities: &mut Value, participant_type: &str) {
    if tenant.credentials().is_none() {
        return;
    }
    let agent = participant_type == "agent";
    capabilities["credentials"] = json!({"enabled": true, "canGet": agent, "canList": agent, "canStatus": true});
    if let Some(list) = capabilities.get_mut("extensions").and_then(Value::as_array_mut) {
        // The broker serves cred/* here, before a plugin of the same extension.
        list.retain(|e| e["uri"] != URI);
        list.push(json!({"uri": URI}));
    }
}
