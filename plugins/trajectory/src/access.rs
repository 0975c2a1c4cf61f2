//! Who may do what. The gateway offers every trajectory capability; a
//! participant narrows them by declaring `trajectory.<capability>: false` at
//! `map/connect`. Reporting is for agents only, and only about agents their
//! own session registered.

use map_plugin_sdk::{Caller, Result};
use serde_json::{json, Value};

use crate::error::permission_denied;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    Report,
    Query,
    RequestContent,
}

impl Capability {
    fn key(self) -> &'static str {
        match self {
            Capability::Report => "canReport",
            Capability::Query => "canQuery",
            Capability::RequestContent => "canRequestContent",
        }
    }
}

/// Refuse (13004) a caller that gave up `capability`, or that is not an agent when reporting.
pub fn require(caller: &Caller, capability: Capability) -> Result<()> {
    let name = format!("trajectory.{}", capability.key());
    if capability == Capability::Report && caller.participant_type != "agent" {
        return Err(permission_denied(format!("Only agents report checkpoints; this session is a {}", caller.participant_type))
            .with_details(json!({ "capability": name, "participantType": caller.participant_type })));
    }
    if declined(&caller.capabilities, capability) {
        return Err(permission_denied(format!("The participant declared {name}: false")).with_details(json!({ "capability": name })));
    }
    Ok(())
}

/// Did the participant's declared capabilities switch this one off?
fn declined(declared: &str, capability: Capability) -> bool {
    let declared: Value = serde_json::from_str(declared).unwrap_or(Value::Null);
    declared.pointer(&format!("/trajectory/{}", capability.key())) == Some(&Value::Bool(false))
}

/// The agent a checkpoint is reported for: the one named, which the caller's
/// session must own, else the session's first agent.
pub fn reporting_agent(caller: &Caller, named: Option<&str>) -> Result<String> {
    let owned = || json!({ "ownedAgents": caller.agent_ids });
    match named {
        Some(agent) if caller.agent_ids.iter().any(|a| a == agent) => Ok(agent.to_string()),
        Some(agent) => {
            Err(permission_denied(format!("This session does not own agent {agent}"))
                .with_details(json!({ "agentId": agent, "ownedAgents": caller.agent_ids })))
        }
        None => caller.agent_ids.first().cloned().ok_or_else(|| permission_denied("Register an agent before reporting checkpoints").with_details(owned())),
    }
}

/// May the caller replace a checkpoint that `agent` reported?
pub fn require_owner(caller: &Caller, id: &str, agent: &str) -> Result<()> {
    if caller.agent_ids.iter().any(|a| a == agent) {
        return Ok(());
    }
    Err(permission_denied(format!("Checkpoint {id} belongs to agent {agent}, which this session does not own"))
        .with_details(json!({ "checkpointId": id, "agentId": agent })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes;

    fn caller(kind: &str, agents: &[&str], caps: &str) -> Caller {
        Caller {
            tenant: "t".into(),
            participant_id: "p".into(),
            participant_type: kind.into(),
            session_id: "s".into(),
            agent_ids: agents.iter().map(|a| a.to_string()).collect(),
            capabilities: caps.into(),
        }
    }

    #[test]
    fn declared_false_refuses_only_that_capability() {
        let c = caller("client", &[], r#"{"trajectory":{"canQuery":false}}"#);
        assert_eq!(require(&c, Capability::Query).unwrap_err().code(), Some(codes::PERMISSION_DENIED));
        assert!(require(&c, Capability::RequestContent).is_ok());
        assert!(require(&caller("client", &[], "null"), Capability::Query).is_ok());
    }

    #[test]
    fn only_agents_report() {
        assert_eq!(require(&caller("client", &[], "null"), Capability::Report).unwrap_err().code(), Some(codes::PERMISSION_DENIED));
        assert!(require(&caller("agent", &["a"], "{}"), Capability::Report).is_ok());
        let off = caller("agent", &["a"], r#"{"trajectory":{"canReport":false}}"#);
        assert!(require(&off, Capability::Report).is_err());
    }

    #[test]
    fn agents_report_for_their_own_agents() {
        let c = caller("agent", &["a", "b"], "null");
        assert_eq!(reporting_agent(&c, None).unwrap(), "a");
        assert_eq!(reporting_agent(&c, Some("b")).unwrap(), "b");
        assert!(reporting_agent(&c, Some("x")).is_err());
        assert!(reporting_agent(&caller("agent", &[], "null"), None).is_err());
    }
}
