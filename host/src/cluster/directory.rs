//! The directory across nodes: every change a node makes to its tenants'
//! agents, scopes and sessions is written to the cluster's directory
//! stream, which keeps the last value of each key, and every node mirrors
//! the stream into its own directory. A key is `<tenant>.<kind>.<id>`; a
//! value names the node that wrote it, so a node skips its own writes when
//! they come back; a removal is a value `{"gone": true}`.

use std::sync::Arc;

use async_nats::jetstream;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::fabric::{Checkpoint, ClusterFabric};
use super::{token, untoken, Cluster};
use crate::core::model::{Agent, Scope};
use crate::core::registry::{Registry, SessionInfo};
use crate::core::extensions::BoxFuture;
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

/// Writes one tenant's directory changes to the stream, in the order made.
struct Sink {
    node: Arc<str>,
    tenant: String,
    fabric: Arc<ClusterFabric>,
    tx: mpsc::UnboundedSender<Write>,
}

/// For the directory writer.
enum Write {
    /// Set a key (`None`: remove it).
    Put(String, Option<Bytes>),
    /// Answer once what was asked before is in the stream (or failed).
    Saved(oneshot::Sender<()>),
}

/// What of another node's agent this node may change and must then write:
/// everything but its children, which each node keeps from the children's
/// own records (see `put_agent`).
pub(super) fn essence(agent: &Agent) -> Vec<u8> {
    let record = AgentRecord { origin: String::new(), session: agent.session.clone(), suspended_from: agent.suspended_from.clone(), agent: Agent { children: Vec::new(), ..agent.clone() } };
    serde_json::to_vec(&record).expect("agents serialise")
}

impl ChangeSink for Sink {
    fn changed(&self, reg: &Registry, changes: Changes) {
        let origin = &*self.node;
        let put = |kind: &str, id: &str, body: Option<Vec<u8>>| {
            let _ = self.tx.send(Write::Put(key(&self.tenant, kind, id), body.map(Bytes::from)));
        };
        for id in &changes.agents {
            if let Some(a) = reg.agents.get(id).filter(|a| !served_here(reg, &a.session)) {
                // Another node's agent: written only for a change of its
                // own (not a child added or removed here).
                let essence = essence(a);
                let mut applied = self.fabric.applied.lock();
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
        let _ = self.tx.send(Write::Saved(done));
        Some(Box::pin(async move {
            let _ = saved.await;
        }))
    }
}

/// Writes keys of the directory stream.
#[derive(Clone)]
pub struct Writer {
    js: jetstream::Context,
    /// `<name>.dir.`
    prefix: String,
    tombstone: Bytes,
}

impl Writer {
    pub fn new(cluster: &Cluster) -> Writer {
        Writer {
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

/// Write directory changes, one after another.
async fn write(dir: Writer, mut rx: mpsc::UnboundedReceiver<Write>) {
    while let Some(next) = rx.recv().await {
        match next {
            Write::Put(key, body) => {
                if let Err(e) = dir.put(&key, body).await {
                    tracing::error!(key = %key, error = %e, "writing the cluster directory failed");
                }
            }
            Write::Saved(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// The node serving a session, by its newest record in the directory
/// stream (`subject`); none when it has none or has ended.
pub(super) async fn home_of(dir: &jetstream::stream::Stream, subject: &str) -> Option<Arc<str>> {
    let msg = dir.get_last_raw_message_by_subject(subject).await.ok()?;
    let record: SessionRecord = serde_json::from_slice(&msg.payload).ok()?;
    Some(record.home.into())
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
    let prefix = cluster.subject("dir", "");
    let node = cluster.node.clone();
    let applied = by_token.clone();
    let filter = format!("{prefix}>");
    let read = move |msg: &jetstream::Message| {
        if let Some(key) = msg.subject.strip_prefix(prefix.as_str()) {
            apply(&node, &applied, key, &msg.payload);
        }
    };
    let stream = format!("{}_dir", cluster.name);
    super::follow(&cluster.js, &stream, filter, jetstream::consumer::DeliverPolicy::LastPerSubject, "the cluster directory", read).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(write(Writer::new(cluster), rx));
    for (tenant_token, (tenant, fabric)) in by_token {
        let sink = Arc::new(Sink { node: cluster.node.clone(), tenant: tenant_token, fabric, tx: tx.clone() });
        tenant.registry.watch(sink, Track { agents: true, scopes: true, sessions: true });
    }
    Ok(())
}

/// Mirror another node's agent. Its children and scope memberships are
/// kept from the links of each agent's own record (a child names its
/// parent, a member its scopes): several nodes may add children or
/// members to one agent or scope at once, but each agent's record is
/// written by one node.
fn put_agent(reg: &mut Registry, mut agent: Agent) {
    let id = agent.id.clone();
    let old = reg.agents.get(&id).map(|a| (a.parent.clone(), a.scopes.clone(), a.children.clone()));
    let (old_parent, old_scopes) = match old {
        Some((parent, scopes, children)) => {
            agent.children = children;
            (parent, scopes)
        }
        None => {
            agent.children = reg.agents_sorted().into_iter().filter(|a| a.parent.as_deref() == Some(id.as_str())).map(|a| a.id.clone()).collect();
            (None, Vec::new())
        }
    };
    if old_parent != agent.parent {
        if let Some(p) = old_parent.as_deref().and_then(|p| reg.agents.get_mut_quiet(p)) {
            p.children.retain(|c| *c != id);
        }
        if let Some(p) = agent.parent.as_deref().and_then(|p| reg.agents.get_mut_quiet(p)) {
            if !p.children.contains(&id) {
                p.children.push(id.clone());
            }
        }
    }
    for s in old_scopes.iter().filter(|s| !agent.scopes.contains(s)) {
        if let Some(scope) = reg.scopes.get_mut_quiet(s) {
            scope.members.retain(|m| *m != id);
        }
    }
    for s in agent.scopes.iter().filter(|s| !old_scopes.contains(s)) {
        if let Some(scope) = reg.scopes.get_mut_quiet(s) {
            if !scope.members.contains(&id) {
                scope.members.push(id.clone());
            }
        }
    }
    reg.agents.insert_quiet(id, agent);
}

/// Forget another node's agent and its links.
fn remove_agent(reg: &mut Registry, id: &str) {
    let Some(agent) = reg.agents.remove_quiet(id) else { return };
    if let Some(p) = agent.parent.as_deref().and_then(|p| reg.agents.get_mut_quiet(p)) {
        p.children.retain(|c| c != id);
    }
    for s in &agent.scopes {
        if let Some(scope) = reg.scopes.get_mut_quiet(s) {
            scope.members.retain(|m| m != id);
        }
    }
}

/// Whether a session is served by this node.
fn served_here(reg: &Registry, session: &str) -> bool {
    reg.sessions.get(session).is_some_and(|s| s.home.is_none())
}

/// Bring one directory entry into the tenant's directory (without writing it back).
fn apply(node: &str, tenants: &foldhash::HashMap<String, (Arc<Tenant>, Arc<ClusterFabric>)>, key: &str, value: &[u8]) {
    let mut parts = key.splitn(3, '.');
    let (Some(t), Some(kind), Some(id)) = (parts.next(), parts.next(), parts.next()) else { return };
    let (Some((tenant, fabric)), Some(id)) = (tenants.get(t), untoken(id)) else { return };
    let Ok(value) = serde_json::from_slice::<Value>(value) else { return };
    if value.get("origin").and_then(Value::as_str) == Some(node) {
        return;
    }
    let put = value.get("gone") != Some(&Value::Bool(true));
    let body = put.then_some(value);
    let mut reg = tenant.registry.lock();
    match (kind, body) {
        (AGENT, Some(v)) => {
            if let Ok(r) = serde_json::from_value::<AgentRecord>(v) {
                let mut agent = r.agent;
                agent.session = r.session;
                agent.suspended_from = r.suspended_from;
                fabric.applied.lock().insert(id, essence(&agent));
                put_agent(&mut reg, agent);
            }
        }
        (AGENT, None) if put => {}
        (AGENT, None) => {
            let mine = reg.agents.get(&id).is_some_and(|a| served_here(&reg, &a.session));
            if !mine {
                fabric.applied.lock().remove(&id);
                remove_agent(&mut reg, &id);
            }
        }
        (SCOPE, Some(v)) => {
            if let Ok(r) = serde_json::from_value::<ScopeRecord>(v) {
                let mut scope = r.scope;
                // Members follow the agents' own records (each written by
                // one node), not the scope's (written by every node a member joins on).
                scope.members = match reg.scopes.get(&id) {
                    Some(known) => known.members.clone(),
                    None => reg.agents_sorted().into_iter().filter(|a| a.scopes.contains(&id)).map(|a| a.id.clone()).collect(),
                };
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
