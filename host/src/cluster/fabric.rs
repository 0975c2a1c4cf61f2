//! One tenant's fabric on a cluster node: the node's own sessions and
//! subscriptions live in a `LocalFabric`; events go through the shared log
//! and deliveries to other nodes' sessions through NATS.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::StreamExt;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};

use super::{directory, token, Cluster};
use crate::core::events::{Filter, NewEvent, StoredEvent};
use crate::core::fabric::{Delivery, Fabric, FabricView, LocalFabric, ParkedSubscription, ReplayFrom, ReplayPage, ReplayQuery};
use crate::ids::Ulid;
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

/// How long a node has to say it took a delivery: after that the recipient
/// counts as not delivered (the message may still arrive).
const CONFIRM_WITHIN: Duration = Duration::from_secs(2);

/// What the receiving node answers for each entry of a delivery, in order.
const TAKEN: u8 = b'+';
const BACKLOGGED: u8 = b'f';
const CLOSED: u8 = b'x';

/// One frame for a session on another node, and who waits to hear whether
/// that node took it.
struct Handoff {
    subject: String,
    entry: Vec<u8>,
    taken: Option<oneshot::Sender<Result<(), Full>>>,
}

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
    me: Weak<ClusterFabric>,
    local: LocalFabric,
    node: Arc<str>,
    /// For the state of this node's NATS connection.
    client: async_nats::Client,
    /// The directory stream, for a session's newest record, and its subjects' prefix (`<name>.dir.`).
    dir: jetstream::stream::Stream,
    dir_prefix: String,
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
    /// Deliveries to other nodes: a publisher of their own, so they never
    /// wait behind the log.
    deliveries: mpsc::UnboundedSender<Handoff>,
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
        let fabric = Arc::new_cyclic(|me| ClusterFabric {
            me: me.clone(),
            local: LocalFabric::new(cluster.replay_events, cluster.replay_bytes),
            node: cluster.node.clone(),
            client: cluster.client.clone(),
            dir: cluster.dir.clone(),
            dir_prefix: cluster.subject("dir", ""),
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
    fn deliver_here(&self, session: &str, frame: Frame) -> Result<(), Full> {
        let done = self.local.deliver(session, frame);
        if let Err(e) = done {
            tracing::debug!(session, ?e, "a delivery from another node was not taken");
        }
        done
    }

    fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// A frame as an entry of a delivery to another node: `<tenant token> <session> <length>\n<frame>`.
    fn entry(&self, session: &str, frame: &Frame) -> Vec<u8> {
        let text = frame.as_str();
        let mut entry = Vec::with_capacity(self.tenant_token.len() + session.len() + text.len() + 24);
        entry.extend_from_slice(self.tenant_token.as_bytes());
        entry.push(b' ');
        entry.extend_from_slice(session.as_bytes());
        entry.push(b' ');
        entry.extend_from_slice(itoa::Buffer::new().format(text.len()).as_bytes());
        entry.push(b'\n');
        entry.extend_from_slice(text.as_bytes());
        entry
    }

    /// The node this node's copy of the directory says serves a session, if it is alive.
    fn route(&self, session: &str) -> Option<Arc<str>> {
        let node = self.routes.read().get(session).cloned();
        node.filter(|n| *n != self.node && self.presence.alive(n))
    }

    /// Hand an entry to `node`; the answer says whether that node took it.
    fn hand_to(&self, node: &str, entry: Vec<u8>) -> impl std::future::Future<Output = Result<(), Full>> + Send + 'static {
        let (taken, answer) = oneshot::channel();
        let queued = self.deliveries.send(Handoff { subject: format!("{}{node}", self.deliver_prefix), entry, taken: Some(taken) }).is_ok();
        async move {
            match tokio::time::timeout(CONFIRM_WITHIN, answer).await {
                Ok(Ok(done)) if queued => done,
                _ => Err(Full::Closed),
            }
        }
    }

    /// The session was not where this node's copy of the directory said,
    /// or that node is gone: its newest record in the shared directory
    /// says where it is now (it may have just resumed on another node).
    async fn deliver_by_newest(&self, session: &str, tried: Option<Arc<str>>, frame: Frame) -> Result<(), Full> {
        let subject = format!("{}{}", self.dir_prefix, directory::key(&self.tenant_token, directory::SESSION, session));
        let home = directory::home_of(&self.dir, &subject).await.ok_or(Full::Closed)?;
        if tried.as_deref() == Some(&*home) {
            return Err(Full::Closed);
        }
        if home == self.node {
            return self.local.deliver(session, frame);
        }
        if !self.presence.alive(&home) {
            return Err(Full::Closed);
        }
        self.routes.write().insert(session.to_string(), home.clone());
        self.hand_to(&home, self.entry(session, &frame)).await
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

/// Send deliveries to other nodes, those queued together for one node in
/// one message, and pass on each node's answer: which entries it took.
/// No answer in time, or no node listening, is a delivery not made.
async fn publish_deliveries(client: async_nats::Client, mut rx: mpsc::UnboundedReceiver<Handoff>) {
    type Waiting = Vec<Option<oneshot::Sender<Result<(), Full>>>>;
    let inbox = client.new_inbox();
    let mut answers = match client.subscribe(format!("{inbox}.*")).await {
        Ok(sub) => sub,
        Err(e) => {
            tracing::error!(error = %e, "subscribing to the answers of other nodes failed: deliveries to them will all fail");
            while let Some(h) = rx.recv().await {
                if let Some(t) = h.taken {
                    let _ = t.send(Err(Full::Closed));
                }
            }
            return;
        }
    };
    let mut pending: foldhash::HashMap<u64, (Instant, Waiting)> = Default::default();
    let mut sent = 0u64;
    let mut batches: Vec<(String, Vec<u8>, Waiting)> = Vec::new();
    let mut sweep = tokio::time::interval(CONFIRM_WITHIN);
    let answer = |waiting: Waiting, each: &mut dyn FnMut(usize) -> Result<(), Full>| {
        for (i, taken) in waiting.into_iter().enumerate() {
            if let Some(t) = taken {
                let _ = t.send(each(i));
            }
        }
    };
    loop {
        tokio::select! {
            first = rx.recv() => {
                let Some(first) = first else { break };
                let mut next = Some(first);
                while let Some(h) = next.take().or_else(|| rx.try_recv().ok()) {
                    match batches.iter_mut().find(|(s, b, _)| *s == h.subject && b.len() + h.entry.len() <= BATCH_BYTES) {
                        Some((_, body, waiting)) => {
                            body.extend_from_slice(&h.entry);
                            waiting.push(h.taken);
                        }
                        None => batches.push((h.subject, h.entry, vec![h.taken])),
                    }
                    if batches.len() > 64 {
                        break;
                    }
                }
                for (subject, body, waiting) in batches.drain(..) {
                    sent += 1;
                    match client.publish_with_reply(subject, format!("{inbox}.{sent}"), body.into()).await {
                        Ok(()) => {
                            pending.insert(sent, (Instant::now(), waiting));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "publishing to NATS failed");
                            answer(waiting, &mut |_| Err(Full::Closed));
                        }
                    }
                }
            }
            Some(msg) = answers.next() => {
                let Some(id) = msg.subject.rsplit('.').next().and_then(|n| n.parse::<u64>().ok()) else { continue };
                let Some((_, waiting)) = pending.remove(&id) else { continue };
                if msg.status.is_some_and(|s| s == async_nats::StatusCode::NO_RESPONDERS) {
                    // Nobody listens for that node: it is gone, or cut from NATS.
                    answer(waiting, &mut |_| Err(Full::Closed));
                } else {
                    answer(waiting, &mut |i| match msg.payload.get(i) {
                        Some(&TAKEN) => Ok(()),
                        Some(&BACKLOGGED) => Err(Full::Backlogged),
                        _ => Err(Full::Closed),
                    });
                }
            }
            _ = sweep.tick() => {
                // Their senders gave up already (`CONFIRM_WITHIN`); forget them.
                pending.retain(|_, (at, _)| at.elapsed() < 2 * CONFIRM_WITHIN);
            }
        }
    }
}

/// Deliveries from other nodes: entries of `<tenant token> <session> <length>\n<frame>`.
pub(super) async fn spawn_deliveries(cluster: &Arc<Cluster>) -> anyhow::Result<()> {
    let mut sub = cluster.client.subscribe(cluster.subject("dl", &cluster.node)).await?;
    let fabrics: foldhash::HashMap<String, Arc<ClusterFabric>> = cluster.fabrics.lock().iter().map(|(_, f)| (f.tenant_token.clone(), f.clone())).collect();
    let client = cluster.client.clone();
    tokio::spawn(async move {
        // What became of each entry, in order: the answer to the sending node.
        let mut taken = Vec::new();
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
                let done = match (fabrics.get(tenant), std::str::from_utf8(frame)) {
                    (Some(f), Ok(frame)) => f.deliver_here(session, Frame::from(frame.to_string())),
                    _ => Err(Full::Closed),
                };
                taken.push(match done {
                    Ok(()) => TAKEN,
                    Err(Full::Backlogged) => BACKLOGGED,
                    Err(Full::Closed) => CLOSED,
                });
                rest = &rest[nl + 1 + len..];
            }
            if let Some(reply) = msg.reply {
                if let Err(e) = client.publish(reply, std::mem::take(&mut taken).into()).await {
                    tracing::warn!(error = %e, "answering a delivery from another node failed");
                }
            }
            taken.clear();
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

    /// A frame for a session on another node is handed to NATS without
    /// waiting for that node to take it (see `deliver_confirmed`).
    fn deliver(&self, session: &str, frame: Frame) -> Result<(), Full> {
        match self.local.deliver(session, frame.clone()) {
            Err(Full::Closed) => {}
            done => return done,
        }
        let Some(node) = self.route(session).filter(|_| self.connected()) else {
            tracing::debug!(session, "no route to the session, or no connection to NATS");
            return Err(Full::Closed);
        };
        let subject = format!("{}{node}", self.deliver_prefix);
        self.deliveries.send(Handoff { subject, entry: self.entry(session, &frame), taken: None }).map_err(|_| Full::Closed)
    }

    /// A session on another node: taken only once that node says so (in
    /// time). A session not where this node's copy of the directory says,
    /// or on a node gone, is looked up in the shared directory first.
    fn deliver_confirmed(&self, session: &str, frame: Frame) -> Delivery {
        match self.local.deliver(session, frame.clone()) {
            Err(Full::Closed) => {}
            done => return Delivery::Now(done),
        }
        let Some(me) = self.me.upgrade().filter(|_| self.connected()) else {
            return Delivery::Now(Err(Full::Closed));
        };
        let tried = self.route(session);
        let first = tried.as_ref().map(|node| self.hand_to(node, self.entry(session, &frame)));
        let session = session.to_string();
        Delivery::Later(Box::pin(async move {
            if let Some(first) = first {
                match first.await {
                    Err(Full::Closed) => {}
                    done => return done,
                }
            }
            me.deliver_by_newest(&session, tried, frame).await
        }))
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
