//! Events in the tenant's MAP event stream (numbered, kept for
//! `map/replay`, pushed to matching subscriptions).
//!
//! An event usually reports a write that is already durable, so these
//! functions do not fail the call: a refused event (an empty type, `data`
//! that is not a JSON object) is logged as a warning and `false` returned.

use serde::Serialize;

use crate::bindings::map_gateway::plugin::events::{self as wit, Audience};
use crate::log;

fn data_text<T: Serialize + ?Sized>(event_type: &str, data: &T) -> Option<String> {
    match serde_json::to_string(data) {
        Ok(text) => Some(text),
        Err(e) => {
            log::warn(&format!("could not emit {event_type}: its data cannot be written as JSON: {e}"));
            None
        }
    }
}

fn logged(event_type: &str, result: Result<(), String>) -> bool {
    match result {
        Ok(()) => true,
        Err(e) => {
            log::warn(&format!("could not emit {event_type}: {e}"));
            false
        }
    }
}

/// Emit to everyone allowed to see the tenant's events. `data` must
/// serialise to a JSON object.
pub fn emit<T: Serialize + ?Sized>(event_type: &str, data: &T) -> bool {
    data_text(event_type, data).is_some_and(|d| logged(event_type, wit::emit(event_type, &d)))
}

/// Emit only to these participant and agent ids (their sessions receive it,
/// live and from `map/replay`); an empty audience reaches no one.
pub fn emit_to<T: Serialize + ?Sized>(event_type: &str, data: &T, audience: &[String]) -> bool {
    data_text(event_type, data).is_some_and(|d| logged(event_type, wit::emit_to(event_type, &d, audience)))
}

/// Emit to these ids and also to every session whose declared capabilities
/// hold `true` at the dotted path `capability` (e.g. `mail.canObserve`).
pub fn emit_for<T: Serialize + ?Sized>(event_type: &str, data: &T, ids: &[String], capability: Option<&str>) -> bool {
    let audience = Audience { ids: ids.to_vec(), capability: capability.map(String::from) };
    data_text(event_type, data).is_some_and(|d| logged(event_type, wit::emit_for(event_type, &d, &audience)))
}
