//! Who is calling and what they may do: the rules the reference server skips.

use serde_json::Value;

use crate::error::{MailError, MailResult};
use crate::map_gateway::plugin::types::Caller;
use crate::model::{Conversation, HistoryAccess, Participant, ParticipantType, Turn, Visibility};
use crate::repo;

/// The caller as a mail participant.
pub struct Actor {
    /// The session's first agent, else its participant id: the same id that
    /// `map/send` puts in `from`, so explicit and intercepted turns agree.
    pub id: String,
    pub kind: ParticipantType,
    /// `capabilities.mail` as declared at `map/connect` (`null` when absent).
    mail_caps: Value,
}

impl Actor {
    pub fn from_caller(caller: &Caller) -> Actor {
        let id = caller.agent_ids.first().cloned().unwrap_or_else(|| caller.participant_id.clone());
        Actor::new(id, caller)
    }

    /// The actor for an intercepted message: its sender.
    pub fn sender(from: String, caller: &Caller) -> Actor {
        Actor::new(from, caller)
    }

    fn new(id: String, caller: &Caller) -> Actor {
        let kind = if !caller.agent_ids.is_empty() || caller.participant_type == "agent" {
            ParticipantType::Agent
        } else if matches!(caller.participant_type.as_str(), "system" | "gateway") {
            ParticipantType::System
        } else {
            ParticipantType::User
        };
        let caps: Value = serde_json::from_str(&caller.capabilities).unwrap_or(Value::Null);
        Actor { id, kind, mail_caps: caps.get("mail").cloned().unwrap_or(Value::Null) }
    }

    /// A participant may narrow what it does at `map/connect`
    /// (`capabilities.mail.canCreate: false`, …); undeclared means allowed.
    pub fn require_capability(&self, capability: &str, method: &str) -> MailResult<()> {
        if self.mail_caps.get(capability).and_then(Value::as_bool) == Some(false) {
            return Err(MailError::permission_denied(
                format!("{method} needs the mail capability {capability}, which {} declared false", self.id),
                &format!("mail.{capability}"),
            ));
        }
        Ok(())
    }
}

pub fn require_conversation(id: &str) -> MailResult<Conversation> {
    repo::conversation(id)?.ok_or_else(|| MailError::conversation_not_found(id))
}

/// The caller's active participant record: only participants read or write.
pub fn require_member(conv: &Conversation, actor: &Actor) -> MailResult<Participant> {
    match repo::participant(&conv.id, &actor.id)? {
        Some(p) if p.is_active() => Ok(p),
        _ => Err(MailError::not_a_participant(&conv.id, &actor.id)),
    }
}

/// Closed conversations take no more turns, participants or threads.
pub fn require_open(conv: &Conversation) -> MailResult<()> {
    if conv.is_open() {
        Ok(())
    } else {
        Err(MailError::conversation_closed(&conv.id, conv.status.as_str()))
    }
}

pub fn require_permission(allowed: bool, who: &Participant, permission: &str, what: &str) -> MailResult<()> {
    if allowed {
        Ok(())
    } else {
        Err(MailError::permission_denied(format!("{} may not {what} in conversation {} ({permission} is false)", who.id, who.conversation_id), permission))
    }
}

/// Reading turns at all needs `canObserve`.
pub fn require_observer(reader: &Participant) -> MailResult<()> {
    require_permission(reader.permissions.can_observe, reader, "canObserve", "read turns")
}

/// Whether `reader` may see `turn`: authors see their own turns; everyone
/// else is limited by the turn's visibility, its `internal` flag and the
/// reader's `historyAccess`.
pub fn can_see(reader: &Participant, turn: &Turn) -> bool {
    if turn.participant == reader.id {
        return true;
    }
    if turn.is_internal() && !reader.permissions.can_see_internal {
        return false;
    }
    let in_history = match reader.permissions.history_access {
        HistoryAccess::Full => true,
        HistoryAccess::FromJoin => turn.timestamp >= reader.joined_at,
        HistoryAccess::None => false,
    };
    in_history
        && match &turn.visibility {
            None | Some(Visibility::All) => true,
            Some(Visibility::Participants { ids }) => ids.contains(&reader.id),
            Some(Visibility::Role { roles }) => roles.contains(&reader.role),
            Some(Visibility::Private) => false,
        }
}

/// A turn of the conversation the reader may see, else 10006 (an invisible
/// turn is reported exactly like a missing one).
pub fn visible_turn(conv: &str, turn_id: &str, reader: &Participant) -> MailResult<Turn> {
    match repo::turn(conv, turn_id)? {
        Some(t) if can_see(reader, &t) => Ok(t),
        _ => Err(MailError::turn_not_found(conv, turn_id)),
    }
}
