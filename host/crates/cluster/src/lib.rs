//! Cluster mode: several gateways on one NATS server (with JetStream) and
//! one PostgreSQL behave as one.
//!
//! - NATS core carries deliveries to a session on another node
//!   (`<name>.dl.<node>`, each answered with what that node took), requests
//!   to a participant there (`<name>.ask.<node>`, answered with its answer), live-only
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
//! - A reload on one node is a rollout: the others load the same digests
//!   (`<name>.rollout`, `rollout`); PostgreSQL keeps the current one for
//!   nodes that start later.
//! - A singleton plugin's calls go to the node holding its lease over NATS
//!   core (`<name>.sg.…`, `singletons`).

mod asks;
mod checkpoints;
mod deliveries;
mod directory;
mod event_log;
mod follow;
mod nats_fabric;
mod presence;
mod rollout;
pub mod singletons;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream;

use self::directory::MirroredTenant;
pub use self::nats_fabric::ClusterFabric;
use self::presence::{Interest, Presence};
pub use self::rollout::Joining;
use map_config::{ClusterConfig, Config};
use map_core::outbox::Full;
use map_core::Gateway;

/// Largest batch in one NATS message (bytes): deliveries to one node, or
/// recorded events of one tenant (one log entry holds the batch).
const BATCH_BYTES: usize = 256 << 10;

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
    /// Bytes of events a tenant may have waiting for the log (`event_backlog_mb`).
    event_backlog: usize,
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
    /// Connect to NATS and make (or find) the event stream and the directory stream.
    pub async fn connect(config: &Config) -> anyhow::Result<Arc<Cluster>> {
        let c = &config.cluster;
        let node = node_name(c);
        let presence = Presence::new(node.clone(), Duration::from_millis(c.presence_timeout_ms));
        let client = connect_nats(c, &node, &presence).await?;
        let js = jetstream::new(client.clone());
        make_event_stream(&js, c, config.limits.replay_events).await?;
        let dir = make_directory_stream(&js, c).await?;
        let instance = format!("{node}/{}", &map_protocol::ids::secret()[..16]).into();
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
            event_backlog: c.event_backlog_mb << 20,
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
    /// deliveries, beat and watch the other nodes' hearts, follow rollouts
    /// (`joining`: the one this node started on). Returns when the
    /// directory and every tenant's log have been read up to now.
    pub async fn start(self: &Arc<Self>, gateway: &Arc<Gateway>, joining: Joining) -> anyhow::Result<()> {
        let fabrics = self.fabrics.lock().clone();
        let by_token: foldhash::HashMap<String, Arc<ClusterFabric>> = fabrics.iter().map(|(_, f)| (f.tenant_token().to_string(), f.clone())).collect();
        let deliver = move |tenant: &str, session: &str, frame| match by_token.get(tenant) {
            Some(f) => f.deliver_here(session, frame),
            None => Err(Full::Closed),
        };
        deliveries::receive(self, deliver).await?;
        asks::serve(self, gateway).await?;
        for (tenant, f) in &fabrics {
            f.spawn_log_reader(self, tenant).await?;
        }
        directory::mirror(self, mirrored_tenants(gateway, &fabrics)).await?;
        let interests = fabrics.iter().map(|(_, f)| f.clone() as Arc<dyn Interest>).collect();
        presence::spawn(self, gateway, interests).await?;
        rollout::serve(self, gateway, joining).await?;
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

/// The tenants this node serves with a fabric of the cluster, for the directory's mirror.
fn mirrored_tenants(gateway: &Gateway, fabrics: &[(String, Arc<ClusterFabric>)]) -> Vec<MirroredTenant> {
    let mut tenants = Vec::new();
    for t in gateway.tenants.all() {
        if let Some((_, f)) = fabrics.iter().find(|(id, _)| *id == t.id) {
            tenants.push(MirroredTenant { token: token(&t.id), tenant: t.clone(), mirrored: f.mirrored() });
        }
    }
    tenants
}

/// This node's name: the configured one, or the host name and process id.
fn node_name(c: &ClusterConfig) -> Arc<str> {
    if c.node.is_empty() {
        let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "node".into());
        format!("{}-{}", token(&host), std::process::id()).into()
    } else {
        token(&c.node).into()
    }
}

/// Connect to NATS, reconnecting for as long as the process runs, and
/// tell `presence` when the connection goes up or down. Returns once the
/// first connection is made (bounded).
async fn connect_nats(c: &ClusterConfig, node: &str, presence: &Arc<Presence>) -> anyhow::Result<async_nats::Client> {
    let timeout = Duration::from_millis(c.presence_timeout_ms);
    let seen_by = presence.clone();
    let (servers, login) = nats_login(c.nats.expose()).with_context(|| format!("cluster.nats {}", c.nats.shown()))?;
    let options = match login {
        Some(Login { user, password: Some(password) }) => async_nats::ConnectOptions::with_user_and_password(user, password),
        Some(Login { user, password: None }) => async_nats::ConnectOptions::with_token(user),
        None => async_nats::ConnectOptions::new(),
    };
    let client = options
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
        .connect(servers.as_str())
        .await
        .with_context(|| format!("connecting to NATS at {}", c.nats.shown()))?;
    // `retry_on_initial_connect` returns at once; wait for the first connection (bounded).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client.connection_state() != async_nats::connection::State::Connected {
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("cluster.nats {}: no NATS server answered within 10 s", c.nats.shown());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(client)
}

/// The user information of a NATS URL: `user:password@`, or a token alone.
struct Login {
    user: String,
    password: Option<String>,
}

/// The servers of `cluster.nats` (comma-separated URLs) without their user
/// information, and the first login found in them: the client takes it
/// apart from the URLs, which it logs.
fn nats_login(urls: &str) -> anyhow::Result<(String, Option<Login>)> {
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
    let (mut servers, mut login) = (Vec::new(), None);
    for text in urls.split(',').map(str::trim) {
        let mut url = url::Url::parse(text).map_err(|e| anyhow::anyhow!("not a URL: {e}"))?;
        if !url.username().is_empty() && login.is_none() {
            login = Some(Login { user: decode(url.username()), password: url.password().map(decode) });
        }
        let _ = (url.set_username(""), url.set_password(None));
        servers.push(url.to_string());
    }
    Ok((servers.join(","), login))
}

/// The event log: every tenant's recorded events, the replay window's worth per subject.
async fn make_event_stream(js: &jetstream::Context, c: &ClusterConfig, replay_events: usize) -> anyhow::Result<()> {
    let stream_name = format!("{}_events", c.name);
    js.get_or_create_stream(jetstream::stream::Config {
        name: stream_name.clone(),
        subjects: vec![format!("{}.ev.>", c.name)],
        max_messages_per_subject: replay_events as i64,
        max_bytes: -1,
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await
    .with_context(|| format!("making the JetStream stream {stream_name} (is JetStream enabled on {}?)", c.nats.shown()))?;
    Ok(())
}

/// The directory: a stream keeping the last value of each subject (a
/// key-value bucket, without the bucket API's newer server needs).
async fn make_directory_stream(js: &jetstream::Context, c: &ClusterConfig) -> anyhow::Result<jetstream::stream::Stream> {
    let dir_name = format!("{}_dir", c.name);
    js.get_or_create_stream(jetstream::stream::Config {
        name: dir_name.clone(),
        subjects: vec![format!("{}.dir.>", c.name)],
        max_messages_per_subject: 1,
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await
    .with_context(|| format!("making the JetStream stream {dir_name}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_nats_login_is_taken_out_of_the_urls() {
        let (servers, login) = super::nats_login("nats://map:p%40ss@a:4222, nats://b:4223").unwrap();
        assert_eq!(servers, "nats://a:4222,nats://b:4223");
        let login = login.unwrap();
        assert_eq!((login.user.as_str(), login.password.as_deref()), ("map", Some("p@ss")));
        let (servers, login) = super::nats_login("nats://s3cr3t-token@a").unwrap();
        assert_eq!((servers.as_str(), login.unwrap().password), ("nats://a", None));
        assert!(super::nats_login("nats://a").unwrap().1.is_none());
    }

    #[test]
    fn tokens_round_trip() {
        for s in ["default", "a.b c", "ünï", "x=y", ""] {
            let t = super::token(s);
            assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'='), "{t}");
            assert_eq!(super::untoken(&t).as_deref(), Some(s));
        }
    }
}
