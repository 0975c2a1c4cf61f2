//! One tenant's fabric on a cluster node: the node's own sessions and
//! subscriptions live in a `LocalFabric`; events go through the shared log
//! and deliveries to other nodes' sessions through NATS.

use std::sync::Arc;

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::StreamExt;
use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use super::{directory, token, Cluster};
use crate::core::events::{Filter, NewEvent, StoredEvent};
use crate::core::fabric::{Fabric, FabricView, LocalFabric, ParkedSubscription, ReplayFrom, ReplayPage, ReplayQuery};
use crate::core::ids::Ulid;
use crate::core::outbox::{Frame, Full, Outbox};

/// An event for NATS, in the order made: recorded ones go to the log,
/// live-only ones on NATS core.
enum Out {
    Event(String, Bytes),
    Live(String, Bytes),
    /// Answer once everything before has been appended (a graceful stop).
    Flush(std::sync::mpsc::Sender<()>),
}

/// Largest batch in one NATS message (bytes): deliveries to one node, or
/// recorded events of one tenant (one log entry holds the batch).
const BATCH_BYTES: usize = 256 << 10;

/// The header naming the gateway process that published an event: it holds
/// the event aside when made and confirms it when the log gives it back.
const INSTANCE: &str = "Map-Instance";

/// A subscription's position, as the directory keeps it for a resume elsewhere.
#[derive(serde::Serialize, serde::Deserialize, Clone)]
pub struct Checkpoint {
    pub session: String,
    pub filter: Filter,
    pub sequence: u64,
    /// The last event sent (or the newest logged when it began; none: the log was empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
    /// Its events are held (`map/subscriptions/pause`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

impl Checkpoint {
    /// Whether it names the same position and pause (a subscription's filter never changes).
    fn same_place(&self, other: &Checkpoint) -> bool {
        self.sequence == other.sequence && self.last == other.last && self.paused == other.paused
    }
}

pub struct ClusterFabric {
    local: LocalFabric,
    node: Arc<str>,
    /// This tenant's subjects: the log's and the live events'.
    log_subject: String,
    live_subject: String,
    /// `<name>.dl.` (a node name follows).
    deliver_prefix: String,
    tenant_token: String,
    /// This process (a node restarted under its name is another instance).
    instance: Arc<str>,
    /// Events, to the event publisher.
    out: mpsc::UnboundedSender<Out>,
    /// Deliveries to other nodes (`<node subject>`, entry): a publisher of
    /// their own, so they never wait behind the log.
    deliveries: mpsc::UnboundedSender<(String, Vec<u8>)>,
    /// Sessions served by other nodes → their node.
    pub(super) routes: RwLock<foldhash::HashMap<String, Arc<str>>>,
    /// Checkpoints of subscriptions of other nodes' sessions, by session.
    pub(super) parked: Mutex<foldhash::HashMap<String, Vec<(String, Checkpoint)>>>,
    /// Other nodes' agents as last mirrored (`directory::essence`).
    pub(super) applied: Mutex<foldhash::HashMap<String, Vec<u8>>>,
    presence: Arc<super::Presence>,
    /// Another live node has subscriptions in this tenant (from its beats).
    remote_interest: std::sync::atomic::AtomicBool,
}

impl ClusterFabric {
    pub(super) fn new(cluster: &Arc<Cluster>, tenant: &str) -> Arc<ClusterFabric> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (dtx, drx) = mpsc::unbounded_channel();
        let t = token(tenant);
        let fabric = Arc::new(ClusterFabric {
            local: LocalFabric::new(cluster.replay_events, cluster.replay_bytes),
            node: cluster.node.clone(),
            log_subject: cluster.subject("ev", &t),
            live_subject: cluster.subject("live", &t),
            deliver_prefix: cluster.subject("dl", ""),
            tenant_token: t,
            instance: cluster.instance.clone(),
            out: tx,
            deliveries: dtx,
            routes: RwLock::default(),
            parked: Mutex::default(),
            applied: Mutex::default(),
            presence: cluster.presence.clone(),
            remote_interest: std::sync::atomic::AtomicBool::new(false),
        });
        tokio::spawn(publish_events(cluster.client.clone(), cluster.js.clone(), cluster.instance.clone(), rx));
        tokio::spawn(publish_deliveries(cluster.client.clone(), drx));
        fabric
    }

    /// Read this tenant's log from its start (what the stream still holds)
    /// and then as it grows; live-only events too. Returns once the log is
    /// read up to now.
    pub(super) async fn spawn_log_reader(self: &Arc<Self>, cluster: &Arc<Cluster>, tenant: &str) -> anyhow::Result<()> {
        let fabric = self.clone();
        let tenant = tenant.to_string();
        let read = move |msg: &jetstream::Message| {
            let mine = fabric.is_mine(msg.headers.as_ref());
            match serde_json::from_slice::<Vec<StoredEvent>>(&msg.payload) {
                // Ours were kept aside when made; now they take their place in the shared order.
                Ok(batch) if mine => batch.iter().for_each(|stored| fabric.local.confirm(&stored.id)),
                Ok(batch) => batch.into_iter().for_each(|stored| fabric.local.ingest(stored, true)),
                Err(e) => tracing::warn!(tenant = %tenant, error = %e, "an unreadable entry in the cluster's event log"),
            }
        };
        let stream = format!("{}_events", cluster.name);
        super::follow(&cluster.js, &stream, self.log_subject.clone(), jetstream::consumer::DeliverPolicy::All, "the cluster's event log", read).await?;
        let mut live = cluster.client.subscribe(self.live_subject.clone()).await?;
        let fabric = self.clone();
        tokio::spawn(async move {
            while let Some(msg) = live.next().await {
                if fabric.is_mine(msg.headers.as_ref()) {
                    continue;
                }
                if let Ok(batch) = serde_json::from_slice::<Vec<StoredEvent>>(&msg.payload) {
                    batch.into_iter().for_each(|stored| fabric.local.ingest(stored, false));
                }
            }
        });
        Ok(())
    }

    /// Save the positions of this node's subscriptions every checkpoint
    /// interval; what is saved is the position one interval earlier, so a
    /// frame still queued for a slow connection is sent again after a
    /// resume elsewhere rather than skipped.
    pub(super) fn spawn_checkpoints(self: &Arc<Self>, cluster: &Arc<Cluster>) {
        let fabric = Arc::downgrade(self);
        let dir = directory::Writer::new(cluster);
        let every = cluster.checkpoint;
        let tenant = self.tenant_token.clone();
        tokio::spawn(async move {
            let mut previous: foldhash::HashMap<String, Checkpoint> = Default::default();
            let mut starts: foldhash::HashMap<String, Checkpoint> = Default::default();
            let mut saved: foldhash::HashMap<String, Checkpoint> = Default::default();
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(fabric) = fabric.upgrade() else { return };
                let current: foldhash::HashMap<String, Checkpoint> = fabric
                    .local
                    .inspect()
                    .subscriptions
                    .into_iter()
                    .map(|s| {
                        starts.entry(s.id.clone()).or_insert_with(|| Checkpoint { session: s.session_id.clone(), filter: s.filter.clone(), sequence: 0, last: s.start_event_id, paused: false });
                        (s.id, Checkpoint { session: s.session_id, filter: s.filter, sequence: s.sequence, last: s.last_event_id, paused: s.paused })
                    })
                    .collect();
                drop(fabric);
                starts.retain(|id, _| current.contains_key(id));
                // Save the previous tick's positions (a new subscription's
                // start), with the pause as it is now.
                for (id, now) in &current {
                    let Some(mut at) = previous.get(id).or_else(|| starts.get(id)).cloned() else { continue };
                    at.paused = now.paused;
                    if !saved.get(id).is_some_and(|s| s.same_place(&at)) {
                        let key = directory::key(&tenant, directory::SUBSCRIPTION, id);
                        let body = serde_json::to_vec(&at).expect("checkpoints serialise");
                        if dir.put(&key, Some(body.into())).await.is_ok() {
                            saved.insert(id.clone(), at);
                        }
                    }
                }
                let gone: Vec<String> = saved.keys().filter(|id| !current.contains_key(*id)).cloned().collect();
                for id in gone {
                    let _ = dir.put(&directory::key(&tenant, directory::SUBSCRIPTION, &id), None).await;
                    saved.remove(&id);
                }
                previous = current;
            }
        });
    }

    pub(super) fn tenant_token(&self) -> &str {
        &self.tenant_token
    }

    pub(super) fn has_local_subscribers(&self) -> bool {
        self.local.has_subscribers()
    }

    pub(super) fn set_remote_interest(&self, any: bool) {
        self.remote_interest.store(any, std::sync::atomic::Ordering::Relaxed);
    }

    fn remote_interest(&self) -> bool {
        self.remote_interest.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Wait (at most `within`) until the events made so far are in the log.
    pub(super) fn flush(&self, within: std::time::Duration) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.out.send(Out::Flush(done)).is_ok() {
            let _ = tokio::task::block_in_place(|| wait.recv_timeout(within));
        }
    }

    /// Whether this process published a message (and so has fanned it out).
    fn is_mine(&self, headers: Option<&async_nats::HeaderMap>) -> bool {
        headers.and_then(|h| h.get(INSTANCE)).is_some_and(|v| v.as_str() == &*self.instance)
    }

    /// A delivery from another node, for a session served here.
    fn deliver_here(&self, session: &str, frame: Frame) {
        if let Err(e) = self.local.deliver(session, frame) {
            tracing::debug!(session, ?e, "a delivery from another node was not taken");
        }
    }
}

/// Append a tenant's recorded events to the log and send its live-only
/// ones, in order. What is queued together goes as one message (a JSON
/// array): the log takes far fewer messages than events, and appends are
/// pipelined, their acknowledgements awaited alongside.
async fn publish_events(client: async_nats::Client, js: jetstream::Context, instance: Arc<str>, mut rx: mpsc::UnboundedReceiver<Out>) {
    let mut acks = futures_util::stream::FuturesUnordered::new();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(INSTANCE, &*instance);
    let mut pending: Option<(bool, String, Vec<u8>)> = None;
    loop {
        tokio::select! {
            next = rx.recv() => {
                let Some(first) = next else { break };
                let mut next = Some(first);
                while let Some(out) = next.take().or_else(|| rx.try_recv().ok()) {
                    let (recorded, subject, body) = match out {
                        Out::Event(s, b) => (true, s, b),
                        Out::Live(s, b) => (false, s, b),
                        Out::Flush(done) => {
                            if let Some(batch) = pending.take() {
                                send_events(&client, &js, &headers, &mut acks, batch).await;
                            }
                            while let Some(result) = acks.next().await {
                                if let Err(e) = result {
                                    tracing::error!(error = %e, "the cluster's event log refused events");
                                }
                            }
                            let _ = done.send(());
                            continue;
                        }
                    };
                    match &mut pending {
                        Some((r, s, batch)) if *r == recorded && *s == subject && batch.len() + body.len() < BATCH_BYTES => {
                            batch.push(b',');
                            batch.extend_from_slice(&body);
                        }
                        _ => {
                            if let Some(done) = pending.take() {
                                send_events(&client, &js, &headers, &mut acks, done).await;
                            }
                            let mut batch = Vec::with_capacity(body.len() * 4);
                            batch.push(b'[');
                            batch.extend_from_slice(&body);
                            pending = Some((recorded, subject, batch));
                        }
                    }
                }
                if let Some(done) = pending.take() {
                    send_events(&client, &js, &headers, &mut acks, done).await;
                }
            }
            Some(done) = acks.next(), if !acks.is_empty() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "the cluster's event log refused events");
                }
            }
        }
    }
}

type Acks = futures_util::stream::FuturesUnordered<<jetstream::context::PublishAckFuture as std::future::IntoFuture>::IntoFuture>;

async fn send_events(client: &async_nats::Client, js: &jetstream::Context, headers: &async_nats::HeaderMap, acks: &mut Acks, (recorded, subject, mut batch): (bool, String, Vec<u8>)) {
    batch.push(b']');
    if recorded {
        match js.publish_with_headers(subject, headers.clone(), batch.into()).await {
            Ok(ack) => acks.push(std::future::IntoFuture::into_future(ack)),
            Err(e) => tracing::error!(error = %e, "appending to the cluster's event log failed"),
        }
        // Bound the appends in flight.
        while acks.len() > 1024 {
            if let Some(Err(e)) = acks.next().await {
                tracing::error!(error = %e, "the cluster's event log refused events");
            }
        }
    } else if let Err(e) = client.publish_with_headers(subject, headers.clone(), batch.into()).await {
        tracing::warn!(error = %e, "publishing to NATS failed");
    }
}

/// Send deliveries to other nodes; those queued together for one node go
/// in one message.
async fn publish_deliveries(client: async_nats::Client, mut rx: mpsc::UnboundedReceiver<(String, Vec<u8>)>) {
    let mut batches: Vec<(String, Vec<u8>)> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some((subject, entry)) = next.take().or_else(|| rx.try_recv().ok()) {
            match batches.iter_mut().find(|(s, b)| *s == subject && b.len() + entry.len() <= BATCH_BYTES) {
                Some((_, body)) => body.extend_from_slice(&entry),
                None => batches.push((subject, entry)),
            }
            if batches.len() > 64 {
                break;
            }
        }
        for (subject, body) in batches.drain(..) {
            if let Err(e) = client.publish(subject, body.into()).await {
                tracing::warn!(error = %e, "publishing to NATS failed");
            }
        }
    }
}

/// Deliveries from other nodes: entries of `<tenant token> <session> <length>\n<frame>`.
pub(super) async fn spawn_deliveries(cluster: &Arc<Cluster>) -> anyhow::Result<()> {
    let mut sub = cluster.client.subscribe(cluster.subject("dl", &cluster.node)).await?;
    let fabrics: foldhash::HashMap<String, Arc<ClusterFabric>> = cluster.fabrics.lock().iter().map(|(_, f)| (f.tenant_token.clone(), f.clone())).collect();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let mut rest = &msg.payload[..];
            while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
                let Ok(head) = std::str::from_utf8(&rest[..nl]) else { break };
                let mut parts = head.split(' ');
                let (Some(tenant), Some(session), Some(Ok(len))) = (parts.next(), parts.next(), parts.next().map(str::parse::<usize>)) else {
                    tracing::warn!(head, "an unreadable delivery from another node");
                    break;
                };
                let Some(frame) = rest.get(nl + 1..nl + 1 + len) else { break };
                if let (Some(f), Ok(frame)) = (fabrics.get(tenant), std::str::from_utf8(frame)) {
                    f.deliver_here(session, Frame::from(frame.to_string()));
                }
                rest = &rest[nl + 1 + len..];
            }
        }
    });
    Ok(())
}

impl Fabric for ClusterFabric {
    fn join(&self, session: &str, outbox: Arc<Outbox>) {
        self.routes.write().remove(session);
        self.local.join(session, outbox)
    }

    fn leave(&self, session: &str) {
        self.local.leave(session)
    }

    fn deliver(&self, session: &str, frame: Frame) -> Result<(), Full> {
        match self.local.deliver(session, frame.clone()) {
            Err(Full::Closed) => {}
            done => return done,
        }
        let Some(node) = self.routes.read().get(session).cloned() else {
            tracing::debug!(session, "no route to the session");
            return Err(Full::Closed);
        };
        if !self.presence.alive(&node) {
            tracing::debug!(session, node = %node, "the session's node is not alive");
            return Err(Full::Closed);
        }
        let text = frame.as_str();
        let mut entry = Vec::with_capacity(self.tenant_token.len() + session.len() + text.len() + 24);
        entry.extend_from_slice(self.tenant_token.as_bytes());
        entry.push(b' ');
        entry.extend_from_slice(session.as_bytes());
        entry.push(b' ');
        entry.extend_from_slice(itoa::Buffer::new().format(text.len()).as_bytes());
        entry.push(b'\n');
        entry.extend_from_slice(text.as_bytes());
        let subject = format!("{}{node}", self.deliver_prefix);
        self.deliveries.send((subject, entry)).map_err(|_| Full::Closed)
    }

    /// A recorded event goes to the shared log, and every node (this one
    /// too) fans it out when it reads it back, so subscriptions everywhere
    /// see one order (and a subscription resumed on another node goes on
    /// from the same place). Until then `map/replay` here lists it already.
    /// A live-only event is fanned out here at once.
    fn publish(&self, event: NewEvent) -> Ulid {
        let (id, ts) = self.local.next_id();
        let body: Bytes = serde_json::to_vec(&StoredEvent::of(id.as_str(), ts, &event)).expect("events serialise").into();
        if event.recorded {
            self.local.hold(id, ts, event);
            let _ = self.out.send(Out::Event(self.log_subject.clone(), body));
            return id;
        }
        if self.remote_interest() {
            let _ = self.out.send(Out::Live(self.live_subject.clone(), body));
        }
        self.local.record_at(id, ts, event);
        id
    }

    /// Subscribers here, or on another node (as its last beat said).
    fn has_subscribers(&self) -> bool {
        self.local.has_subscribers() || self.remote_interest()
    }

    fn subscribe(&self, session: &str, filter: Filter, from: Option<ReplayFrom>) -> String {
        let first = !self.local.has_subscribers();
        let id = self.local.subscribe(session, filter, from);
        if first {
            // Tell the other nodes now rather than at the next beat.
            self.presence.beat_now.notify_one();
        }
        id
    }

    fn unsubscribe(&self, session: &str, subscription: &str) -> bool {
        self.local.unsubscribe(session, subscription)
    }

    fn pause(&self, session: &str, subscription: &str, paused: bool) -> bool {
        self.local.pause(session, subscription, paused)
    }

    fn replay(&self, query: &ReplayQuery) -> ReplayPage {
        self.local.replay(query)
    }

    fn inspect(&self) -> FabricView {
        self.local.inspect()
    }

    fn adopt_subscription(&self, session: &str, sub: ParkedSubscription) {
        let first = !self.local.has_subscribers();
        self.local.adopt_subscription(session, sub);
        if first {
            self.presence.beat_now.notify_one();
        }
    }

    fn home_is_gone(&self, node: &str, session: &str) -> bool {
        // A session of this node's previous run is gone too.
        !self.presence.alive(node) || (node == &*self.node && !self.local.serves(session))
    }

    fn parked_subscriptions(&self, session: &str) -> Vec<ParkedSubscription> {
        let parked = self.parked.lock().remove(session).unwrap_or_default();
        parked
            .into_iter()
            .map(|(id, c)| ParkedSubscription {
                id,
                filter: c.filter,
                sequence: c.sequence,
                from: match c.last {
                    Some(last) => ReplayFrom::EventId(last),
                    None => ReplayFrom::Timestamp(0),
                },
                paused: c.paused,
            })
            .collect()
    }
}
