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
