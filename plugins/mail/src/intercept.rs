//! Intercepted turns: `map/send` messages whose `meta.mail` names a
//! conversation are recorded as turns of their sender (unless
//! `meta.mail.recorded` says the sender already did).
//!
//! The host calls this after delivery, so nothing here can delay or fail
//! the message; a message that cannot be recorded (unknown or closed
//! conversation, sender not a participant, …) is logged and skipped.

use map_plugin_sdk::{log, Caller, Result, SentMessage};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::access::{self, Actor};
use crate::model::{Turn, TurnSource, TurnStatus, Visibility};
use crate::turns::{self, TurnSpec};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MailMeta {
    conversation_id: String,
    thread_id: Option<String>,
    in_reply_to: Option<String>,
    visibility: Option<Visibility>,
    /// Defaults to `data`: the turn's content is the message payload.
    content_type: Option<String>,
    metadata: Option<Map<String, Value>>,
    /// The sender recorded the message itself (with `mail/turn`, before
    /// sending it): `meta.mail` only tells the recipient the conversation.
    #[serde(default)]
    recorded: bool,
}

#[derive(Deserialize)]
struct Meta {
    mail: MailMeta,
}

pub fn on_send(caller: &Caller, msg: SentMessage) {
    let meta: Meta = match serde_json::from_str(&msg.meta) {
        Ok(m) => m,
        Err(e) => {
            log::warn(&format!("message {}: meta.mail ignored ({e})", msg.id));
            return;
        }
    };
    if meta.mail.recorded {
        return;
    }
    let message_id = msg.id.clone();
    match record(caller, msg, meta.mail) {
        Ok(turn) => log::debug(&format!("message {message_id} recorded as {}", turn.id)),
        Err(e) => log::warn(&format!("message {message_id} not recorded as a turn: {e}")),
    }
}

/// As `mail/turn` does: one `get-many` (the conversation, its activity, the
/// sender's participant record, the thread and the turn replied to), one
/// commit, and the event's audience.
fn record(caller: &Caller, msg: SentMessage, mail: MailMeta) -> Result<Turn> {
    let sender = Actor::sender(msg.from, caller);
    let visit = access::visit(&mail.conversation_id, &sender, mail.thread_id.as_deref().as_slice(), mail.in_reply_to.as_deref().as_slice())?;
    let author = visit.member(&sender)?;
    let mut metadata = mail.metadata.unwrap_or_default();
    if let Ok(to) = serde_json::from_str::<Value>(&msg.to) {
        metadata.insert("to".into(), to);
    }
    metadata.insert("delivered".into(), msg.delivered.into());
    let spec = TurnSpec {
        content_type: mail.content_type.unwrap_or_else(|| "data".into()),
        content: serde_json::from_str(&msg.payload).unwrap_or(Value::Null),
        thread_id: mail.thread_id,
        in_reply_to: mail.in_reply_to,
        visibility: mail.visibility,
        metadata,
        status: TurnStatus::Complete,
    };
    let turn = turns::build(&visit.conv, &visit.ahead, &author, spec, TurnSource::Intercepted { message_id: msg.id })?;
    turns::store(&turn, visit.roster.as_deref())?;
    Ok(turn)
}
