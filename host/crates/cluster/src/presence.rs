//! Which nodes are alive: each beats on `<name>.hb` four times per presence
//! timeout; a node not heard from for the timeout is dead. A beat also
//! names the tenants with subscriptions on its node, so live-only events
//! cross to other nodes only when someone there may want them. The live node
//! with the smallest name sweeps up after the dead: their sessions are
//! disconnected at once (and may be resumed on any node), and ended, with
//! their agents, when the resume window closes. A node whose own NATS
//! connection is down, or has been up for less than a timeout, cannot tell
//! who is dead: it declares nobody so and does not sweep.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use parking_lot::Mutex;

use super::Cluster;
use map_core::Gateway;
use map_protocol::ids;

/// What the heartbeats read and set of one tenant's fabric on this node.
pub trait Interest: Send + Sync {
    /// The tenant's id as a subject token.
    fn tenant_token(&self) -> &str;
    /// Whether this node has subscriptions in the tenant (its beats say so).
    fn has_local_subscribers(&self) -> bool;
    /// Whether another live node has (from its beats).
    fn set_remote_interest(&self, any: bool);
}

pub struct Presence {
    node: Arc<str>,
    timeout: Duration,
    /// When this node began listening to heartbeats.
    started: std::sync::OnceLock<Instant>,
    /// Since when this node's NATS connection is up (none: it is down).
    connected: Mutex<Option<Instant>>,
    seen: Mutex<foldhash::HashMap<Arc<str>, Instant>>,
    /// Beat at once (a tenant's first subscription here).
    pub beat_now: tokio::sync::Notify,
}

impl Presence {
    pub fn new(node: Arc<str>, timeout: Duration) -> Arc<Presence> {
        Arc::new(Presence {
            node,
            timeout,
            started: std::sync::OnceLock::new(),
            connected: Mutex::new(None),
            seen: Mutex::default(),
            beat_now: tokio::sync::Notify::new(),
        })
    }

    /// This node's NATS connection went up or down.
    pub fn connection(&self, up: bool) {
        *self.connected.lock() = up.then(Instant::now);
    }

    /// This node has heard every heartbeat of the last whole timeout: it
    /// has listened that long and its connection has been up throughout.
    fn heard_a_timeout(&self) -> bool {
        let since = match (self.started.get(), *self.connected.lock()) {
            (Some(started), Some(connected)) => (*started).max(connected).elapsed(),
            _ => return false,
        };
        since >= self.timeout
    }

    /// Whether a node is alive: heard within the timeout, or not known to
    /// be dead because this node has not heard a whole timeout's beats
    /// (just started, or its own NATS connection was down).
    pub fn alive(&self, node: &str) -> bool {
        if node == &*self.node {
            return true;
        }
        self.seen.lock().get(node).is_some_and(|at| at.elapsed() < self.timeout) || !self.heard_a_timeout()
    }

    /// This node sweeps when it has heard a whole timeout and no live node has a smaller name.
    fn leads(&self) -> bool {
        self.heard_a_timeout() && !self.seen.lock().iter().any(|(n, at)| at.elapsed() < self.timeout && **n < *self.node)
    }
}

/// Beat, listen to the other nodes' beats, and sweep up after dead nodes
/// when this node leads. `fabrics`: every tenant's fabric on this node.
pub(super) async fn spawn(cluster: &Arc<Cluster>, gateway: &Arc<Gateway>, fabrics: Vec<Arc<dyn Interest>>) -> anyhow::Result<()> {
    let subject = cluster.subject("hb", "all");
    let mut beats = cluster.client.subscribe(subject.clone()).await?;
    let _ = cluster.presence.started.set(Instant::now());
    let presence = cluster.presence.clone();
    let readers = fabrics.clone();
    tokio::spawn(async move {
        // Per node: when last heard, and the tenants it has subscribers in.
        let mut interest: foldhash::HashMap<Arc<str>, Vec<String>> = Default::default();
        while let Some(msg) = beats.next().await {
            let Ok(text) = std::str::from_utf8(&msg.payload) else { continue };
            let mut parts = text.split('\t');
            let Some(node) = parts.next().filter(|n| *n != &*presence.node) else { continue };
            let node: Arc<str> = node.into();
            presence.seen.lock().insert(node.clone(), Instant::now());
            interest.insert(node, parts.map(String::from).collect());
            interest.retain(|n, _| presence.alive(n));
            for f in &readers {
                f.set_remote_interest(interest.values().any(|tenants| tenants.iter().any(|t| t == f.tenant_token())));
            }
        }
    });
    let every = cluster.presence.timeout / 4;
    let client = cluster.client.clone();
    let node = cluster.node.clone();
    let me = cluster.presence.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = me.beat_now.notified() => {}
            }
            let mut beat = node.to_string();
            for f in fabrics.iter().filter(|f| f.has_local_subscribers()) {
                beat.push('\t');
                beat.push_str(f.tenant_token());
            }
            let _ = client.publish(subject.clone(), beat.into()).await;
        }
    });
    let presence = cluster.presence.clone();
    let window = cluster.resume_window;
    let gateway = Arc::downgrade(gateway);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(gw) = gateway.upgrade() else { return };
            if presence.leads() {
                sweep(&gw, &presence, window);
            }
        }
    });
    Ok(())
}

/// Disconnect the sessions of dead nodes; end those whose resume window has closed.
fn sweep(gw: &Gateway, presence: &Presence, window: Duration) {
    let now = ids::now_ms();
    for tenant in gw.tenants.all() {
        let orphans: Vec<(String, bool, Option<u64>)> = {
            let reg = tenant.registry.lock();
            reg.sessions
                .values()
                .filter(|s| s.home.as_deref().is_some_and(|h| !presence.alive(h) || (h == &*presence.node && gw.live(&s.id).is_none())))
                .map(|s| (s.id.clone(), s.connected, s.disconnected_at))
                .collect()
        };
        for (session, connected, since) in orphans {
            if connected {
                tenant.park_session(&session);
            } else if since.is_none_or(|t| now.saturating_sub(t) >= window.as_millis() as u64) {
                tenant.end_session(&session, "node lost and not resumed");
            }
        }
    }
}
