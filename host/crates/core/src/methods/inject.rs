//! `map/inject`: steering content straight to an agent, as a `map/message`
//! marked as injected.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::outbox::Frame;
use crate::{Active, Out};
use map_protocol::ids;
use map_protocol::rpc::{codes, encode_notification, Request, RpcError};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct InjectParams {
    agent_id: Option<String>,
    content: Value,
    delivery: Option<String>,
}

/// Steering: hand content to an agent as a `map/message` marked as injected.
pub fn inject(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: InjectParams = req.params()?;
    let id = p.agent_id.as_deref().ok_or_else(|| RpcError::invalid_params("agentId is required"))?;
    if let Some(d) = p.delivery.as_deref() {
        if !matches!(d, "interrupt" | "queue" | "best-effort") {
            return Err(RpcError::invalid_params("delivery must be interrupt, queue or best-effort"));
        }
    }
    let (session, from) = {
        let reg = active.tenant.registry.lock();
        let agent = reg.visible_agent(id, &active.viewer())?;
        if agent.state == "stopped" {
            return Err(RpcError::new(codes::AGENT_TERMINATED, format!("Agent {id} is stopped")));
        }
        let from = reg.sessions.get(&active.session_id).and_then(|s| s.agents.first().cloned()).unwrap_or_else(|| active.participant_id.clone());
        (agent.session.clone(), from)
    };
    let message = json!({
        "id": ids::prefixed("msg"),
        "from": from,
        "to": {"agent": id},
        "timestamp": ids::now_ms(),
        "payload": p.content,
        "meta": {"injected": true, "delivery": p.delivery.as_deref().unwrap_or("queue")},
    });
    let frame = Frame::from(encode_notification("map/message", &json!({"message": message})));
    active
        .tenant
        .fabric
        .deliver(&session, frame)
        .map_err(|_| RpcError::new(codes::DELIVERY_FAILED, format!("Agent {id} cannot take more messages right now")))?;
    Ok(json!({"injected": true, "delivery": "message"}).into())
}
