//! One tenant's fabric on a cluster node, over NATS: the node's own
//! sessions and subscriptions live in a `LocalFabric`; recorded events go
//! through the shared log (`event_log`) and come back in one order for
//! every node, and deliveries to other nodes' sessions go through NATS
//! (`deliveries`), routed by this node's mirror of the directory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::StreamExt;

use super::deliveries::Outgoing;
use super::directory::{self, DirectoryPublisher, Mirrored};
use super::event_log::{published_by, LogPublisher};
use super::follow::follow;
use super::presence::{Interest, Presence};
use super::{checkpoints, token, Cluster};
use futures_util::future::BoxFuture;
use map_core::asks::{Answer, Ask, NOT_RESPONDING};
use map_core::events::{Filter, NewEvent, StoredEvent};
use map_core::fabric::{Delivery, Fabric, FabricView, LocalFabric, ParkedSubscription, ReplayFrom, ReplayPage, ReplayQuery};
use map_core::outbox::{Frame, Full, Outbox};
use map_protocol::ids::Ulid;
use map_protocol::rpc::RpcError;

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
    tenant_token: String,
    /// This process (a node restarted under its name is another instance).
    instance: Arc<str>,
    /// Events, to the event publisher.
    log: LogPublisher,
    /// Deliveries to other nodes.
    deliveries: Outgoing,
    /// `<name>.ask.` (a node name follows): requests to participants on other nodes.
    ask_prefix: String,
    /// What the directory's mirror keeps for this tenant: routes to other
    /// nodes' sessions, their subscriptions' checkpoints.
    mirrored: Arc<Mirrored>,
    presence: Arc<Presence>,
    /// Another live node has subscriptions in this tenant (from its beats).
    remote_interest: AtomicBool,
}

impl ClusterFabric {
    pub(super) fn new(cluster: &Arc<Cluster>, tenant: &str) -> Arc<ClusterFabric> {
        let t = token(tenant);
        Arc::new_cyclic(|me| ClusterFabric {
            me: me.clone(),
            local: LocalFabric::new(cluster.replay_events, cluster.replay_bytes),
            node: cluster.node.clone(),
            client: cluster.client.clone(),
            dir: cluster.dir.clone(),
            dir_prefix: cluster.subject("dir", ""),
            log_subject: cluster.subject("ev", &t),
            live_subject: cluster.subject("live", &t),
            log: LogPublisher::start(cluster.client.clone(), cluster.js.clone(), cluster.instance.clone(), cluster.event_backlog),
            deliveries: Outgoing::start(cluster.client.clone(), cluster.subject("dl", ""), t.clone()),
            ask_prefix: cluster.subject("ask", ""),
            tenant_token: t,
            instance: cluster.instance.clone(),
            mirrored: Arc::default(),
            presence: cluster.presence.clone(),
            remote_interest: AtomicBool::new(false),
        })
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
        follow(&cluster.js, &stream, self.log_subject.clone(), jetstream::consumer::DeliverPolicy::All, "the cluster's event log", read).await?;
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

    /// Save the positions of this node's subscriptions to the directory (`checkpoints`).
    pub(super) fn spawn_checkpoints(self: &Arc<Self>, cluster: &Arc<Cluster>) {
        let fabric = Arc::downgrade(self);
        let subscriptions = move || fabric.upgrade().map(|f| f.local.inspect().subscriptions);
        checkpoints::spawn(DirectoryPublisher::new(cluster), self.tenant_token.clone(), cluster.checkpoint, subscriptions);
    }

    pub(super) fn mirrored(&self) -> Arc<Mirrored> {
        self.mirrored.clone()
    }

    fn remote_interest(&self) -> bool {
        self.remote_interest.load(Ordering::Relaxed)
    }

    /// Wait (at most `within`) until the events made so far are in the log.
    pub(super) fn flush(&self, within: std::time::Duration) {
        self.log.flush(within)
    }

    /// Whether this process published a message (and so has fanned it out).
    fn is_mine(&self, headers: Option<&async_nats::HeaderMap>) -> bool {
        published_by(headers, &self.instance)
    }

    /// A delivery from another node, for a session served here.
    pub(super) fn deliver_here(&self, session: &str, frame: Frame) -> Result<(), Full> {
        let done = self.local.deliver(session, frame);
        if let Err(e) = done {
            tracing::debug!(session, ?e, "a delivery from another node was not taken");
        }
        done
    }

    fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// The node this node's copy of the directory says serves a session, if it is alive.
    fn route(&self, session: &str) -> Option<Arc<str>> {
        let node = self.mirrored.routes.read().get(session).cloned();
        node.filter(|n| *n != self.node && self.presence.alive(n))
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
        self.mirrored.routes.write().insert(session.to_string(), home.clone());
        self.deliveries.hand_to(&home, session, &frame).await
    }
}

impl Interest for ClusterFabric {
    fn tenant_token(&self) -> &str {
        &self.tenant_token
    }

    fn has_local_subscribers(&self) -> bool {
        self.local.has_subscribers()
    }

    fn set_remote_interest(&self, any: bool) {
        self.remote_interest.store(any, Ordering::Relaxed);
    }
}

impl Fabric for ClusterFabric {
    fn join(&self, session: &str, outbox: Arc<Outbox>) {
        self.mirrored.routes.write().remove(session);
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
        self.deliveries.send(&node, session, &frame)
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
        let first = tried.as_ref().map(|node| self.deliveries.hand_to(node, session, &frame));
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
            self.log.append(self.log_subject.clone(), body);
            return id;
        }
        if self.remote_interest() {
            self.log.live(self.live_subject.clone(), body);
        }
        self.local.record_at(id, ts, event);
        id
    }

    fn behind(&self) -> bool {
        self.log.behind()
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

    fn observing(&self, session: &str, allowed: bool) {
        self.local.observing(session, allowed)
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

    /// Through the node this node's copy of the directory names (`asks`).
    fn ask_elsewhere(&self, session: &str, ask: Ask) -> BoxFuture<'static, Answer> {
        let Some(node) = self.route(session).filter(|_| self.connected()) else {
            let who = ask.who.clone();
            return Box::pin(async move { Err(RpcError::new(NOT_RESPONDING, format!("{who} is not connected now"))) });
        };
        let subject = format!("{}{node}", self.ask_prefix);
        Box::pin(super::asks::ask(self.client.clone(), subject, self.tenant_token.clone(), session.to_string(), ask))
    }

    fn parked_subscriptions(&self, session: &str) -> Vec<ParkedSubscription> {
        let parked = self.mirrored.parked.lock().remove(session).unwrap_or_default();
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
