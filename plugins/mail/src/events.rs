//! `mail.*` events in the tenant's event stream.
//!
//! The host's `mail` subscription filter reads `conversationId`, the
//! turn/thread/participant objects and `participantId` from the event data,
//! so every event carries `conversationId` at the top plus those objects.
//!
//! Events follow the read rules: they go (through `emit-for`) only to the
//! conversation's current participants, and a turn's events only to those
//! who may see that turn. Where the tenant allows observer clients, events
//! also reach every session that declared `mail.canObserve`, except those
//! about a turn that is not public: an observer never hears of a private,
//! addressed, role-restricted or internal turn.
//!
//! The write an event reports is already durable, so a failure here is
//! logged, not answered to the client.

use std::cell::RefCell;
use std::rc::Rc;

use map_plugin_sdk::{events, log};
use serde::Serialize;
use serde_json::Value;

use crate::access;
use crate::model::{Participant, Turn};
use crate::repo;
use crate::settings;

pub const CREATED: &str = "mail.created";
pub const CLOSED: &str = "mail.closed";
pub const REOPENED: &str = "mail.reopened";
pub const PARTICIPANT_JOINED: &str = "mail.participant.joined";
pub const PARTICIPANT_LEFT: &str = "mail.participant.left";
pub const TURN_ADDED: &str = "mail.turn.added";
pub const TURN_UPDATED: &str = "mail.turn.updated";
pub const THREAD_CREATED: &str = "mail.thread.created";
pub const SUMMARY_GENERATED: &str = "mail.summary.generated";

/// The sessions' capability that makes them observer clients.
const OBSERVER_CAPABILITY: &str = "mail.canObserve";

/// Emit one event to `ids` (participant ids), and to observer clients when
/// `observers` is true and the tenant allows them.
fn emit_for<T: Serialize + ?Sized>(kind: &str, data: &T, ids: &[String], observers: bool) {
    let capability = (observers && settings::allow_observers()).then_some(OBSERVER_CAPABILITY);
    events::emit_for(kind, data, ids, capability);
}

/// The conversation's current participants, read once for an event's audience.
pub fn audience(conv: &str) -> Vec<Participant> {
    match repo::participants(conv) {
        Ok(all) => all.into_iter().filter(Participant::is_active).collect(),
        Err(e) => {
            log::warn(&format!("no audience for an event of {conv}: {e}"));
            Vec::new()
        }
    }
}

/// [`audience`], kept by this instance between calls and reused while the
/// conversation's roster token is the one `roster` (read before this call)
/// says: every participant write puts a new token, so the same token means
/// the same participants. Reading the participants costs a turn more than
/// anything else it does. A record is reused for at most `ROSTER_REUSE_MS`
/// (by `now`), which bounds how long a participant change written by a mail
/// version that kept no token goes unseen, during a rolling upgrade.
pub fn audience_of(conv: &str, roster: Option<&str>, now: u64) -> Rc<[Participant]> {
    let Some(token) = roster else {
        return audience(conv).into();
    };
    if let Some(current) = ROSTERS.with(|r| r.borrow().get(conv, token, now)) {
        return current;
    }
    let current: Rc<[Participant]> = audience(conv).into();
    ROSTERS.with(|r| r.borrow_mut().keep(conv, token, now, &current));
    current
}

/// How long a roster read is reused at most, in milliseconds.
const ROSTER_REUSE_MS: u64 = 1_000;
/// Conversations whose rosters an instance keeps.
const ROSTERS_KEPT: usize = 64;
/// Larger rosters are read every time (they bound the memory kept).
const ROSTER_MAX: usize = 64;

thread_local! {
    static ROSTERS: RefCell<Rosters> = RefCell::default();
}

/// Rosters read recently: (conversation, token, read at, participants).
#[derive(Default)]
struct Rosters(Vec<(String, String, u64, Rc<[Participant]>)>);

impl Rosters {
    fn get(&self, conv: &str, token: &str, now: u64) -> Option<Rc<[Participant]>> {
        let (_, kept, at, current) = self.0.iter().find(|(c, ..)| c == conv)?;
        (kept == token && now.saturating_sub(*at) < ROSTER_REUSE_MS && *at <= now).then(|| current.clone())
    }

    fn keep(&mut self, conv: &str, token: &str, now: u64, current: &Rc<[Participant]>) {
        self.0.retain(|(c, ..)| c != conv);
        if current.len() > ROSTER_MAX {
            return;
        }
        if self.0.len() >= ROSTERS_KEPT {
            if let Some(oldest) = self.0.iter().enumerate().min_by_key(|(_, (.., at, _))| *at).map(|(i, _)| i) {
                self.0.swap_remove(oldest);
            }
        }
        self.0.push((conv.to_string(), token.to_string(), now, current.clone()));
    }
}

/// An event about a conversation, for its current participants (and `also`,
/// e.g. someone who just left) and observer clients.
pub fn emit(kind: &str, conv: &str, data: Value, also: Option<&str>) {
    emit_to(kind, &audience(conv), data, also);
}

/// [`emit`] to participants already known to be the current ones.
pub fn emit_to(kind: &str, current: &[Participant], data: Value, also: Option<&str>) {
    let mut ids: Vec<String> = current.iter().map(|p| p.id.clone()).collect();
    ids.extend(also.map(String::from));
    emit_for(kind, &data, &ids, true);
}

/// An event about a turn, for the participants who may see it, and for
/// observer clients only when the turn is public.
pub fn emit_turn<T: Serialize + ?Sized>(kind: &str, turn: &Turn, data: &T) {
    emit_turn_to(kind, &audience(&turn.conversation_id), turn, data);
}

/// [`emit_turn`] to participants already known to be the current ones.
pub fn emit_turn_to<T: Serialize + ?Sized>(kind: &str, current: &[Participant], turn: &Turn, data: &T) {
    let ids: Vec<String> = current.iter().filter(|p| access::can_see(p, turn)).map(|p| p.id.clone()).collect();
    emit_for(kind, data, &ids, turn.is_public());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;

    fn roster(n: usize) -> Rc<[Participant]> {
        (0..n).map(|i| Participant::sample(&format!("agent-{i}"), Role::Worker)).collect()
    }

    #[test]
    fn a_roster_is_reused_only_under_the_same_token_and_for_a_while() {
        let mut r = Rosters::default();
        r.keep("conv-1", "t1", 1_000, &roster(2));
        assert_eq!(r.get("conv-1", "t1", 1_500).map(|p| p.len()), Some(2));
        assert!(r.get("conv-1", "t2", 1_500).is_none(), "a participant was written since");
        assert!(r.get("conv-1", "t1", 1_000 + ROSTER_REUSE_MS).is_none(), "kept too long");
        assert!(r.get("conv-1", "t1", 999).is_none(), "read after now: the clock went back");
        assert!(r.get("conv-2", "t1", 1_500).is_none());
        r.keep("conv-1", "t2", 1_600, &roster(3));
        assert_eq!(r.0.len(), 1, "a conversation is kept once");
        assert_eq!(r.get("conv-1", "t2", 1_700).map(|p| p.len()), Some(3));
    }

    #[test]
    fn rosters_kept_are_bounded_in_number_and_size() {
        let mut r = Rosters::default();
        r.keep("big", "t", 0, &roster(ROSTER_MAX + 1));
        assert!(r.get("big", "t", 1).is_none(), "too large to keep");
        for i in 0..ROSTERS_KEPT + 5 {
            r.keep(&format!("conv-{i}"), "t", 100 + i as u64, &roster(1));
        }
        assert_eq!(r.0.len(), ROSTERS_KEPT);
        assert!(r.get("conv-0", "t", 200).is_none(), "the oldest went first");
        assert!(r.get(&format!("conv-{}", ROSTERS_KEPT + 4), "t", 200).is_some());
    }
}
