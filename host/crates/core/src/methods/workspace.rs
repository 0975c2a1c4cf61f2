//! The workspace extension (`urn:map:ext:workspace:1`, capability group
//! `workspace`): `workspace/search`, `list` and `read` of one agent's
//! files. The gateway holds no files: it checks the caller and the params,
//! relays the request to the agent over the agent's own session (`asks`),
//! and answers with what the agent answered.
//!
//! - The caller needs the method's flag (`workspace.canSearch`, `canList`,
//!   `canRead`; granted to clients and agents) and must see the agent as
//!   `map/agents/get` would; an agent it may not see is missing (2001).
//! - An agent serves a workspace when its capabilities hold
//!   `workspace.enabled: true`, the group the SDK's `MAPServer` advertises:
//!   those given at `map/agents/register`, else its session's from
//!   `map/connect` (`AgentConnection` sends the same object to both). A
//!   flag of that group set to `false` refuses its method. Otherwise 12000.
//! - The agent's errors of the extension (12000–12999) and -32602 come
//!   back as it gave them, its -32601 as 12000, any other as -32603. No
//!   answer within `workspace.timeout_ms` is 3002.
//! - An agent whose session another cluster node serves is asked there.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::asks::{Answer, Ask, NOT_RESPONDING};
use crate::{Active, Conn, Gateway, Out, Tenant};
use map_config::WorkspaceConfig;
use map_protocol::rpc::{codes, Request, RpcError};

pub const URI: &str = "urn:map:ext:workspace:1";
/// The agent serves no workspace (or not this method).
pub const NOT_ENABLED: i64 = 12000;
const ERRORS: std::ops::RangeInclusive<i64> = 12000..=12999;

/// The methods and the flag of the group each needs.
const METHODS: &[(&str, &str)] = &[("workspace/search", "canSearch"), ("workspace/list", "canList"), ("workspace/read", "canRead")];

/// The participant types the flags are granted to (the extension's `callableBy`).
const GRANTED_TO: &[&str] = &["client", "agent"];

/// Whether the core serves this method (the extension is on and it is of its namespace).
pub fn serves(config: &WorkspaceConfig, method: &str) -> bool {
    config.enabled && method.starts_with("workspace/")
}

/// The capability group and the extension's URI, for a participant of this type.
pub fn advertise(config: &WorkspaceConfig, caps: &mut Value, participant_type: &str) {
    if !config.enabled {
        return;
    }
    let granted = GRANTED_TO.contains(&participant_type);
    caps["workspace"] = json!({"enabled": true, "canSearch": granted, "canList": granted, "canRead": granted});
    if let Some(list) = caps.get_mut("extensions").and_then(Value::as_array_mut) {
        list.push(json!({"uri": URI}));
    }
}

/// `workspace/search|list|read`: checked here, answered by the agent.
pub fn call(gw: &Arc<Gateway>, conn: &Conn, req: &Request) -> Result<Out, RpcError> {
    let method = req.method.to_string();
    let flag = METHODS.iter().find(|(m, _)| *m == method).map(|(_, f)| *f).ok_or_else(|| RpcError::method_not_found(&method))?;
    let active = conn.active()?;
    if !GRANTED_TO.contains(&active.participant_type.as_str()) {
        let why = format!("workspace.{flag} is not granted to {} participants", active.participant_type);
        return Err(RpcError::new(codes::PERMISSION_DENIED, why));
    }
    let text = match req.params {
        Some(raw) if raw.get() != "null" => raw.get(),
        _ => "{}",
    };
    let params: Map<String, Value> = serde_json::from_str(text).map_err(|_| RpcError::invalid_params(format!("{method} takes named params (an object)")))?;
    let agent_id = checked(&method, &params)?;
    let (session, who) = target(active, &agent_id, flag)?;
    let config = &gw.config.workspace;
    let params = RawValue::from_string(text.to_string()).map_err(|e| RpcError::invalid_params(e.to_string()))?;
    let ask = Ask { who, method: method.clone(), params, timeout: std::time::Duration::from_millis(config.timeout_ms), max_pending: config.max_pending };
    let answer = relay(gw, &active.tenant, session, ask);
    Ok(Out::Later(Box::pin(async move { passed_back(answer.await, &method, &agent_id) })))
}

fn missing(what: &str) -> RpcError {
    RpcError::invalid_params(format!("{what} is required"))
}

/// A string param, when present.
fn text<'p>(params: &'p Map<String, Value>, key: &str) -> Result<Option<&'p str>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_params(format!("{key} must be a string"))),
    }
}

/// A positive integer param, when present.
fn positive(value: Option<&Value>, key: &str) -> Result<Option<u64>, RpcError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().filter(|n| *n >= 1).map(Some).ok_or_else(|| RpcError::invalid_params(format!("{key} must be a positive integer"))),
    }
}

/// The params each method needs (-32602 otherwise); the agent id.
fn checked(method: &str, p: &Map<String, Value>) -> Result<String, RpcError> {
    let agent = text(p, "agentId")?.filter(|s| !s.is_empty()).ok_or_else(|| missing("agentId"))?;
    match method {
        "workspace/search" => {
            text(p, "query")?.filter(|s| !s.is_empty()).ok_or_else(|| missing("query"))?;
            text(p, "cwd")?;
            positive(p.get("limit"), "limit")?;
        }
        "workspace/list" => {
            text(p, "directory")?;
        }
        _ => {
            text(p, "path")?.filter(|s| !s.is_empty()).ok_or_else(|| missing("path"))?;
            if let Some(range) = p.get("lineRange").filter(|v| !v.is_null()) {
                let start = positive(range.get("start"), "lineRange.start")?.ok_or_else(|| missing("lineRange.start"))?;
                let end = positive(range.get("end"), "lineRange.end")?.ok_or_else(|| missing("lineRange.end"))?;
                if start > end {
                    return Err(RpcError::invalid_params("lineRange.start must not be after lineRange.end"));
                }
            }
        }
    }
    Ok(agent.to_string())
}

/// The session of an agent the caller may see and that serves `flag`, and
/// how to name the agent in errors.
fn target(active: &Active, agent_id: &str, flag: &str) -> Result<(String, String), RpcError> {
    let reg = active.tenant.registry.lock();
    let agent = reg.visible_agent(agent_id, &active.viewer())?;
    let session = reg.sessions.get(&agent.session);
    let group = agent.capabilities.as_ref().and_then(|c| c.get("workspace")).or_else(|| session.and_then(|s| s.capabilities.get("workspace")));
    let Some(group) = group.filter(|g| g.get("enabled") == Some(&Value::Bool(true))) else {
        let why = format!("Agent {agent_id} serves no workspace (its capabilities do not hold workspace.enabled: true)");
        return Err(RpcError::new(NOT_ENABLED, why));
    };
    if group.get(flag) == Some(&Value::Bool(false)) {
        return Err(RpcError::new(NOT_ENABLED, format!("Agent {agent_id} does not allow workspace.{flag}")));
    }
    if session.is_none() {
        return Err(RpcError::new(NOT_RESPONDING, format!("Agent {agent_id} is not connected now")));
    }
    Ok((agent.session.clone(), format!("Agent {agent_id}")))
}

/// Ask the agent's session: here, or on the node that serves it.
fn relay(gw: &Arc<Gateway>, tenant: &Arc<Tenant>, session: String, ask: Ask) -> BoxFuture<'static, Answer> {
    match gw.live(&session).filter(|l| Arc::ptr_eq(&l.session.tenant, tenant)) {
        Some(live) => Box::pin(async move { live.session.tenant.asks.ask(&live.session.outbox, &session, &ask).await }),
        None => tenant.fabric.ask_elsewhere(&session, ask),
    }
}

/// The agent's answer as the caller gets it.
fn passed_back(answer: Answer, method: &str, agent: &str) -> Result<Out, RpcError> {
    match answer {
        Ok(result) if result.get().trim_start().starts_with('{') => Ok(Out::Raw(result)),
        Ok(_) => Err(RpcError::internal(format!("Agent {agent} answered {method} with something other than an object"))),
        Err(e) if ERRORS.contains(&e.code) || matches!(e.code, codes::INVALID_PARAMS | NOT_RESPONDING | codes::RESOURCE_EXHAUSTED) => Err(e),
        Err(e) if e.code == codes::METHOD_NOT_FOUND => Err(RpcError::new(NOT_ENABLED, format!("Agent {agent} does not serve {method}"))),
        Err(e) => Err(RpcError::internal(format!("Agent {agent} failed to answer {method}: {}", e.message)).with_details(json!({"agentCode": e.code}))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn params_are_checked_per_method() {
        assert_eq!(checked("workspace/list", &p(json!({"agentId": "a"}))).unwrap(), "a");
        assert_eq!(checked("workspace/list", &p(json!({}))).unwrap_err().code, codes::INVALID_PARAMS);
        assert_eq!(checked("workspace/search", &p(json!({"agentId": "a"}))).unwrap_err().message, "query is required");
        assert!(checked("workspace/search", &p(json!({"agentId": "a", "query": "x", "limit": 0}))).is_err());
        assert!(checked("workspace/read", &p(json!({"agentId": "a"}))).is_err());
        assert!(checked("workspace/read", &p(json!({"agentId": "a", "path": "f", "lineRange": {"start": 1, "end": 3}}))).is_ok());
        assert!(checked("workspace/read", &p(json!({"agentId": "a", "path": "f", "lineRange": {"start": 1}}))).is_err());
        assert!(checked("workspace/read", &p(json!({"agentId": "a", "path": "f", "lineRange": {"start": 4, "end": 3}}))).is_err());
        assert!(checked("workspace/read", &p(json!({"agentId": 5, "path": "f"}))).is_err());
    }

    #[test]
    fn the_agents_errors_are_kept_within_the_extension() {
        let err = |code| passed_back(Err(RpcError::new(code, "m")), "workspace/read", "a").err().unwrap().code;
        assert_eq!(err(12003), 12003);
        assert_eq!(err(codes::INVALID_PARAMS), codes::INVALID_PARAMS);
        assert_eq!(err(codes::METHOD_NOT_FOUND), NOT_ENABLED);
        assert_eq!(err(1003), codes::INTERNAL_ERROR);
        let not_object = passed_back(Ok(RawValue::from_string("null".into()).unwrap()), "workspace/read", "a");
        assert_eq!(not_object.err().unwrap().code, codes::INTERNAL_ERROR);
    }
}
