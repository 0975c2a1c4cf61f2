//! `POST /mamp/v1/messages`: a message from an external agent system to a
//! MAP agent of this tenant. Checked in this order: media type (415), size
//! (413), body (400), a retry of a message already received (the same
//! answer again), the sender's rate (429), the addressee (404), the
//! conversation (404); then the message reaches the agent as `map/message`
//! and is recorded as a turn of the mapped mail conversation.

use map_plugin_sdk::store::{Batch, Outcome};
use map_plugin_sdk::{ids, metrics, router, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use crate::cards;
use crate::message::{self, Message};
use crate::reply::{unavailable, Refusal};
use crate::repo::{self, Mapping, Received, BY_MAIL, CONVERSATIONS, FLOOD, RECEIVED};
use crate::settings::Settings;

pub fn receive(req: &HttpRequest) -> HttpResponse {
    let settings = Settings::load();
    // `/metrics`: messages received, by how they were answered.
    match handle(req, &settings) {
        Ok(answer) => {
            metrics::count("mamp_received_total", &[("result", "accepted")], 1);
            HttpResponse::json(200, &answer)
        }
        Err(refusal) => {
            metrics::count("mamp_received_total", &[("result", refusal.error)], 1);
            refusal.response()
        }
    }
}

fn handle(req: &HttpRequest, settings: &Settings) -> Result<Value, Refusal> {
    let content_type = req.headers.iter().find(|(k, _)| k == "content-type").map(|(_, v)| v.as_str()).unwrap_or("");
    if content_type.split(';').next().map(str::trim) != Some("application/json") {
        return Err(Refusal::new(415, "unsupported_media_type", "send the message as Content-Type: application/json"));
    }
    if req.body.len() > settings.max_message_size {
        return Err(Refusal::new(413, "message_too_large", format!("the message is {} bytes; the limit is {}", req.body.len(), settings.max_message_size)));
    }
    let msg = message::parse(&req.body)?;
    let key = repo::received_key(&msg.from, &msg.message_id);
    // A retry gets the first answer again and delivers nothing.
    if let Some(done) = RECEIVED.get(&key).map_err(|e| unavailable("reading past messages", e.message()))? {
        return match done.answer {
            Some(answer) => Ok(answer),
            None => Err(Refusal::new(409, "message_in_progress", format!("message {} from {} is being delivered; retry later", msg.message_id, msg.from))),
        };
    }
    check_rate(&msg.from, settings)?;
    if msg.to.domain != settings.domain.to_ascii_lowercase() {
        return Err(Refusal::new(404, "agent_not_found", format!("this gateway serves agent://{}/…, not {}", settings.domain, msg.to.domain)));
    }
    if router::connected_since(std::slice::from_ref(&msg.to.agent)).first().copied().flatten().is_none() {
        return Err(Refusal::new(404, "agent_not_found", format!("no agent {} is connected here (messages are not queued)", msg.to.agent)));
    }
    let agent = router::agent(&msg.to.agent).unwrap_or(Value::Null);
    cards::admits(&cards::access(&agent), &msg.from)?;
    // Claimed before delivery, so that a concurrent retry cannot deliver twice.
    let mut claim = Batch::new();
    claim.expect_absent(&RECEIVED, key.clone()).put(&RECEIVED, key.clone(), &Received { answer: None });
    match claim.commit().map_err(|e| unavailable("recording the message", e.message()))? {
        Outcome::Committed(_) => {}
        Outcome::Conflict(_) => {
            return Err(Refusal::new(409, "message_in_progress", format!("message {} from {} is being delivered; retry later", msg.message_id, msg.from)))
        }
    }
    match deliver(&msg) {
        Ok(answer) => {
            RECEIVED.put(&key, &Received { answer: Some(answer.clone()) }).map_err(|e| unavailable("recording the answer", e.message()))?;
            Ok(answer)
        }
        Err(refusal) => {
            // Not delivered: a retry may try again.
            let _ = RECEIVED.delete(&key);
            Err(refusal)
        }
    }
}

/// At most `floodPerMinute` messages per sender URI and minute.
fn check_rate(from: &str, settings: &Settings) -> Result<(), Refusal> {
    let minute = ids::now_ms() / 60_000;
    let mut batch = Batch::new();
    let slot = batch.add(&FLOOD, repo::flood_key(from, minute), 1);
    batch.delete_key(FLOOD.name(), repo::flood_key(from, minute.saturating_sub(2)));
    let count = batch.apply().map_err(|e| unavailable("counting the sender's messages", e.message()))?.counter(slot);
    if count > settings.flood_per_minute {
        return Err(Refusal::new(429, "rate_limited", format!("{from} sent more than {} messages this minute", settings.flood_per_minute)));
    }
    Ok(())
}

/// The mapped (or a new) mail conversation, then the message to the agent.
fn deliver(msg: &Message) -> Result<Value, Refusal> {
    let mapping = match &msg.conversation_id {
        Some(id) => {
            let m = CONVERSATIONS.get(id).map_err(|e| unavailable("reading the conversation", e.message()))?;
            let m = m.ok_or_else(|| Refusal::new(404, "conversation_not_found", format!("conversation {id} is not known here")))?;
            if m.agent != msg.to.agent || m.peer != msg.from {
                return Err(Refusal::new(404, "conversation_not_found", format!("conversation {id} is not between {} and {}", msg.from, msg.to.agent)));
            }
            m
        }
        None => open_conversation(msg)?,
    };
    // The turn first, so that it comes before anything the agent answers.
    let payload = msg.payload(&mapping.conversation_id);
    router::call("mail/turn", &json!({"conversationId": mapping.mail_conversation_id, "contentType": "data", "content": payload}))
        .map_err(|e| unavailable("recording the message in mail", e.message))?;
    let meta = json!({"protocol": "mamp", "mail": {"conversationId": mapping.mail_conversation_id, "recorded": true}});
    let sent = router::send(&json!({"agent": msg.to.agent}), &payload, Some(&meta))
        .map_err(|e| Refusal::new(404, "agent_not_found", format!("agent {} could not be reached: {}", msg.to.agent, e.message)))?;
    if sent["delivered"].as_array().is_none_or(Vec::is_empty) {
        return Err(Refusal::new(404, "agent_not_found", format!("agent {} went away before the message reached it", msg.to.agent)));
    }
    Ok(json!({"conversation_id": mapping.conversation_id, "message_id": msg.message_id, "status": "received"}))
}

/// A new mail conversation between the bridge and the agent, mapped durably;
/// its id is the MAMP `conversation_id`.
fn open_conversation(msg: &Message) -> Result<Mapping, Refusal> {
    let params = json!({
        "subject": format!("MAMP: {}", msg.from),
        "initialParticipants": [{"id": msg.to.agent, "type": "agent"}],
        "metadata": {"mamp": {"peer": msg.from}},
    });
    let created = router::call("mail/create", &params).map_err(|e| match e.code {
        -32601 => Refusal::new(503, "service_unavailable", "mail is not enabled for this tenant: MAMP conversations are recorded there"),
        _ => unavailable("opening a mail conversation", e.message),
    })?;
    let mail_id = created["conversation"]["id"].as_str().ok_or_else(|| unavailable("opening a mail conversation", "mail/create answered no id"))?.to_string();
    let mapping = Mapping {
        conversation_id: mail_id.clone(),
        mail_conversation_id: mail_id.clone(),
        peer: msg.from.clone(),
        agent: msg.to.agent.clone(),
        created_at: ids::iso8601(ids::now_ms()),
        peer_named: true,
    };
    let mut batch = Batch::new();
    batch.put(&CONVERSATIONS, mapping.conversation_id.clone(), &mapping).put(&BY_MAIL, mail_id, &mapping.conversation_id);
    batch.apply().map_err(|e| unavailable("mapping the conversation", e.message()))?;
    Ok(mapping)
}
