//! `mail/turn.received` (mail v1.1): a new turn pushed as a notification to
//! each participant's session that declared the mail capability at
//! `map/connect` (`capabilities.mail`), but the author's own and those who
//! may not see the turn.
//!
//! The host (`router.notify-for`) resolves the participant ids to sessions
//! and picks those that declared `mail`; a session that is disconnected and
//! may still resume gets the notification, once, when it resumes. No host
//! call is made when no one but the author may see the turn.

use map_plugin_sdk::{log, router};
use serde::Serialize;
use serde_json::Value;

use crate::access;
use crate::model::{Participant, Turn};

pub const METHOD: &str = "mail/turn.received";

/// The capability group a session declares to receive it.
const CAPABILITY: &str = "mail";

/// The notification's params, in the field names of mail v1.1.
#[derive(Serialize)]
struct TurnReceived<'a> {
    conversation_id: &'a str,
    turn_id: &'a str,
    participant_id: &'a str,
    content_type: &'a str,
    content: &'a Value,
    /// `null` for a turn outside threads.
    thread_id: Option<&'a str>,
    /// Unix ms.
    created_at: u64,
}

/// Tell the conversation's current participants (`current`) who may see
/// `turn`, other than its author, that it landed. The turn is already
/// durable: a failure is logged, not answered.
pub fn notify(current: &[Participant], turn: &Turn) {
    let ids: Vec<String> = current.iter().filter(|p| p.id != turn.participant && access::can_see(p, turn)).map(|p| p.id.clone()).collect();
    if ids.is_empty() {
        return;
    }
    let params = TurnReceived {
        conversation_id: &turn.conversation_id,
        turn_id: &turn.id,
        participant_id: &turn.participant,
        content_type: &turn.content_type,
        content: &turn.content,
        thread_id: turn.thread_id.as_deref(),
        created_at: turn.timestamp,
    };
    if let Err(e) = router::notify_for(&ids, Some(CAPABILITY), true, METHOD, &params) {
        log::warn(&format!("{METHOD} for {} not sent: {}", turn.id, e.message));
    }
}
