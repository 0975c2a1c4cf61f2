//! The directory across nodes: every change a node makes to its tenants'
//! agents, scopes and sessions is written to the cluster's directory
//! stream, which keeps the last value of each key (`publish`), and every
//! node mirrors the stream into its own directory (`apply`). A key is
//! `<tenant>.<kind>.<id>`; a value (`records`) names the node that wrote
//! it, so a node skips its own writes when they come back; a removal is a
//! value `{"gone": true}`.

mod apply;
mod publish;
mod records;

use std::sync::Arc;

use async_nats::jetstream;
use parking_lot::{Mutex, RwLock};

use self::apply::apply;
use self::publish::publish_changes;
pub use self::publish::DirectoryPublisher;
pub use self::records::Checkpoint;
use self::records::SessionRecord;
use crate::follow::follow;
use crate::{token, Cluster};
use map_core::registry::Registry;
use map_core::Tenant;

pub const AGENT: &str = "a";
pub const SCOPE: &str = "s";
pub const SESSION: &str = "x";
pub const SUBSCRIPTION: &str = "u";

pub fn key(tenant_token: &str, kind: &str, id: &str) -> String {
    format!("{tenant_token}.{kind}.{}", token(id))
}

/// What this node's mirror of one tenant's directory keeps for the
/// tenant's fabric: where other nodes' sessions are, and what to resume.
#[derive(Default)]
pub struct Mirrored {
    /// Sessions served by other nodes → their node.
    pub routes: RwLock<foldhash::HashMap<String, Arc<str>>>,
    /// Checkpoints of subscriptions of other nodes' sessions, by session.
    pub parked: Mutex<foldhash::HashMap<String, Vec<(String, Checkpoint)>>>,
    /// Other nodes' agents as last mirrored (`records::essence`).
    pub applied: Mutex<foldhash::HashMap<String, Vec<u8>>>,
}

/// A tenant whose directory this node mirrors and publishes.
#[derive(Clone)]
pub struct MirroredTenant {
    /// The tenant's id as a subject token.
    pub token: String,
    pub tenant: Arc<Tenant>,
    pub mirrored: Arc<Mirrored>,
}

/// The node serving a session, by its newest record in the directory
/// stream (`subject`); none when it has none or has ended.
pub(super) async fn home_of(dir: &jetstream::stream::Stream, subject: &str) -> Option<Arc<str>> {
    let msg = dir.get_last_raw_message_by_subject(subject).await.ok()?;
    let record: SessionRecord = serde_json::from_slice(&msg.payload).ok()?;
    Some(record.home.into())
}

/// Mirror the directory stream into every tenant's directory, then publish
/// the tenants' own changes to it. Returns once what the stream held has been read.
pub(super) async fn mirror(cluster: &Arc<Cluster>, tenants: Vec<MirroredTenant>) -> anyhow::Result<()> {
    let by_token: foldhash::HashMap<String, MirroredTenant> = tenants.iter().map(|t| (t.token.clone(), t.clone())).collect();
    let prefix = cluster.subject("dir", "");
    let node = cluster.node.clone();
    let filter = format!("{prefix}>");
    let read = move |msg: &jetstream::Message| {
        if let Some(key) = msg.subject.strip_prefix(prefix.as_str()) {
            apply(&node, &by_token, key, &msg.payload);
        }
    };
    let stream = format!("{}_dir", cluster.name);
    follow(&cluster.js, &stream, filter, jetstream::consumer::DeliverPolicy::LastPerSubject, "the cluster directory", read).await?;
    publish_changes(cluster, tenants);
    Ok(())
}

/// Whether a session is served by this node.
fn served_here(reg: &Registry, session: &str) -> bool {
    reg.sessions.get(session).is_some_and(|s| s.home.is_none())
}
