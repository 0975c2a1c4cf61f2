//! What a new session takes over: its participant id (detached sessions
//! holding it give way) and orphaned agents it reclaims (`reclaimAgents`).

use std::sync::Arc;

use serde_json::json;

use crate::{Active, Gateway, Tenant};
use map_protocol::ids;
use map_protocol::rpc::{codes, RpcError};

/// A participant id belongs to the first principal that used it (1003 for
/// another), and names one session: detached sessions holding it give way
/// (see `Registry::participant_id_holders`).
pub(super) fn claim_participant_id(gw: &Arc<Gateway>, tenant: &Tenant, principal: &Arc<str>, id: &str, reclaiming: bool) -> Result<(), RpcError> {
    let yielding = {
        let mut reg = tenant.registry.lock();
        if reg.participant_owners.get(id).is_some_and(|owner| !ids::secrets_equal(owner, principal)) {
            return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Participant id {id} belongs to another principal")));
        }
        let yielding = reg.participant_id_holders(id, principal, reclaiming)?;
        reg.participant_owners.entry(id.to_string()).or_insert_with(|| principal.clone());
        yielding
    };
    for old in yielding {
        gw.expire(&old, "replaced by a new session");
    }
    Ok(())
}

/// Take over orphaned agents (their session ended with the `orphan` policy);
/// agents that are not orphaned are left alone and not listed.
pub(super) fn reclaim(active: &Active, ids: &[String]) -> Vec<crate::model::Agent> {
    let mut reclaimed = Vec::new();
    let mut events = Vec::new();
    {
        let mut reg = active.tenant.registry.lock();
        for id in ids {
            let Some(agent) = reg.agents.get_mut(id).filter(|a| a.state == "orphaned" && a.session.is_empty()) else { continue };
            agent.session = active.session_id.clone();
            agent.owner_id = active.participant_id.clone();
            agent.state = "active".into();
            agent.lifecycle.last_state_change = ids::now_ms();
            let data = json!({"agentId": id, "agent": agent, "previousState": "orphaned", "newState": "active", "reason": "reclaimed"});
            events.push(crate::lifecycle::agent_event("agent_state_changed", agent, data));
            reclaimed.push(agent.clone());
            if let Some(s) = reg.sessions.get_mut(&active.session_id) {
                s.agents.push(id.clone());
            }
        }
    }
    crate::lifecycle::publish_agent_events(&active.tenant, events);
    reclaimed
}
