//! From MAP agents to external ones: `mamp/send`, and the deliveries that
//! have to wait. A message is recorded as the agent's turn, then POSTed to
//! the peer; a transient failure (no answer, 408, 429, 5xx) is kept in the
//! store and retried on a timer with doubling delays, the same `message_id`
//! each time. When the bridge gives up (a refusal, or `maxAttempts` used),
//! the sending agent gets `message_failed`: nothing is dropped silently.

use map_plugin_sdk::prelude::*;
use map_plugin_sdk::timers;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::message::{self, AgentUri, PROTOCOL};
use crate::repo::{Mapping, BY_MAIL, CONVERSATIONS};
use crate::settings::Settings;
use crate::{CONVERSATION_NOT_FOUND, NOT_YOURS};
use map_plugin_sdk::http::{self, Url};

/// A delivery waiting for its next attempt, by `message_id`.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub message: Value,
    /// The sending MAP agent, who hears `message_failed`.
    pub agent: String,
    pub mail_conversation_id: String,
    pub attempts: u32,
    pub timer: Option<u64>,
    pub last_error: String,
}

pub const PENDING: Collection<Pending> = Collection::new("pending");
const TIMER_PREFIX: &str = "retry/";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SendParams {
    to: Option<String>,
    conversation_id: Option<String>,
    content: Value,
    from: Option<String>,
}

/// The caller's agent that sends: `from` (one of its agents, in this
/// tenant's domain) or its first agent.
fn sender(call: &Call, from: Option<&str>, settings: &Settings) -> Result<String> {
    let agents = &call.caller.agent_ids;
    match from {
        Some(uri) => {
            let a = AgentUri::parse(uri).ok_or_else(|| Error::invalid_params(format!("from {uri:?} is not an agent URI")))?;
            if a.domain != settings.domain.to_ascii_lowercase() || !agents.contains(&a.agent) {
                return Err(Error::invalid_params(format!("from {uri:?} is not one of the caller's agents (agent://{}/<its agent id>)", settings.domain)));
            }
            Ok(a.agent)
        }
        None => agents.first().cloned().ok_or_else(|| Error::invalid_params("mamp/send is for agents: register one first (or name it in from)")),
    }
}

/// `mamp/send {to?, conversationId?, content, from?}` → `{conversationId, messageId, status}`,
/// `status` being `sent`, `queued` (a retry will follow) or `failed`.
pub fn send(call: &Call) -> Result<Reply> {
    let settings = Settings::load();
    let p: SendParams = call.params()?;
    let content = message::blocks(&p.content).map_err(|r| Error::invalid_params(r.message))?;
    let agent = sender(call, p.from.as_deref(), &settings)?;
    let (mapping, known) = match &p.conversation_id {
        Some(id) => {
            let mamp_id = BY_MAIL.get(id)?.unwrap_or_else(|| id.clone());
            let m = CONVERSATIONS.get(&mamp_id)?.ok_or_else(|| Error::new(CONVERSATION_NOT_FOUND, format!("No MAMP conversation {id}")))?;
            if m.agent != agent {
                return Err(Error::new(NOT_YOURS, format!("MAMP conversation {id} is {}'s, not {agent}'s", m.agent)));
            }
            if p.to.as_ref().is_some_and(|to| *to != m.peer) {
                return Err(Error::invalid_params(format!("conversation {id} is with {}, not {}", m.peer, p.to.unwrap_or_default())));
            }
            let known = m.peer_named;
            (m, known)
        }
        None => {
            let to = p.to.ok_or_else(|| Error::invalid_params("a new conversation needs to (agent://domain/agent-id)"))?;
            AgentUri::parse(&to).ok_or_else(|| Error::invalid_params(format!("to {to:?} is not an agent URI")))?;
            (open_conversation(&agent, &to)?, false)
        }
    };
    let message_id = ids::new_id("mamp");
    let mut msg = json!({
        "protocol": PROTOCOL,
        "message_id": message_id,
        "from": format!("agent://{}/{agent}", settings.domain),
        "to": mapping.peer,
        "content": content,
        "metadata": {"timestamp": ids::iso8601(ids::now_ms())},
    });
    if known {
        msg["conversation_id"] = json!(mapping.conversation_id);
    }
    // The agent's own turn, recorded as the agent (it is a participant).
    router::call("mail/turn", &json!({"conversationId": mapping.mail_conversation_id, "contentType": "data", "content": msg}))
        .map_err(|e| Error::new(e.code, format!("recording the message in mail: {}", e.message)))?;
    let mut pending =
        Pending { message: msg, agent, mail_conversation_id: mapping.mail_conversation_id.clone(), attempts: 0, timer: None, last_error: String::new() };
    // Kept, with a timer, before the first attempt: if this call dies during
    // it (its deadline), the timer tries again.
    pending.timer = timers::schedule(settings.retry_base_ms, &format!("{TIMER_PREFIX}{message_id}")).ok();
    PENDING.put(&message_id, &pending)?;
    let (status, conversation_id) = attempt(pending, &settings)?;
    Reply::json(&json!({"conversationId": conversation_id, "messageId": message_id, "status": status}))
}

/// A mail conversation the agent opens with the bridge as a participant, so
/// that the peer's answers are recorded there too.
fn open_conversation(agent: &str, peer: &str) -> Result<Mapping> {
    let params = json!({
        "subject": format!("MAMP: {peer}"),
        "initialParticipants": [{"id": "plugin:mamp", "type": "system"}],
        "metadata": {"mamp": {"peer": peer}},
    });
    let created = router::call("mail/create", &params).map_err(|e| Error::new(e.code, format!("opening a mail conversation: {}", e.message)))?;
    let mail_id = created["conversation"]["id"].as_str().ok_or_else(|| Error::internal("mail/create answered no id"))?.to_string();
    let mapping = Mapping {
        conversation_id: mail_id.clone(),
        mail_conversation_id: mail_id.clone(),
        peer: peer.to_string(),
        agent: agent.to_string(),
        created_at: ids::iso8601(ids::now_ms()),
        peer_named: false,
    };
    let mut batch = Batch::new();
    batch.put(&CONVERSATIONS, mail_id.clone(), &mapping).put(&BY_MAIL, mail_id, &mapping.conversation_id);
    batch.apply()?;
    Ok(mapping)
}

enum Failure {
    /// Worth another attempt.
    Transient(String),
    /// The peer refused it for good.
    Refused(String),
}

/// One delivery attempt; on a transient failure the message waits for a
/// retry, on a refusal or the last attempt the agent hears `message_failed`.
/// `(status, conversation id)`.
fn attempt(mut p: Pending, settings: &Settings) -> Result<(&'static str, String)> {
    p.attempts += 1;
    if p.attempts > 1 {
        metrics::count("mamp_retries_total", &[], 1);
    }
    let message_id = p.message["message_id"].as_str().unwrap_or_default().to_string();
    let result = post(&p, settings);
    // The timer that stands for this delivery goes only once its outcome is
    // recorded: a process that dies in between leaves a retry, not nothing.
    let previous = p.timer.take();
    let outcome = record(p, settings, &message_id, result);
    if let Some(t) = previous.filter(|_| outcome.is_ok()) {
        timers::cancel(t);
    }
    outcome
}

/// Record one attempt's outcome: delivered, waiting for a retry (a new
/// timer), or given up.
fn record(mut p: Pending, settings: &Settings, message_id: &str, result: Result<String, Failure>) -> Result<(&'static str, String)> {
    match result {
        Ok(peer_conversation) => {
            let id = remember(&p, &peer_conversation)?;
            PENDING.delete(message_id)?;
            metrics::count("mamp_sent_total", &[("result", "delivered")], 1);
            Ok(("sent", id))
        }
        Err(Failure::Transient(why)) if p.attempts < settings.max_attempts => {
            p.last_error = why;
            p.timer = timers::schedule(retry_delay(settings, p.attempts), &format!("{TIMER_PREFIX}{message_id}"))
                .map_err(|e| log::warn(&format!("no retry timer for {message_id}: {e}")))
                .ok();
            PENDING.put(message_id, &p)?;
            Ok(("queued", current_id(&p)))
        }
        Err(Failure::Transient(why) | Failure::Refused(why)) => {
            PENDING.delete(message_id)?;
            let data = json!({
                "messageId": message_id,
                "conversationId": current_id(&p),
                "to": p.message["to"],
                "reason": why,
                "attempts": p.attempts,
            });
            events::emit_to("message_failed", &data, std::slice::from_ref(&p.agent));
            log::warn(&format!("gave up on MAMP message {message_id} after {} attempts: {why}", p.attempts));
            metrics::count("mamp_sent_total", &[("result", "failed")], 1);
            Ok(("failed", current_id(&p)))
        }
    }
}

/// The conversation id the peer knows, or the mail one until it named its own.
fn current_id(p: &Pending) -> String {
    p.message["conversation_id"].as_str().map(String::from).unwrap_or_else(|| p.mail_conversation_id.clone())
}

/// POST to the peer of the message's `to`: the conversation id it answered.
fn post(p: &Pending, settings: &Settings) -> Result<String, Failure> {
    let to = p.message["to"].as_str().and_then(AgentUri::parse).ok_or_else(|| Failure::Refused("the message has no valid to".into()))?;
    let peer = settings.peer(&to.domain);
    let url = Url::parse(&peer.url).ok_or_else(|| Failure::Refused(format!("peer URL {:?} is not http(s)://…", peer.url)))?;
    let key = (!peer.key.is_empty()).then_some(peer.key.as_str());
    let (status, body) = http::post_json(&url, "/mamp/v1/messages", key, p.message.to_string().as_bytes()).map_err(Failure::Transient)?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match status {
        200..=299 => answer["conversation_id"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| Failure::Refused(format!("the peer answered {status} without a conversation_id"))),
        408 | 429 | 500..=599 => Err(Failure::Transient(format!("the peer answered {status}: {}", answer["message"].as_str().unwrap_or("")))),
        _ => Err(Failure::Refused(format!("the peer refused it with {status}: {}", answer["error"].as_str().unwrap_or("")))),
    }
}

/// After a delivery: the peer's conversation id maps to the mail conversation.
fn remember(p: &Pending, peer_conversation: &str) -> Result<String> {
    let Some(mut mapping) = CONVERSATIONS.get(&current_id(p))? else { return Ok(peer_conversation.to_string()) };
    if mapping.conversation_id != peer_conversation || !mapping.peer_named {
        mapping.conversation_id = peer_conversation.to_string();
        mapping.peer_named = true;
        let mut batch = Batch::new();
        batch.put(&CONVERSATIONS, peer_conversation.to_string(), &mapping).put(&BY_MAIL, mapping.mail_conversation_id.clone(), &mapping.conversation_id);
        batch.apply()?;
    }
    Ok(peer_conversation.to_string())
}

/// The wait before the next attempt, after `attempts` of them: doubling from `retryBaseMs`, at most a minute.
fn retry_delay(settings: &Settings, attempts: u32) -> u64 {
    settings.retry_base_ms.saturating_mul(1 << attempts.saturating_sub(1).min(16)).min(60_000)
}

/// A retry timer fired. The host claimed it before this call, so another
/// timer stands for the delivery while the attempt runs: a process killed
/// meanwhile leaves a retry, not nothing. Only the timer the delivery
/// names may retry it: a process killed after storing the next timer and
/// before cancelling the one before leaves both, and two nodes would
/// otherwise deliver the message twice.
pub fn retry(timer: u64, tag: &str) {
    let Some(message_id) = tag.strip_prefix(TIMER_PREFIX) else { return };
    let settings = Settings::load();
    let outcome = PENDING.get(message_id).and_then(|p| match p {
        Some(p) if p.timer.is_some_and(|t| t != timer) => {
            log::info(&format!("timer {timer} for {message_id} is stale: timer {:?} stands for the delivery", p.timer));
            Ok(())
        }
        Some(mut p) => {
            p.timer =
                timers::schedule(retry_delay(&settings, p.attempts + 1), tag).map_err(|e| log::warn(&format!("no standby timer for {message_id}: {e}"))).ok();
            PENDING.put(message_id, &p)?;
            attempt(p, &settings).map(|_| ())
        }
        None => Ok(()),
    });
    if let Err(e) = outcome {
        log::error(&format!("retrying MAMP message {message_id}: {}", e.message()));
    }
}

/// Timer ids below this were given by gateways that kept timers in memory
/// only (ids counted from 1); the host now stores timers and makes their
/// ids from the due time, far above it.
const STORED_TIMER_IDS: u64 = 1 << 40;

/// A new instance: a pending delivery whose retry timer was lost with an
/// older gateway's memory gets one again. Stored timers need nothing: they
/// fire once, on whichever node (or after whichever restart) is first.
pub fn resume() -> std::result::Result<(), String> {
    let settings = Settings::load();
    let mut lost = Vec::new();
    PENDING
        .all()
        .each(|e| {
            if e.value.timer.is_none_or(|t| t < STORED_TIMER_IDS) {
                lost.push((e.key, e.value));
            }
            Ok(true)
        })
        .map_err(|e| e.message().to_string())?;
    for (id, mut p) in lost {
        p.timer = timers::schedule(settings.retry_base_ms, &format!("{TIMER_PREFIX}{id}")).ok();
        PENDING.put(&id, &p).map_err(|e| e.message().to_string())?;
    }
    Ok(())
}
