//! `mail.*` events in the tenant's event stream.
//!
//! The host's `mail` subscription filter reads `conversationId`, the
//! turn/thread/participant objects and `participantId` from the event data,
//! so every event carries `conversationId` at the top plus those objects.
//!
//! Events reach every subscriber of the tenant, participant or not, and the
//! host cannot target them per reader; so a turn with a restricted audience
//! (visibility other than `all`, or internal) goes out without its content.

use serde_json::{json, Value};

use crate::map_gateway::plugin::events;
use crate::model::Turn;

pub const CREATED: &str = "mail.created";
pub const CLOSED: &str = "mail.closed";
pub const PARTICIPANT_JOINED: &str = "mail.participant.joined";
pub const PARTICIPANT_LEFT: &str = "mail.participant.left";
pub const TURN_ADDED: &str = "mail.turn.added";
pub const TURN_UPDATED: &str = "mail.turn.updated";
pub const THREAD_CREATED: &str = "mail.thread.created";
pub const SUMMARY_GENERATED: &str = "mail.summary.generated";

/// Emit one event. The write it reports is already durable, so a failure
/// here is logged, not answered to the client.
pub fn emit(kind: &str, data: Value) {
    if let Err(e) = events::emit(kind, &data.to_string()) {
        crate::warn(&format!("could not emit {kind}: {e}"));
    }
}

/// A turn as events show it: whole when every participant may see it,
/// otherwise without `content`.
pub fn turn_for_everyone(turn: &Turn) -> Value {
    let mut v = serde_json::to_value(turn).expect("turns serialise");
    if !turn.is_public() {
        if let Some(obj) = v.as_object_mut() {
            obj.remove("content");
            obj.insert("contentRedacted".into(), json!(true));
        }
    }
    v
}
