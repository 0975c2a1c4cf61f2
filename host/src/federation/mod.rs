//! MAP federation: a tenant is a *system* with an id, connected to peer
//! systems (other gateways, other organisations) over MAP itself.
//!
//! - `inbound`: a peer's gateway session here: `map/federation/connect`
//!   (authentication, in one request or after an `authRequired` challenge)
//!   and `map/federation/route` (loop checks, delivery to an exposed agent,
//!   or on to another peer).
//! - `link`: this gateway's connection to each peer with an endpoint: a
//!   `gateway` participant there, reconnected with backoff; it carries the
//!   queued messages in order, mirrors the peer's exposed agents, and
//!   re-emits the event types imported from it.
//! - `outbox`: messages waiting for a peer, in the store (bounded).
//! - `replies`: the local agents a peer may answer, though they are not
//!   shown to it (they wrote to it lately), in the store.
//!
//! What a peer sees of this system is its `expose` setting, nothing else;
//! it reaches those agents, and the ones that wrote to it.

mod inbound;
mod link;
mod outbox;
mod replies;
mod tokens;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};

use crate::acp::wss::Trust;
use map_config::{FederationConfig, PeerConfig};
use map_core::events::{NewEvent, Source};
use map_core::federation::{Exposure, Federation, Outbound, Shown};
use map_core::{Active, Gateway, Tenant};
use map_protocol::rpc::{codes, RpcError};
use map_store::Store;
use outbox::{Entry, Outbox};
use replies::{Registration, Replies};

/// How long a send waits for the peer's answer before it reports `queued`.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);
/// Message ids remembered per peer, so a message sent again after a
/// reconnect is delivered once.
const SEEN: usize = 10_000;

/// The latest `SEEN` message ids: a set to look them up, their order to forget the oldest.
#[derive(Default)]
struct Recent {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl Recent {
    fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    fn note(&mut self, id: &str) {
        if !self.ids.insert(id.to_string()) {
            return;
        }
        self.order.push_back(id.to_string());
        if self.order.len() > SEEN {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
    }
}

/// One peer system, as this tenant knows it.
struct Peer {
    config: PeerConfig,
    exposure: Exposure,
    /// The peer's gateway session here, once it has connected.
    inbound: Mutex<Option<String>>,
    outbox: Outbox,
    /// Local agents that wrote to the peer, which it may answer.
    replies: Replies,
    /// New messages were queued.
    wake: Notify,
    /// Sends waiting to hear the peer's answer, by message id.
    waiting: Mutex<HashMap<String, oneshot::Sender<Result<Value, RpcError>>>>,
    /// The peer's exposed agents, as this tenant lists them.
    mirror: Mutex<Vec<Value>>,
    /// Ids of messages from the peer delivered here lately.
    seen: Mutex<Recent>,
    /// The certificates its `wss://` endpoint is checked against.
    trust: Option<Trust>,
    /// Whether the link to the peer is up.
    linked: std::sync::atomic::AtomicBool,
    /// Recipients (a message's `to` as JSON text) of held messages the peer
    /// refused for want of their agent, with when it first did.
    refused: Mutex<HashMap<String, u64>>,
    /// The resume token of this gateway's session at the peer: a new link
    /// takes the session (and its subscriptions) up again.
    resume: Mutex<Option<String>>,
    /// Routes the peer may still make now, and when that was counted.
    allowance: Mutex<(f64, std::time::Instant)>,
}

/// A tenant as a system.
pub struct System {
    /// Itself, for the work it hands to tasks.
    me: Weak<System>,
    config: FederationConfig,
    tenant: Weak<Tenant>,
    gateway: Weak<Gateway>,
    peers: HashMap<String, Arc<Peer>>,
}

fn exposure(p: &PeerConfig) -> Exposure {
    match p.expose.agents.as_str() {
        "all" => Exposure::All,
        "tagged" => Exposure::Tagged(p.expose.tags.clone()),
        _ => Exposure::Nothing,
    }
}

/// What a peer's `wss://` endpoint is checked against: its CA file, or the system's roots.
fn trust(p: &PeerConfig) -> anyhow::Result<Option<Trust>> {
    if !p.endpoint.starts_with("wss://") {
        return Ok(None);
    }
    let ca_file = Some(p.ca_file.as_path()).filter(|f| !f.as_os_str().is_empty());
    Trust::new(ca_file).map(Some).map_err(|e| anyhow::anyhow!("federation peer {}: {e:#}", p.system_id))
}

/// Make every federating tenant a system and start its links to peers.
pub async fn start(gateway: &Arc<Gateway>, db: &Store) -> anyhow::Result<()> {
    for t in &gateway.config.tenants {
        let Some(config) = &t.federation else { continue };
        let tenant = gateway.tenants.get(&t.id).ok_or_else(|| anyhow::anyhow!("tenant {} is not running", t.id))?;
        let mut peers = HashMap::new();
        for p in &config.peers {
            let outbox = Outbox::open(db.clone(), &t.id, &p.system_id, config.buffer_messages, config.buffer_bytes)
                .await
                .map_err(|e| anyhow::anyhow!("reading the federation outbox of {}: {e}", p.system_id))?;
            let replies = Replies::open(db.clone(), &t.id, &p.system_id, config.reply_window_secs)
                .await
                .map_err(|e| anyhow::anyhow!("reading the reply grants of {}: {e}", p.system_id))?;
            let peer = Peer {
                config: p.clone(),
                exposure: exposure(p),
                inbound: Mutex::new(None),
                outbox,
                replies,
                trust: trust(p)?,
                wake: Notify::new(),
                waiting: Mutex::new(HashMap::new()),
                mirror: Mutex::new(Vec::new()),
                seen: Mutex::new(Recent::default()),
                linked: Default::default(),
                refused: Mutex::new(HashMap::new()),
                resume: Mutex::new(None),
                allowance: Mutex::new((f64::from(config.routes_per_second), std::time::Instant::now())),
            };
            peers.insert(p.system_id.clone(), Arc::new(peer));
        }
        let system =
            Arc::new_cyclic(|me| System { me: me.clone(), config: config.clone(), tenant: Arc::downgrade(&tenant), gateway: Arc::downgrade(gateway), peers });
        tenant.set_federation(system.clone());
        for peer in system.peers.values().filter(|p| !p.config.endpoint.is_empty()) {
            tokio::spawn(link::keep(Arc::downgrade(&system), peer.clone()));
        }
        tracing::info!(tenant = t.id, system = config.system_id, peers = system.peers.len(), "federation started");
    }
    Ok(())
}

impl System {
    /// Record an event of the federation in this tenant.
    fn emit(&self, event_type: &'static str, data: Value) {
        if let Some(t) = self.tenant.upgrade() {
            let source = Source { agent_id: None, participant_id: Some(format!("system:{}", self.config.system_id)), scope_id: None };
            t.emit(NewEvent::new(event_type, source, data));
        }
    }

    fn peer(&self, system: &str) -> Result<&Arc<Peer>, RpcError> {
        self.peers
            .get(system)
            .ok_or_else(|| RpcError::new(codes::FEDERATION_SYSTEM_NOT_FOUND, format!("System {system:?} is not a peer of system {}", self.config.system_id)))
    }

    /// The local agent `from` wrote to `peer`: the peer may answer it for a
    /// while. Without a grant (the store failed, or the peer's grants are at
    /// their limit) the message still goes; only an answer would be refused.
    async fn grant_reply(&self, peer: &Peer, from: &str) {
        let Some(who) = self.tenant.upgrade().and_then(|t| t.registry.lock().agents.get(from).map(Registration::of)) else { return };
        match peer.replies.grant(&who).await {
            Ok(granted) if granted || self.config.reply_window_secs == 0 => {}
            Ok(_) => tracing::warn!(
                system = self.config.system_id,
                peer = peer.config.system_id,
                agent = from,
                "reply grants for this peer are at their limit: the peer cannot answer this agent"
            ),
            Err(e) => {
                tracing::warn!(system = self.config.system_id, peer = peer.config.system_id, agent = from, error = %e, "storing a reply grant failed: the peer cannot answer this agent")
            }
        }
    }

    /// Queue an envelope for a peer and wait (a while) for its answer:
    /// `{routed, messageId, queued?}` plus what the peer said.
    async fn carry(&self, peer: &Arc<Peer>, message_id: String, envelope: Value) -> Result<Value, RpcError> {
        let (tx, rx) = oneshot::channel();
        peer.waiting.lock().insert(message_id.clone(), tx);
        let entry = Entry { envelope, queued_at: map_protocol::ids::now_ms() };
        if let Err(why) = peer.outbox.push(&entry).await {
            peer.waiting.lock().remove(&message_id);
            return Err(RpcError::new(codes::FEDERATION_UNAVAILABLE, format!("System {} cannot take more messages now: {why}", peer.config.system_id)));
        }
        peer.wake.notify_one();
        let linked = peer.linked.load(std::sync::atomic::Ordering::Acquire);
        match tokio::time::timeout(if linked { ANSWER_WITHIN } else { std::time::Duration::ZERO }, rx).await {
            Ok(Ok(answer)) => answer,
            _ => {
                peer.waiting.lock().remove(&message_id);
                Ok(json!({"routed": false, "messageId": message_id, "queued": true}))
            }
        }
    }
}

impl Federation for System {
    fn system_id(&self) -> &str {
        &self.config.system_id
    }

    fn connect(&self, active: &Active, params: Value) -> BoxFuture<'static, Result<Value, RpcError>> {
        let answer = inbound::connect(self, active, params);
        Box::pin(async move { answer })
    }

    fn route(&self, active: &Active, params: Value) -> BoxFuture<'static, Result<Value, RpcError>> {
        let (me, active) = (self.me.upgrade(), active.clone());
        Box::pin(async move {
            let me = me.ok_or_else(|| RpcError::new(codes::FEDERATION_UNAVAILABLE, "Federation is stopping"))?;
            inbound::route(&me, &active, params).await
        })
    }

    fn send(&self, m: Outbound) -> BoxFuture<'static, Result<Value, RpcError>> {
        let me = self.me.upgrade();
        Box::pin(async move {
            let system = me.ok_or_else(|| RpcError::new(codes::FEDERATION_UNAVAILABLE, "Federation is stopping"))?;
            let peer = system.peer(&m.system)?.clone();
            let message = json!({"id": m.message_id, "from": m.from, "to": {"agent": m.agent}, "timestamp": m.timestamp, "payload": m.payload, "meta": m.meta});
            let envelope = json!({"payload": message, "federation": {
                "sourceSystem": system.config.system_id, "targetSystem": m.system, "hopCount": 0,
                "maxHops": system.config.max_hops, "path": [system.config.system_id], "originTimestamp": m.timestamp,
            }});
            system.grant_reply(&peer, &m.from).await;
            let answer = system.carry(&peer, m.message_id.clone(), envelope).await?;
            let mut result = json!({"messageId": m.message_id, "delivered": []});
            if answer["routed"] == true {
                result["delivered"] = json!([format!("{}:agent:{}", m.system, m.agent)]);
            } else if answer["queued"] == true {
                result["queued"] = json!(true);
            }
            Ok(result)
        })
    }

    fn shown_to(&self, principal: &str) -> Option<Shown> {
        let peer = self.peers.values().find(|p| p.config.principal == principal)?;
        let mut events = peer.config.expose.events.clone();
        // Agents' comings and goings, where every agent is shown anyway.
        if peer.exposure == Exposure::All {
            events.extend(["agent_registered", "agent_unregistered", "agent_updated"].map(String::from));
        }
        Some(Shown { agents: peer.exposure.clone(), scopes: peer.config.expose.scopes.clone(), events })
    }

    fn remote_agents(&self) -> Vec<Value> {
        self.peers.values().flat_map(|p| p.mirror.lock().clone()).collect()
    }

    fn session_closed(&self, session: &str) {
        for p in self.peers.values() {
            let mut inbound = p.inbound.lock();
            if inbound.as_deref() == Some(session) {
                *inbound = None;
                drop(inbound);
                self.emit("federation_disconnected", json!({"systemId": p.config.system_id, "direction": "inbound", "reason": "its session closed"}));
            }
        }
    }
}
