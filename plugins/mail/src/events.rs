//! `mail.*` events in the tenant's event stream.
//!
//! The host's `mail` subscription filter reads `conversationId`, the
//! turn/thread/participant objects and `participantId` from the event data,
//! so every event carries `conversationId` at the top plus those objects.
//!
//! Events follow the read rules: they go (through `emit-to`) only to the
//! conversation's current participants, and a turn's events only to those
//! who may see that turn.

use serde_json::Value;

use crate::access;
use crate::map_gateway::plugin::events;
use crate::model::{Participant, Turn};
use crate::repo;

pub const CREATED: &str = "mail.created";
pub const CLOSED: &str = "mail.closed";
pub const PARTICIPANT_JOINED: &str = "mail.participant.joined";
pub const PARTICIPANT_LEFT: &str = "mail.participant.left";
pub const TURN_ADDED: &str = "mail.turn.added";
pub const TURN_UPDATED: &str = "mail.turn.updated";
pub const THREAD_CREATED: &str = "mail.thread.created";
pub const SUMMARY_GENERATED: &str = "mail.summary.generated";

/// Emit one event to `audience` (participant ids). The write it reports is
/// already durable, so a failure here is logged, not answered to the client.
fn emit_to(kind: &str, data: Value, audience: &[String]) {
    if let Err(e) = events::emit_to(kind, &data.to_string(), audience) {
        crate::warn(&format!("could not emit {kind}: {e}"));
    }
}

fn current(conv: &str) -> Vec<Participant> {
    match repo::participants(conv) {
        Ok(all) => all.into_iter().filter(|p| p.left_at.is_none()).collect(),
        Err(e) => {
            crate::warn(&format!("no audience for an event of {conv}: {e:?}"));
            Vec::new()
        }
    }
}

/// An event about a conversation, for its current participants (and `also`,
/// e.g. someone who just left).
pub fn emit(kind: &str, conv: &str, data: Value, also: Option<&str>) {
    let mut audience: Vec<String> = current(conv).into_iter().map(|p| p.id).collect();
    audience.extend(also.map(String::from));
    emit_to(kind, data, &audience);
}

/// An event about a turn, for the participants who may see it.
pub fn emit_turn(kind: &str, turn: &Turn, data: Value) {
    let audience: Vec<String> = current(&turn.conversation_id).into_iter().filter(|p| access::can_see(p, turn)).map(|p| p.id).collect();
    emit_to(kind, data, &audience);
}
