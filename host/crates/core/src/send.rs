//! map/send's delivery: resolve the address, push `map/message` to each
//! recipient, record events, hand the message to observers.
//!
//! This is the gateway's hot path: the frame is written once, straight from
//! the request's borrowed text, and shared by every recipient.

use std::borrow::Cow;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::address::{self, Address, Sender};
use super::events::{Facets, NewEvent, Source};
use super::fabric::Delivery;
use super::federation::Outbound;
use super::model::Observed;
use super::outbox::{Frame, Full};
use super::Active;
use map_protocol::ids;
use map_protocol::rpc::{codes, push_json_str, RpcError};

/// A message to send, as JSON text where the wire gives text.
pub struct Outgoing<'a> {
    pub to: &'a RawValue,
    pub payload: Option<&'a RawValue>,
    pub meta: Option<Map<String, Value>>,
    /// Which of the session's agents sends (default: its first).
    pub from: Option<&'a str>,
    /// Nested observer calls this send comes from (0 for a client's).
    pub hops: u8,
    /// A message routed in from another system (the session is that
    /// system's gateway).
    pub remote: Option<Remote<'a>>,
}

/// A message from another system: its sender there, `<system>:agent:<id>`,
/// and the id the sender's system gave it, which it keeps here.
#[derive(Clone, Copy)]
pub struct Remote<'a> {
    pub from: &'a str,
    pub id: &'a str,
}

/// A send's result as JSON text: now, or once recipients on other cluster
/// nodes have been confirmed.
pub enum Sent {
    Now(String),
    Later(BoxFuture<'static, Result<String, RpcError>>),
}

/// How `message_sent`'s data starts: the message follows.
const MESSAGE_SENT_HEAD: &str = r#"{"message":"#;

/// What the registry says about the sender and the recipients of one send.
struct Routing {
    recipients: Vec<address::Recipient>,
    /// The sending agent, if the session has one.
    agent: Option<String>,
    role: Option<Arc<str>>,
    metadata: Option<Value>,
    /// Roles of sender and recipients, scopes concerned: for subscription filters.
    roles: Vec<Arc<str>>,
    scopes: Vec<String>,
}

fn route(active: &Active, addr: &Address, from: Option<&str>, remote_from: Option<&str>) -> Result<Routing, RpcError> {
    let reg = active.tenant.registry.lock();
    let session = reg.sessions.get(&active.session_id);
    super::permissions::may_send(session, addr)?;
    let agent = match from {
        // By the agent's owner, not the session's list (which may be very long).
        Some(a) if session.is_some() && reg.agents.get(a).is_some_and(|x| x.session == active.session_id) => Some(a.to_string()),
        Some(a) => return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Agent {a} is not owned by this session"))),
        None => session.and_then(|s| s.agents.first().cloned()),
    };
    let remote_system = remote_from.and_then(|f| f.split_once(":agent:")).map(|(system, _)| system);
    let sender = Sender {
        session: &active.session_id,
        agent: agent.as_deref(),
        participant_type: &active.participant_type,
        participant_id: &active.participant_id,
        remote_system,
    };
    let recipients = address::resolve(&reg, addr, &sender)?;
    let me = agent.as_ref().and_then(|a| reg.agents.get(a));
    let role = me.and_then(|a| a.role.clone());
    let mut roles: Vec<Arc<str>> = Vec::with_capacity(1 + recipients.len());
    roles.extend(role.clone());
    roles.extend(recipients.iter().filter_map(|r| reg.agents.get(&r.id)?.role.clone()));
    let mut scopes = Vec::new();
    if let Address::Scope(s) = addr {
        scopes.push(s.clone());
    }
    if let Some(me) = me {
        scopes.extend(me.scopes.iter().cloned());
    }
    Ok(Routing { recipients, role, metadata: me.and_then(|a| a.metadata.clone()), roles, scopes, agent })
}

/// `map/send` for a session (or a plugin acting as one): resolve, deliver,
/// record events, hand the message to interested observers. The result is
/// JSON text: `{"messageId": …, "delivered": […], "failed"?: […]}`, later
/// when a recipient's node must confirm it took the message.
pub fn send_message(active: &Active, msg: Outgoing) -> Result<Sent, RpcError> {
    if active.tenant.fabric.behind() {
        map_observe::metrics::sends_refused("event_backlog");
        // The log acknowledges within its 5 s timeout, or the backlog is given up on; a second is a fair first wait.
        return Err(RpcError::new(codes::RESOURCE_EXHAUSTED, "the cluster's event log is behind on this node's events; retry later")
            .with_data(json!({"retryAfterMs": 1000})));
    }
    let mut addr = Address::from_json(msg.to)?;
    if let Some((system, agent)) = federated_target(active, &mut addr)? {
        super::permissions::check_flag(active, "messaging.canSend")?;
        return send_to_system(active, system, agent, msg);
    }
    let remote_from = msg.remote.map(|r| r.from);
    let routing = route(active, &addr, msg.from, remote_from)?;
    let meta = msg.meta.filter(|m| !m.is_empty());
    let from = remote_from.or(routing.agent.as_deref()).unwrap_or(&active.participant_id);
    let (message_id, timestamp) = match msg.remote {
        Some(r) => (r.id.to_string(), ids::now_ms()),
        None => ids::prefixed_at("msg"),
    };
    let payload = msg.payload.map(RawValue::get);
    let (frame, sent) = message_frame(&message_id, from, msg.to.get(), timestamp, payload, meta.as_ref());
    let (mut refused, waiting) = deliver(active, &routing.recipients, frame);
    let done = Done { message_id, timestamp, sent, routing, meta, to: Cow::Borrowed(msg.to.get()), payload: payload.map(Cow::Borrowed), hops: msg.hops };
    if waiting.is_empty() {
        return done.finish(active, &refused).map(Sent::Now);
    }
    let (active, done) = (active.clone(), done.owned());
    Ok(Sent::Later(Box::pin(async move {
        for (i, delivery) in waiting {
            if delivery.await.is_err() {
                refused.push(i);
            }
        }
        done.finish(&active, &refused)
    })))
}

/// An address of an agent of another system (`{system, agent}`, or
/// `<system>:agent:<id>` when the tenant federates): that system and agent.
/// `{system, agent}` naming this system is its local agent.
fn federated_target(active: &Active, addr: &mut Address) -> Result<Option<(String, String)>, RpcError> {
    let own = active.tenant.federation().map(|f| f.system_id());
    let target = match &*addr {
        Address::Federated { system, agent } if Some(system.as_str()) == own => {
            *addr = Address::Agent(agent.clone());
            return Ok(None);
        }
        Address::Federated { system, agent } => (system.clone(), agent.clone()),
        Address::Bare(s) => match (own, s.split_once(":agent:")) {
            (Some(own), Some((system, agent))) if system != own && !system.is_empty() && !agent.is_empty() => (system.to_string(), agent.to_string()),
            _ => return Ok(None),
        },
        Address::Many(items) if items.iter().any(|a| matches!(a, Address::Federated { .. })) => {
            return Err(RpcError::invalid_params("Invalid address: an agent of another system is addressed on its own, not in a list"));
        }
        _ => return Ok(None),
    };
    Ok(Some(target))
}

/// `map/send` to an agent of another system: the federation carries it.
fn send_to_system(active: &Active, system: String, agent: String, msg: Outgoing) -> Result<Sent, RpcError> {
    let Some(fed) = active.tenant.federation() else {
        return Err(RpcError::new(codes::FEDERATION_UNAVAILABLE, format!("Federation is not configured: system {system:?} is unreachable")));
    };
    let from = {
        let reg = active.tenant.registry.lock();
        match msg.from {
            Some(a) if reg.agents.get(a).is_some_and(|x| x.session == active.session_id) => a.to_string(),
            Some(a) => return Err(RpcError::new(codes::PERMISSION_DENIED, format!("Agent {a} is not owned by this session"))),
            None => reg.sessions.get(&active.session_id).and_then(|s| s.agents.first().cloned()).unwrap_or_else(|| active.participant_id.clone()),
        }
    };
    let payload = msg.payload.map(|p| serde_json::from_str(p.get())).transpose().map_err(|e| RpcError::invalid_params(e.to_string()))?;
    let (message_id, timestamp) = ids::prefixed_at("msg");
    let carried = fed.send(Outbound { message_id, from, system, agent, payload, meta: msg.meta, timestamp });
    Ok(Sent::Later(Box::pin(async move { carried.await.map(|v| v.to_string()) })))
}

/// The `map/message` frame recipients get, written once from the request's
/// text, and `message_sent`'s data so far (`{"message":{…}`).
fn message_frame(id: &str, from: &str, to: &str, timestamp: u64, payload: Option<&str>, meta: Option<&Map<String, Value>>) -> (Frame, String) {
    let mut frame = String::with_capacity(192 + to.len() + payload.map_or(0, str::len));
    frame.push_str(r#"{"jsonrpc":"2.0","method":"map/message","params":{"message":"#);
    let message_at = frame.len();
    frame.push_str(r#"{"id":"#);
    push_json_str(&mut frame, id);
    frame.push_str(r#","from":"#);
    push_json_str(&mut frame, from);
    frame.push_str(r#","to":"#);
    frame.push_str(to);
    frame.push_str(r#","timestamp":"#);
    frame.push_str(itoa::Buffer::new().format(timestamp));
    if let Some(payload) = payload {
        frame.push_str(r#","payload":"#);
        frame.push_str(payload);
    }
    if let Some(meta) = meta {
        frame.push_str(r#","meta":"#);
        frame.push_str(&serde_json::to_string(meta).expect("meta serialises"));
    }
    frame.push('}');
    // `message_sent` carries the message as recipients saw it.
    let mut sent = String::with_capacity(frame.len() + 64);
    sent.push_str(MESSAGE_SENT_HEAD);
    sent.push_str(&frame[message_at..]);
    frame.push_str("}}");
    (Frame::from(frame), sent)
}

/// Hand the frame to each recipient's session, once per session. Returns
/// the recipients refused now, and those whose node has yet to confirm.
fn deliver(active: &Active, recipients: &[address::Recipient], frame: Frame) -> (Vec<usize>, Vec<(usize, BoxFuture<'static, Result<(), Full>>)>) {
    let fabric = &active.tenant.fabric;
    let mut frame = Some(frame);
    let mut refused: Vec<usize> = Vec::new();
    let mut waiting = Vec::new();
    // Once per session: a short list is scanned, a long one (a large scope) kept in a set.
    let many = recipients.len() > 8;
    let mut sessions: foldhash::HashSet<&str> = foldhash::HashSet::default();
    for (i, r) in recipients.iter().enumerate() {
        let repeated = if many { !sessions.insert(&r.session) } else { recipients[..i].iter().any(|p| p.session == r.session) };
        if repeated {
            continue;
        }
        // The last recipient takes the frame itself; the others share it.
        let copy = if i + 1 == recipients.len() { frame.take() } else { frame.clone() };
        match copy.map(|f| fabric.deliver_confirmed(&r.session, f)) {
            Some(Delivery::Now(Ok(()))) => {}
            Some(Delivery::Now(Err(_))) | None => refused.push(i),
            Some(Delivery::Later(done)) => waiting.push((i, done)),
        }
    }
    (refused, waiting)
}

/// Who took a send: the delivered ids as a JSON array, how many, and the ids not delivered.
struct Taken<'r> {
    delivered: String,
    count: usize,
    failed: Vec<&'r str>,
}

impl<'r> Taken<'r> {
    /// `refused`: the recipients (the first of each session) not delivered to.
    fn of(recipients: &'r [address::Recipient], refused: &[usize]) -> Taken<'r> {
        let took = |i: usize| {
            refused.is_empty() || {
                let first = recipients[..i].iter().position(|p| p.session == recipients[i].session).unwrap_or(i);
                !refused.contains(&first)
            }
        };
        let mut delivered = String::with_capacity(2 + recipients.len() * 32);
        delivered.push('[');
        let mut count = 0;
        let mut failed: Vec<&str> = Vec::new();
        for (i, r) in recipients.iter().enumerate() {
            if took(i) {
                if count > 0 {
                    delivered.push(',');
                }
                count += 1;
                push_json_str(&mut delivered, &r.id);
            } else {
                failed.push(&r.id);
            }
        }
        delivered.push(']');
        Taken { delivered, count, failed }
    }

    /// The answer to the sender.
    fn result(&self, message_id: &str) -> String {
        let mut result = String::with_capacity(64 + self.delivered.len());
        result.push_str(r#"{"messageId":"#);
        push_json_str(&mut result, message_id);
        result.push_str(r#","delivered":"#);
        result.push_str(&self.delivered);
        if !self.failed.is_empty() {
            result.push_str(r#","failed":"#);
            result.push_str(&serde_json::to_string(&self.failed).expect("ids serialise"));
        }
        result.push('}');
        result
    }
}

/// What a send needs once its deliveries are known.
struct Done<'a> {
    message_id: String,
    timestamp: u64,
    /// `message_sent`'s data so far: `{"message":{…}`.
    sent: String,
    routing: Routing,
    meta: Option<Map<String, Value>>,
    to: Cow<'a, str>,
    payload: Option<Cow<'a, str>>,
    hops: u8,
}

impl Done<'_> {
    fn owned(self) -> Done<'static> {
        Done { to: Cow::Owned(self.to.into_owned()), payload: self.payload.map(|p| Cow::Owned(p.into_owned())), ..self }
    }

    /// Record the events, tell the observers and write the result.
    /// `refused`: the recipients (the first of each session) not delivered to.
    fn finish(mut self, active: &Active, refused: &[usize]) -> Result<String, RpcError> {
        let recipients = std::mem::take(&mut self.routing.recipients);
        let taken = Taken::of(&recipients, refused);
        map_observe::metrics::messages(&active.tenant.id, taken.count, taken.failed.len());
        if taken.count == 0 && !recipients.is_empty() {
            let details = json!({"messageId": self.message_id, "failed": taken.failed});
            self.record_failure(active, &taken.failed);
            return Err(RpcError::new(
                codes::DELIVERY_FAILED,
                "No recipient could take the message (their queues are full or closed, or their node cannot be reached)",
            )
            .with_details(details));
        }
        let result = taken.result(&self.message_id);
        self.record_delivery(active, &recipients, &taken);
        Ok(result)
    }

    /// Source and facets of the send's events.
    fn event_parts(&mut self, active: &Active) -> (Source, Facets) {
        let meta_str = |key: &str| self.meta.as_ref().and_then(|m| m.get(key)).and_then(Value::as_str);
        let facets = Facets {
            source_role: self.routing.role.take(),
            roles: std::mem::take(&mut self.routing.roles),
            scopes: std::mem::take(&mut self.routing.scopes),
            priority: Some(meta_str("priority").map_or(Cow::Borrowed("normal"), |p| Cow::Owned(p.to_string()))),
            correlation_id: meta_str("correlationId").map(String::from),
            metadata: self.routing.metadata.take(),
        };
        let source = Source { agent_id: self.routing.agent.clone(), participant_id: Some(active.participant_id.clone()), scope_id: None };
        (source, facets)
    }

    /// Nobody took it: `message_sent` and `message_failed`.
    fn record_failure(mut self, active: &Active, failed: &[&str]) {
        let (source, facets) = self.event_parts(active);
        let mut sent = std::mem::take(&mut self.sent);
        sent.push_str(r#","recipients":[]}"#);
        let fabric = &active.tenant.fabric;
        fabric.publish(event("message_sent", source.clone(), sent, facets.clone()));
        let failed_json = serde_json::to_string(failed).expect("ids serialise");
        let data = format!(r#"{{"messageId":"{}","failed":{failed_json}}}"#, self.message_id);
        fabric.publish(event("message_failed", source, data, facets));
    }

    /// `message_sent` (recorded), `message_delivered` for live subscribers,
    /// then the observers.
    fn record_delivery(mut self, active: &Active, recipients: &[address::Recipient], taken: &Taken) {
        let delivered_json = taken.delivered.as_str();
        let (source, facets) = self.event_parts(active);
        let mut sent = std::mem::take(&mut self.sent);
        let message_end = sent.len();
        sent.push_str(r#","recipients":"#);
        sent.push_str(delivered_json);
        sent.push('}');
        let fabric = &active.tenant.fabric;
        if !fabric.has_subscribers() {
            // The usual case: `message_sent` is the only event and takes facets and source without copies.
            fabric.publish(event("message_sent", source, sent, facets));
        } else {
            let data = self.delivered_data(active, &sent[MESSAGE_SENT_HEAD.len()..message_end], delivered_json, facets.correlation_id.as_deref());
            fabric.publish(event("message_sent", source.clone(), sent, facets.clone()));
            fabric.publish(NewEvent { recorded: false, ..event("message_delivered", source, data, facets) });
        }
        self.observe(active, || recipients.iter().filter(|r| !taken.failed.contains(&r.id.as_str())).map(|r| r.id.clone()).collect());
    }

    /// `message_delivered`'s data. It carries the message as well: the MAP
    /// SDK's ACP stream reads the agent's answers from it.
    fn delivered_data(&self, active: &Active, message: &str, delivered: &str, correlation_id: Option<&str>) -> String {
        let from = self.routing.agent.as_deref().unwrap_or(&active.participant_id);
        let payload = self.payload.as_deref();
        let mut data = String::with_capacity(128 + 2 * delivered.len() + message.len() + payload.map_or(0, str::len));
        data.push_str(r#"{"messageId":"#);
        push_json_str(&mut data, &self.message_id);
        data.push_str(r#","from":"#);
        push_json_str(&mut data, from);
        data.push_str(r#","delivered":"#);
        data.push_str(delivered);
        data.push_str(r#","deliveredTo":"#);
        data.push_str(delivered);
        data.push_str(r#","timestamp":"#);
        data.push_str(itoa::Buffer::new().format(self.timestamp));
        if let Some(id) = correlation_id {
            data.push_str(r#","correlationId":"#);
            push_json_str(&mut data, id);
        }
        if let Some(p) = payload {
            data.push_str(r#","payload":"#);
            data.push_str(p);
        }
        data.push_str(r#","message":"#);
        data.push_str(message);
        data.push('}');
        data
    }

    /// Hand the message to the tenant's observers that want it.
    fn observe(self, active: &Active, delivered: impl FnOnce() -> Vec<String>) {
        if !active.tenant.may_observe(self.meta.is_some()) {
            return;
        }
        let plugins = active.tenant.extensions();
        let no_meta = Map::new();
        if !plugins.observes(self.meta.as_ref().unwrap_or(&no_meta)) {
            return;
        }
        let from = self.routing.agent.unwrap_or_else(|| active.participant_id.clone());
        let sent = Observed {
            id: self.message_id,
            from,
            to: self.to.into_owned(),
            timestamp: self.timestamp,
            payload: self.payload.map_or_else(|| "null".to_string(), Cow::into_owned),
            meta: Value::Object(self.meta.unwrap_or_default()),
            delivered: delivered(),
            hops: self.hops,
        };
        plugins.observe(active, &sent);
    }
}

fn event(kind: &'static str, source: Source, data: String, facets: Facets) -> NewEvent {
    NewEvent { facets, ..NewEvent::with_text(kind, source, data) }
}
