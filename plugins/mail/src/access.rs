//! Who is calling and what they may do: the rules the reference server skips.
//!
//! Readers are participants, and observer clients: callers that declared
//! `capabilities.mail.canObserve: true` at `map/connect`, in a tenant whose
//! `allow_observers` is not false. An observer reads every conversation of
//! the tenant without taking part, but only its public turns (no `private`,
//! `participants` or `role` visibility, nothing internal); it writes nothing
//! a non-participant could not write. A participant that is also an observer
//! sees what either gives it.

use map_plugin_sdk::{Caller, Result};
use serde_json::Value;

use crate::error;
use crate::model::{Conversation, HistoryAccess, Participant, ParticipantType, Turn, Visibility};
use crate::repo::{self, Ahead};
use crate::settings;

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

    /// An observer client: `capabilities.mail.canObserve: true`, and the
    /// tenant allows observers.
    pub fn is_observer(&self) -> bool {
        self.mail_caps.get("canObserve").and_then(Value::as_bool) == Some(true) && settings::allow_observers()
    }

    /// A participant may narrow what it does at `map/connect`
    /// (`capabilities.mail.canCreate: false`, …); undeclared means allowed.
    pub fn require_capability(&self, capability: &str, method: &str) -> Result<()> {
        if self.mail_caps.get(capability).and_then(Value::as_bool) == Some(false) {
            return Err(error::permission_denied(
                format!("{method} needs the mail capability {capability}, which {} declared false", self.id),
                &format!("mail.{capability}"),
            ));
        }
        Ok(())
    }
}

/// A conversation as one method sees it, read in one store call: the
/// conversation (`participantCount` not filled in: see [`Visit::counted`]),
/// the caller's participant record, and the threads and turns the request
/// names, read ahead.
pub struct Visit {
    pub conv: Conversation,
    /// The caller's participant record, active or not.
    record: Option<Participant>,
    /// The roster token read with the conversation.
    pub roster: Option<String>,
    pub ahead: Ahead,
}

/// Visit conversation `id` as `actor`, reading ahead the threads and turns
/// named (which may be absent); 10000 when there is no such conversation.
pub fn visit(id: &str, actor: &Actor, threads: &[&str], turns: &[&str]) -> Result<Visit> {
    let s = repo::snapshot(id, Some(&actor.id), threads, turns)?;
    let conv = s.conversation.ok_or_else(|| error::conversation_not_found(id))?;
    Ok(Visit { conv, record: s.participant, roster: s.roster, ahead: s.ahead })
}

impl Visit {
    /// The caller's participant record, also when it left.
    pub fn record(&self) -> Option<&Participant> {
        self.record.as_ref()
    }

    /// The caller's active participant record: only participants write;
    /// anyone else gets 10002.
    pub fn member(&self, actor: &Actor) -> Result<Participant> {
        match &self.record {
            Some(p) if p.is_active() => Ok(p.clone()),
            _ => Err(error::not_a_participant(&self.conv.id, &actor.id)),
        }
    }

    /// The caller as a reader: an active participant or an observer client;
    /// anyone else gets 10002.
    pub fn reader(&self, actor: &Actor) -> Result<Reader> {
        let member = self.record.clone().filter(Participant::is_active);
        let observer = actor.is_observer();
        if member.is_none() && !observer {
            return Err(error::not_a_participant(&self.conv.id, &actor.id));
        }
        Ok(Reader { member, observer })
    }

    /// The conversation with `participantCount` filled in (one more store call).
    pub fn counted(&self) -> Result<Conversation> {
        let mut conv = self.conv.clone();
        conv.participant_count = repo::count_participants(&conv.id)?;
        Ok(conv)
    }

    /// A thread of the conversation must exist, else 10007.
    pub fn require_thread(&self, thread: &str) -> Result<()> {
        if self.ahead.has_thread(thread)? {
            Ok(())
        } else {
            Err(error::thread_not_found(&self.conv.id, thread))
        }
    }

    /// A turn of the conversation the reader may see, else 10006.
    pub fn visible_turn(&self, turn_id: &str, reader: &impl Sees) -> Result<Turn> {
        visible_turn(&self.conv.id, &self.ahead, turn_id, reader)
    }
}

/// Who reads a conversation: its participant, an observer client, or both.
pub struct Reader {
    /// The caller's active participant record, if it takes part.
    pub member: Option<Participant>,
    /// The caller is an observer client (public turns of every conversation).
    pub observer: bool,
}

/// Something that may or may not see a turn.
pub trait Sees {
    fn sees(&self, turn: &Turn) -> bool;
}

impl Sees for Participant {
    fn sees(&self, turn: &Turn) -> bool {
        can_see(self, turn)
    }
}

impl Sees for Reader {
    /// What its participant record lets it read (with `canObserve`), plus
    /// every public turn for an observer.
    fn sees(&self, turn: &Turn) -> bool {
        self.member.as_ref().is_some_and(|m| m.permissions.can_observe && can_see(m, turn)) || (self.observer && turn.is_public())
    }
}

impl Reader {
    /// Reading turns at all: a participant needs `canObserve`; an observer
    /// client may always.
    pub fn require_turns(&self) -> Result<()> {
        match &self.member {
            Some(m) if !self.observer => require_observer(m),
            _ => Ok(()),
        }
    }
}

/// Closed conversations take no more turns, participants or threads.
pub fn require_open(conv: &Conversation) -> Result<()> {
    if conv.is_open() {
        Ok(())
    } else {
        Err(error::conversation_closed(&conv.id, conv.status.as_str()))
    }
}

pub fn require_permission(allowed: bool, who: &Participant, permission: &str, what: &str) -> Result<()> {
    if allowed {
        Ok(())
    } else {
        Err(error::permission_denied(format!("{} may not {what} in conversation {} ({permission} is false)", who.id, who.conversation_id), permission))
    }
}

/// Reading turns at all needs `canObserve`.
pub fn require_observer(reader: &Participant) -> Result<()> {
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

/// A turn of conversation `conv` the reader may see (from `ahead` when it
/// was read there), else 10006: an invisible turn is reported exactly like
/// a missing one.
pub fn visible_turn(conv: &str, ahead: &Ahead, turn_id: &str, reader: &impl Sees) -> Result<Turn> {
    match ahead.turn(turn_id)? {
        Some(t) if reader.sees(&t) => Ok(t),
        _ => Err(error::turn_not_found(conv, turn_id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;
    use serde_json::Map;

    fn member(id: &str, role: Role) -> Participant {
        Participant::sample(id, role)
    }

    fn turn(by: &str, visibility: Option<Visibility>, internal: bool) -> Turn {
        let mut metadata = Map::new();
        if internal {
            metadata.insert("internal".into(), Value::Bool(true));
        }
        Turn { timestamp: 10, visibility, metadata, ..Turn::sample("turn-1", by) }
    }

    #[test]
    fn an_observer_sees_public_turns_only() {
        let observer = Reader { member: None, observer: true };
        assert!(observer.sees(&turn("a", None, false)));
        assert!(observer.sees(&turn("a", Some(Visibility::All), false)));
        assert!(!observer.sees(&turn("a", Some(Visibility::Private), false)));
        assert!(!observer.sees(&turn("a", Some(Visibility::Participants { ids: vec!["o".into()] }), false)));
        assert!(!observer.sees(&turn("a", Some(Visibility::Role { roles: vec![Role::Observer] }), false)), "not even the observer role");
        assert!(!observer.sees(&turn("a", None, true)), "nor internal turns");
        assert!(observer.require_turns().is_ok());
    }

    #[test]
    fn a_participant_that_observes_sees_either() {
        let mut blind = member("w", Role::Worker);
        blind.permissions.history_access = HistoryAccess::None;
        let both = Reader { member: Some(blind.clone()), observer: true };
        assert!(both.sees(&turn("a", None, false)), "public, through the observer capability");
        assert!(both.sees(&turn("w", Some(Visibility::Private), false)), "its own private turn, as the participant");
        assert!(!both.sees(&turn("a", Some(Visibility::Role { roles: vec![Role::Worker] }), false)), "its history access hides this one");

        let only_member = Reader { member: Some(blind), observer: false };
        assert!(!only_member.sees(&turn("a", None, false)));

        let mut no_observe = member("w", Role::Worker);
        no_observe.permissions.can_observe = false;
        let reader = Reader { member: Some(no_observe.clone()), observer: false };
        assert_eq!(reader.require_turns().unwrap_err().code(), Some(crate::error::PERMISSION_DENIED));
        assert!(!reader.sees(&turn("a", None, false)));
        let reader = Reader { member: Some(no_observe), observer: true };
        assert!(reader.require_turns().is_ok());
        assert!(reader.sees(&turn("a", None, false)));
    }
}
