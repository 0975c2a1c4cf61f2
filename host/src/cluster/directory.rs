//! The directory across nodes: every change a node makes to its tenants'
//! agents, scopes and sessions is written to the cluster's key-value
//! bucket, and every node mirrors the bucket into its own directory.
//! A key is `<tenant>.<kind>.<id>`; a value names the node that wrote it,
//! so a node skips its own writes when they come back.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use super::fabric::{Checkpoint, ClusterFabric};
use super::{token, untoken, Cluster};
use crate::core::model::{Agent, Scope};
use crate::core::registry::{Registry, SessionInfo};
use crate::core::tracked::{ChangeSink, Changes, Track};
use crate::core::Tenant;

pub const AGENT: &str = "a";
pub const SCOPE: &str = "s";
pub const SESSION: &str = "x";
pub const SUBSCRIPTION: &str = "u";

pub fn key(tenant_token: &str, kind: &str, id: &str) -> String {
    format!("{tenant_token}.{kind}.{}", token(id))
}

#[derive(Serialize, Deserialize)]
struct AgentRecord {
    origin: String,
    session: String,
    #[serde(default)]
    suspended_from: Option<String>,
    #[serde(flatten)]
    agent: Agent,
}

#[derive(Serialize, Deserialize)]
struct ScopeRecord {
    origin: String,
    #[serde(default)]
    members: Vec<String>,
    #[serde(flatten)]
    scope: Scope,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionRecord {
    origin: String,
    /// The node serving it.
    home: String,
    id: String,
    participant_id: String,
    participant_type: String,
    #[serde(default)]
    name: Option<String>,
    agents: Vec<String>,
    connected: bool,
    created_at: u64,
    connected_at: u64,
    #[serde(default)]
    disconnected_at: Option<u64>,
    agent_behavior: String,
    #[serde(default)]
    capabilities: Value,
    principal: String,
    resume_hash: String,
}

impl SessionRecord {
    fn of(origin: &str, s: &SessionInfo) -> SessionRecord {
        SessionRecord {
            origin: origin.to_string(),
            home: s.home.as_deref().unwrap_or(origin).to_string(),
            id: s.id.clone(),
            participant_id: s.participant_id.clone(),
            participant_type: s.participant_type.clone(),
            name: s.name.clone(),
            agents: s.agents.clone(),
            connected: s.connected,
            created_at: s.created_at,
            connected_at: s.connected_at,
            disconnected_at: s.disconnected_at,
            agent_behavior: s.agent_behavior.clone(),
            capabilities: s.capabilities.clone(),
            principal: s.principal.to_string(),
            resume_hash: s.resume_hash.clone(),
        }
    }

    fn into_info(self) -> SessionInfo {
        SessionInfo {
            id: self.id,
            participant_id: self.participant_id,
            participant_type: self.participant_type,
            name: self.name,
            agents: self.agents,
            connected: self.connected,
            created_at: self.created_at,
            connected_at: self.connected_at,
            disconnected_at: self.disconnected_at,
            agent_behavior: self.agent_behavior,
            capabilities: self.capabilities,
            principal: self.principal.into(),
            resume_hash: self.resume_hash,
            home: Some(self.home.into()),
        }
    }
}

/// Writes one tenant's directory changes to the bucket, in the order made.
struct Sink {
    node: Arc<str>,
    tenant: String,
    tx: mpsc::UnboundedSender<(String, Option<Bytes>)>,
}

impl ChangeSink for Sink {
    fn changed(&self, reg: &Registry, changes: Changes) {
        let origin = &*self.node;
        let put = |kind: &str, id: &str, body: Option<Vec<u8>>| {
            let _ = self.tx.send((key(&self.tenant, kind, id), body.map(Bytes::from)));
        };
        for id in &changes.agents {
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
}

/// Write directory changes to the bucket, one after another.
async fn write(dir: kv::Store, mut rx: mpsc::UnboundedReceiver<(String, Option<Bytes>)>) {
    while let Some((key, body)) = rx.recv().await {
        let done = match body {
            Some(b) => dir.put(&key, b).await.map(|_| ()).map_err(|e| e.to_string()),
            None => dir.delete(&key).await.map_err(|e| e.to_string()),
        };
        if let Err(e) = done {
            tracing::error!(key = %key, error = %e, "writing the cluster directory failed");
        }
    }
}

/// Mirror the bucket into every tenant's directory and send the tenants'
/// own changes to it. Returns once what the bucket held has been read.
pub(super) async fn mirror(cluster: &Arc<Cluster>, tenants: &[Arc<Tenant>]) -> anyhow::Result<()> {
    let fabrics: Vec<(String, Arc<ClusterFabric>)> = cluster.fabrics.lock().clone();
    let mut by_token: foldhash::HashMap<String, (Arc<Tenant>, Arc<ClusterFabric>)> = Default::default();
    for t in tenants {
        if let Some((_, f)) = fabrics.iter().find(|(id, _)| *id == t.id) {
            by_token.insert(token(&t.id), (t.clone(), f.clone()));
        }
    }
    let held = cluster.dir.status().await.map(|s| s.values()).unwrap_or(0);
    let mut watch = cluster.dir.watch_with_history(">").await?;
    let node = cluster.node.clone();
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let applied = by_token.clone();
    tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        if held == 0 {
            let _ = ready_tx.take().map(|t| t.send(()));
        }
        while let Some(entry) = watch.next().await {
            match entry {
                Ok(entry) => {
                    apply(&node, &applied, &entry);
                    if entry.delta == 0 {
                        let _ = ready_tx.take().map(|t| t.send(()));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "watching the cluster directory"),
            }
        }
        tracing::error!("the cluster directory watch ended");
    });
    let _ = tokio::time::timeout(Duration::from_secs(30), ready).await;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(write(cluster.dir.clone(), rx));
    for (tenant_token, (tenant, _)) in by_token {
        let sink = Arc::new(Sink { node: cluster.node.clone(), tenant: tenant_token, tx: tx.clone() });
        tenant.registry.watch(sink, Track { agents: true, scopes: true, sessions: true });
    }
    Ok(())
}

/// Whether a session is served by this node.
fn served_here(reg: &Registry, session: &str) -> bool {
    reg.sessions.get(session).is_some_and(|s| s.home.is_none())
}

/// Bring one bucket entry into the tenant's directory (without writing it back).
fn apply(node: &str, tenants: &foldhash::HashMap<String, (Arc<Tenant>, Arc<ClusterFabric>)>, entry: &kv::Entry) {
    let mut parts = entry.key.splitn(3, '.');
    let (Some(t), Some(kind), Some(id)) = (parts.next(), parts.next(), parts.next()) else { return };
    let (Some((tenant, fabric)), Some(id)) = (tenants.get(t), untoken(id)) else { return };
    let put = entry.operation == kv::Operation::Put;
    let origin_is_me = |v: &Value| v.get("origin").and_then(Value::as_str) == Some(node);
    let body: Option<Value> = if put { serde_json::from_slice(&entry.value).ok() } else { None };
    if body.as_ref().is_some_and(origin_is_me) {
        return;
    }
    let mut reg = tenant.registry.lock();
    match (kind, body) {
        (AGENT, Some(v)) => {
            if let Ok(r) = serde_json::from_value::<AgentRecord>(v) {
                let mut agent = r.agent;
                agent.session = r.session;
                agent.suspended_from = r.suspended_from;
                reg.agents.insert_quiet(id, agent);
            }
        }
        (AGENT, None) if put => {}
        (AGENT, None) => {
            let mine = reg.agents.get(&id).is_some_and(|a| served_here(&reg, &a.session));
            if !mine {
                reg.agents.remove_quiet(&id);
            }
        }
        (SCOPE, Some(v)) => {
            if let Ok(r) = serde_json::from_value::<ScopeRecord>(v) {
                let mut scope = r.scope;
                scope.members = r.members;
                reg.scopes.insert_quiet(id, scope);
            }
        }
        (SCOPE, None) if !put => {
            reg.scopes.remove_quiet(&id);
        }
        (SESSION, Some(v)) => {
            let Ok(r) = serde_json::from_value::<SessionRecord>(v) else { return };
            if served_here(&reg, &id) {
                return;
            }
            let info = r.into_info();
            let home = info.home.clone().expect("records name their node");
            reg.participants.insert(info.participant_id.clone(), info.id.clone());
            reg.sessions.insert_quiet(id.clone(), info);
            fabric.routes.write().insert(id, home);
        }
        (SESSION, None) if !put => {
            if served_here(&reg, &id) {
                return;
            }
            if let Some(info) = reg.sessions.remove_quiet(&id) {
                if reg.participants.get(&info.participant_id).is_some_and(|s| *s == id) {
                    reg.participants.remove(&info.participant_id);
                }
            }
            fabric.routes.write().remove(&id);
            fabric.parked.lock().remove(&id);
        }
        (SUBSCRIPTION, Some(v)) => {
            let Ok(c) = serde_json::from_value::<Checkpoint>(v) else { return };
            if served_here(&reg, &c.session) {
                return;
            }
            let mut parked = fabric.parked.lock();
            let list = parked.entry(c.session.clone()).or_default();
            list.retain(|(sub, _)| *sub != id);
            list.push((id, c));
        }
        (SUBSCRIPTION, None) if !put => {
            for list in fabric.parked.lock().values_mut() {
                list.retain(|(sub, _)| *sub != id);
            }
        }
        _ => {}
    }
}
