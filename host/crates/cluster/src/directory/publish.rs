//! This node's changes to the directory: every change to a tenant's
//! agents, scopes and sessions is published to the directory stream, in
//! the order made (a removal as a tombstone, `{"gone": true}`).

use std::sync::Arc;

use async_nats::jetstream;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::records::{essence, AgentRecord, ScopeRecord, SessionRecord};
use super::{key, served_here, Mirrored, MirroredTenant, AGENT, SCOPE, SESSION};
use crate::Cluster;
use futures_util::future::BoxFuture;
use map_core::directory::{ChangeSink, Track};
use map_core::registry::Registry;
use map_core::tracked::Changes;

/// Sets keys of the directory stream.
#[derive(Clone)]
pub struct DirectoryPublisher {
    js: jetstream::Context,
    /// `<name>.dir.`
    prefix: String,
    tombstone: Bytes,
}

impl DirectoryPublisher {
    pub fn new(cluster: &Cluster) -> DirectoryPublisher {
        DirectoryPublisher {
            js: cluster.js.clone(),
            prefix: cluster.subject("dir", ""),
            tombstone: serde_json::to_vec(&serde_json::json!({"origin": &*cluster.node, "gone": true})).expect("JSON").into(),
        }
    }

    /// Set a key (`None`: remove it), once the stream has it.
    pub async fn put(&self, key: &str, body: Option<Bytes>) -> Result<(), String> {
        let body = body.unwrap_or_else(|| self.tombstone.clone());
        let ack = self.js.publish(format!("{}{key}", self.prefix), body).await.map_err(|e| e.to_string())?;
        ack.await.map(|_| ()).map_err(|e| e.to_string())
    }
}

/// Publish every tenant's directory changes from now on, one after another.
pub(super) fn publish_changes(cluster: &Cluster, tenants: Vec<MirroredTenant>) {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(publish_queued(DirectoryPublisher::new(cluster), rx));
    for t in tenants {
        let sink = Arc::new(Sink { node: cluster.node.clone(), tenant: t.token, mirrored: t.mirrored, tx: tx.clone() });
        t.tenant.registry.watch(sink, Track { agents: true, scopes: true, sessions: true });
    }
}

/// What the publisher is asked to do, in order.
enum Queued {
    /// Set a key (`None`: remove it).
    Put(String, Option<Bytes>),
    /// Answer once what was asked before is in the stream (or failed).
    Saved(oneshot::Sender<()>),
}

/// Publish directory changes, one after another.
async fn publish_queued(dir: DirectoryPublisher, mut rx: mpsc::UnboundedReceiver<Queued>) {
    while let Some(next) = rx.recv().await {
        match next {
            Queued::Put(key, body) => {
                if let Err(e) = dir.put(&key, body).await {
                    tracing::error!(key = %key, error = %e, "writing the cluster directory failed");
                }
            }
            Queued::Saved(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Queues one tenant's directory changes for the publisher, in the order made.
struct Sink {
    node: Arc<str>,
    /// The tenant's id as a subject token.
    tenant: String,
    mirrored: Arc<Mirrored>,
    tx: mpsc::UnboundedSender<Queued>,
}

impl ChangeSink for Sink {
    fn changed(&self, reg: &Registry, changes: Changes) {
        let origin = &*self.node;
        let put = |kind: &str, id: &str, body: Option<Vec<u8>>| {
            let _ = self.tx.send(Queued::Put(key(&self.tenant, kind, id), body.map(Bytes::from)));
        };
        for id in &changes.agents {
            if let Some(a) = reg.agents.get(id).filter(|a| !served_here(reg, &a.session)) {
                // Another node's agent: written only for a change of its
                // own (not a child added or removed here).
                let essence = essence(a);
                let mut applied = self.mirrored.applied.lock();
                if applied.get(id) == Some(&essence) {
                    continue;
                }
                applied.insert(id.clone(), essence);
            }
            let body = reg.agents.get(id).map(|a| {
                let record = AgentRecord { origin: origin.into(), session: a.session.clone(), suspended_from: a.suspended_from.clone(), agent: a.clone() };
                serde_json::to_vec(&record).expect("agents serialise")
            });
            put(AGENT, id, body);
        }
        for id in &changes.scopes {
            let body = reg.scopes.get(id).map(|s| {
                let record = ScopeRecord { origin: origin.into(), members: s.members.clone(), scope: s.clone() };
                serde_json::to_vec(&record).expect("scopes serialise")
            });
            put(SCOPE, id, body);
        }
        for id in &changes.sessions {
            let body = reg.sessions.get(id).map(|s| serde_json::to_vec(&SessionRecord::of(origin, s)).expect("sessions serialise"));
            put(SESSION, id, body);
        }
    }

    fn saved(&self) -> Option<BoxFuture<'static, ()>> {
        let (done, saved) = oneshot::channel();
        let _ = self.tx.send(Queued::Saved(done));
        Some(Box::pin(async move {
            let _ = saved.await;
        }))
    }
}
