//! Cluster mode: several gateways on one NATS server (with JetStream) and
//! one PostgreSQL behave as one.
//!
//! - NATS core carries deliveries to a session on another node
//!   (`<name>.dl.<node>`, each answered with what that node took), live-only
//!   events (`<name>.live.<tenant>`) and heartbeats (`<name>.hb`).
//! - A JetStream stream (`<name>_events`) is the event log: every node
//!   publishes its recorded events there and reads every tenant's subject
//!   back in one order, fanning out to its own subscriptions and keeping
//!   the replay window.
//! - A JetStream stream keeping the last message per subject (`<name>_dir`,
//!   subjects `<name>.dir.<tenant>.<kind>.<id>`) is the directory: agents,
//!   scopes and sessions (with their serving node and resume-token hash),
//!   and subscription checkpoints; every node reads it and mirrors it.
//! - Plugin state is in PostgreSQL (`storage.url`), shared by every node.

mod directory;
mod fabric;
mod presence;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream;

use crate::config::Config;
use crate::core::Gateway;

pub use fabric::ClusterFabric;
use presence::Presence;

/// This node's link to the cluster.
pub struct Cluster {
    pub node: Arc<str>,
    /// This process: the node name and a random suffix.
    instance: Arc<str>,
    /// The cluster's name: prefix of its subjects.
    name: String,
    client: async_nats::Client,
    js: jetstream::Context,
    /// The directory stream.
    dir: jetstream::stream::Stream,
    presence: Arc<Presence>,
    fabrics: parking_lot::Mutex<Vec<(String, Arc<ClusterFabric>)>>,
    checkpoint: Duration,
    resume_window: Duration,
    replay_events: usize,
    replay_bytes: usize,
}

/// A tenant id or other name as one subject token or key part: letters,
/// digits, `-` and `_` stay; anything else becomes `=XX` (hex of each byte).
pub(crate) fn token(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("={b:02X}"));
        }
    }
    out
}

/// `token` undone.
pub(crate) fn untoken(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl Cluster {
    /// Connect to NATS and make (or find) the event stream and the directory bucket.
    pub async fn connect(config: &Config) -> anyhow::Result<Arc<Cluster>> {
        let c = &config.cluster;
        let node: Arc<str> = if c.node.is_empty() {
            let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "node".into());
            format!("{}-{}", token(&host), std::process::id()).into()
        } else {
            token(&c.node).into()
        };
        let timeout = Duration::from_millis(c.presence_timeout_ms);
        let presence = Presence::new(node.clone(), timeout);
        let seen_by = presence.clone();
        let client = async_nats::ConnectOptions::new()
            .name(format!("map-gateway {node}"))
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5))
            // A connection that silently stopped answering is found out within a few timeouts.
            .ping_interval(timeout.max(Duration::from_secs(1)))
            // Back within a second of NATS coming back, however long it was away.
            .reconnect_delay_callback(|attempts| Duration::from_millis(1 << attempts.min(10)).min(Duration::from_secs(1)))
            .event_callback(move |event| {
                let presence = seen_by.clone();
                async move {
                    match event {
                        async_nats::Event::Connected => {
                            presence.connection(true);
                            tracing::info!("connected to NATS");
                        }
                        async_nats::Event::Disconnected => {
                            presence.connection(false);
                            tracing::warn!("lost the connection to NATS: sends to other nodes fail until it is back");
                        }
                        other => tracing::info!(event = %other, "NATS"),
                    }
                }
            })
            .connect(&c.nats)
            .await
            .with_context(|| format!("connecting to NATS at {}", c.nats))?;
        // `retry_on_initial_connect` returns at once; wait for the first connection (bounded).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while client.connection_state() != async_nats::connection::State::Connected {
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("cluster.nats {}: no NATS server answered within 10 s", c.nats);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let js = jetstream::new(client.clone());
        let stream_name = format!("{}_events", c.name);
        js.get_or_create_stream(jetstream::stream::Config {
            name: stream_name.clone(),
            subjects: vec![format!("{}.ev.>", c.name)],
            max_messages_per_subject: config.limits.replay_events as i64,
            max_bytes: -1,
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .with_context(|| format!("making the JetStream stream {stream_name} (is JetStream enabled on {}?)", c.nats))?;
        // The directory: a stream keeping the last value of each subject (a
        // key-value bucket, without the bucket API's newer server needs).
        let dir_name = format!("{}_dir", c.name);
        let dir = js.get_or_create_stream(jetstream::stream::Config {
            name: dir_name.clone(),
            subjects: vec![format!("{}.dir.>", c.name)],
            max_messages_per_subject: 1,
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .with_context(|| format!("making the JetStream stream {dir_name}"))?;
        let instance = format!("{node}/{}", &crate::ids::secret()[..16]).into();
        Ok(Arc::new(Cluster {
            node,
            instance,
            name: c.name.clone(),
            client,
            js,
            dir,
            presence,
            fabrics: parking_lot::Mutex::new(Vec::new()),
            checkpoint: Duration::from_millis(c.checkpoint_ms),
            resume_window: Duration::from_secs(config.server.resume_window_secs),
            replay_events: config.limits.replay_events,
            replay_bytes: config.limits.replay_bytes,
        }))
    }

    /// The fabric of one tenant on this node.
    pub fn fabric_for(self: &Arc<Self>, tenant: &str) -> Arc<ClusterFabric> {
        let fabric = ClusterFabric::new(self, tenant);
        self.fabrics.lock().push((tenant.to_string(), fabric.clone()));
        fabric
    }

    fn subject(&self, kind: &str, rest: &str) -> String {
        format!("{}.{kind}.{rest}", self.name)
    }

    /// Start serving: mirror the directory, read the event log, take
    /// deliveries, beat and watch the other nodes' hearts. Returns when the
    /// directory and every tenant's log have been read up to now.
    pub async fn start(self: &Arc<Self>, gateway: &Arc<Gateway>) -> anyhow::Result<()> {
        let tenants: Vec<_> = gateway.tenants.all().cloned().collect();
        let fabrics = self.fabrics.lock().clone();
        fabric::spawn_deliveries(self).await?;
        for (tenant, f) in &fabrics {
            f.spawn_log_reader(self, tenant).await?;
        }
        directory::mirror(self, &tenants).await?;
        presence::spawn(self, gateway).await?;
        for (_, f) in &fabrics {
            f.spawn_checkpoints(self);
        }
        let client = self.client.clone();
        gateway.ready_when(move || {
            let state = client.connection_state();
            (state != async_nats::connection::State::Connected).then(|| format!("cluster: no connection to NATS ({state})"))
        });
        // A graceful stop appends what is still queued for the log.
        gateway.at_stop(move || {
            for (_, f) in &fabrics {
                f.flush(Duration::from_secs(5));
            }
        });
        tracing::info!(node = %self.node, cluster = %self.name, "joined the cluster");
        Ok(())
    }
}

/// Read a stream's messages under `filter`, from `policy` on and in order,
/// handing each to `each` for as long as the process runs. Returns once
/// what the stream held under `filter` at the start has been handed over
/// (or after 30 s, if that is huge).
async fn follow(
    js: &jetstream::Context,
    stream: &str,
    filter: String,
    policy: jetstream::consumer::DeliverPolicy,
    what: &'static str,
    mut each: impl FnMut(&jetstream::Message) + Send + 'static,
) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    let stream = js.get_stream(stream).await?;
    let config = jetstream::consumer::pull::OrderedConfig { filter_subject: filter, deliver_policy: policy, ..Default::default() };
    let consumer = stream.create_consumer(config).await?;
    let held = consumer.cached_info().num_pending;
    let mut messages = consumer.messages().await?;
    let (done, caught_up) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut done = Some(done);
        if held == 0 {
            let _ = done.take().map(|t| t.send(()));
        }
        while let Some(msg) = messages.next().await {
            match msg {
                Ok(msg) => {
                    each(&msg);
                    if msg.info().is_ok_and(|i| i.pending == 0) {
                        let _ = done.take().map(|t| t.send(()));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "reading {what}"),
            }
        }
        tracing::error!("reading {what} ended");
    });
    let _ = tokio::time::timeout(Duration::from_secs(30), caught_up).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_round_trip() {
        for s in ["default", "a.b c", "ünï", "x=y", ""] {
            let t = super::token(s);
            assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'='), "{t}");
            assert_eq!(super::untoken(&t).as_deref(), Some(s));
        }
    }
}
