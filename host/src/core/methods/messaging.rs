//! map/send: resolve the address, push `map/message` to each recipient, record events.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::core::address::{self, Address, Sender};
use crate::core::events::{NewEvent, Source};
use crate::core::outbox::Frame;
use crate::core::{ids, Active, Out};
use crate::rpc::{codes, Request, RpcError};

struct Params {
    payload: Option<Box<RawValue>>,
    from: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendParams {
    to: Option<Value>,
    #[serde(default)]
    payload: Option<Box<RawValue>>,
    #[serde(default)]
    meta: Option<Map<String, Value>>,
    /// Which of the session's agents sends (default: its first).
    #[serde(default)]
    from: Option<String>,
}

fn push_json(out: &mut String, v: &impl serde::Serialize) {
    out.push_str(&serde_json::to_string(v).expect("values serialise"));
}

pub fn send(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: SendParams = req.params()?;
    let answer = send_message(active, p.to, p.payload, p.meta.unwrap_or_default(), p.from)?;
    Ok(Out::Raw(RawValue::from_string(answer).expect("built as JSON")))
}

/// `map/send` for a session (or a plugin acting as one): resolve, deliver,
/// record events, hand the message to interested interceptors. Returns the
/// result as JSON text: `{"messageId": …, "delivered": […], "failed"?: […]}`.
pub fn send_message(active: &Active, to: Option<Value>, payload: Option<Box<RawValue>>, meta: Map<String, Value>, from: Option<String>) -> Result<String, RpcError> {
    let to = to.ok_or_else(|| RpcError::invalid_params("`to` is required"))?;
    let addr = Address::parse(&to)?;
    let p = Params { payload, from };

    let mut facets_roles = Vec::new();
    let mut facets_scopes = Vec::new();
    let (from, sender_agent, sender_role, sender_meta, recipients) = {
        let reg = active.tenant.registry.lock();
        let session = reg.sessions.get(&active.session_id);
        let agent = match &p.from {
            Some(a) if session.is_some_and(|s| s.agents.contains(a)) => Some(a.clone()),
            Some(a) => return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Agent {a} is not owned by this session"))),
            None => session.and_then(|s| s.agents.first().cloned()),
        };
        let sender = Sender { session: &active.session_id, agent: agent.as_deref() };
        let recipients = address::resolve(&reg, &addr, &sender)?;
        for r in &recipients {
            if let Some(role) = reg.agents.get(&r.id).and_then(|a| a.role.clone()) {
                facets_roles.push(role);
            }
        }
        if let Address::Scope(s) = &addr {
            facets_scopes.push(s.clone());
        }
        let me = agent.as_ref().and_then(|a| reg.agents.get(a));
        if let Some(me) = me {
            facets_scopes.extend(me.scopes.iter().cloned());
        }
        let role = me.and_then(|a| a.role.clone());
        let metadata = me.and_then(|a| a.metadata.clone());
        let from = agent.clone().unwrap_or_else(|| active.participant_id.clone());
        (from, agent, role, metadata, recipients)
    };

    let message_id = ids::prefixed("msg");
    let timestamp = ids::now_ms();
    // The message text is built once and shared by every recipient's frame.
    let mut message = String::with_capacity(256);
    message.push_str(r#"{"id":"#);
    push_json(&mut message, &message_id);
    message.push_str(r#","from":"#);
    push_json(&mut message, &from);
    message.push_str(r#","to":"#);
    push_json(&mut message, &to);
    message.push_str(&format!(r#","timestamp":{timestamp}"#));
    if let Some(payload) = &p.payload {
        message.push_str(r#","payload":"#);
        message.push_str(payload.get());
    }
    if !meta.is_empty() {
        message.push_str(r#","meta":"#);
        push_json(&mut message, &meta);
    }
    message.push('}');
    let frame = Frame::from(format!(r#"{{"jsonrpc":"2.0","method":"map/message","params":{{"message":{message}}}}}"#));

    let mut delivered = Vec::with_capacity(recipients.len());
    let mut failed = Vec::new();
    let mut sessions_done: Vec<(&str, bool)> = Vec::with_capacity(recipients.len());
    for r in &recipients {
        // A session owning several recipients gets the message once.
        let ok = match sessions_done.iter().find(|(s, _)| *s == r.session) {
            Some((_, ok)) => *ok,
            None => {
                let ok = active.tenant.fabric.deliver(&r.session, frame.clone()).is_ok();
                sessions_done.push((&r.session, ok));
                ok
            }
        };
        if ok {
            delivered.push(r.id.as_str());
        } else {
            failed.push(r.id.as_str());
        }
    }

    let source = Source { agent_id: sender_agent, participant_id: Some(active.participant_id.clone()), scope_id: None };
    let priority = meta.get("priority").and_then(Value::as_str).unwrap_or("normal").to_string();
    let correlation = meta.get("correlationId").and_then(Value::as_str).map(String::from);
    let with_facets = |mut ev: NewEvent| {
        ev.facets.source_role = sender_role.clone();
        ev.facets.roles = sender_role.iter().cloned().chain(facets_roles.iter().cloned()).collect();
        ev.facets.scopes = facets_scopes.clone();
        ev.facets.priority = Some(priority.clone());
        ev.facets.correlation_id = correlation.clone();
        ev.facets.metadata = sender_meta.clone();
        ev
    };
    let fabric = &active.tenant.fabric;
    let delivered_json = serde_json::to_string(&delivered).expect("ids serialise");
    let sent = format!(r#"{{"message":{message},"recipients":{delivered_json}}}"#);
    fabric.publish(with_facets(NewEvent::with_text("message_sent", source.clone(), sent)));
    if delivered.is_empty() && !recipients.is_empty() {
        fabric.publish(with_facets(NewEvent::new("message_failed", source, json!({"messageId": message_id, "failed": failed}))));
        return Err(RpcError::new(codes::DELIVERY_FAILED, "No recipient could take the message (their queues are full or closed)")
            .with_details(json!({"messageId": message_id, "failed": failed})));
    }
    // `message_sent` (recorded) already lists the recipients; `message_delivered`
    // is pushed live to subscribers only, and built only when there are some.
    if fabric.has_subscribers() {
        let mut done = String::with_capacity(96 + delivered_json.len());
        done.push_str(r#"{"messageId":"#);
        push_json(&mut done, &message_id);
        done.push_str(r#","from":"#);
        push_json(&mut done, &from);
        done.push_str(r#","delivered":"#);
        done.push_str(&delivered_json);
        done.push('}');
        let mut delivered_event = with_facets(NewEvent::with_text("message_delivered", source, done));
        delivered_event.recorded = false;
        fabric.publish(delivered_event);
    }
    let plugins = active.tenant.plugins();
    if plugins.observes(&meta) {
        let sent = SentMessage {
            id: message_id.clone(),
            from: from.clone(),
            to: to.clone(),
            timestamp,
            payload: p.payload.as_ref().map(|r| r.get().to_string()).unwrap_or_else(|| "null".into()),
            meta: Value::Object(meta.clone()),
            delivered: delivered.iter().map(|d| d.to_string()).collect(),
        };
        plugins.observe(active, sent);
    }
    let mut result = String::with_capacity(64 + delivered_json.len());
    result.push_str(r#"{"messageId":"#);
    push_json(&mut result, &message_id);
    result.push_str(r#","delivered":"#);
    result.push_str(&delivered_json);
    if !failed.is_empty() {
        result.push_str(r#","failed":"#);
        push_json(&mut result, &failed);
    }
    result.push('}');
    Ok(result)
}

/// A delivered message, as interceptors see it.
#[derive(Debug, Clone)]
pub struct SentMessage {
    pub id: String,
    pub from: String,
    pub to: Value,
    pub timestamp: u64,
    /// JSON text of the payload (`null` when none).
    pub payload: String,
    pub meta: Value,
    pub delivered: Vec<String>,
}
