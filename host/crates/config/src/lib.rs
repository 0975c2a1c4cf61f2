//! TOML configuration with embedded defaults (`defaults`): every field may
//! be left out. The sections are here; tenants and plugins have files of
//! their own, as do the checks a loaded file must pass (`validate`), the
//! types that hold its secrets (`secret`) and printing it without them
//! (`redact`).

mod credentials;
mod defaults;
mod env;
mod oci;
mod plugins;
mod redact;
mod secret;
mod tenants;
mod validate;
mod workspace;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub use self::credentials::{pattern_matches, CredentialsConfig, EnvSecret, GrantConfig, OAuth2Provider, ProviderConfig, StaticProvider, StaticSecret};
pub use self::env::PREFIX as ENV_PREFIX;
pub use self::oci::{OciAuth, OciConfig};
pub use self::plugins::{InstanceMode, PluginConfig};
pub use self::secret::{redact_url, secret_name, PluginSettings, Secret, SecretUrl};
pub use self::tenants::{AgentPermissionsConfig, Credential, ExposeConfig, FederationConfig, JwksConfig, JwtConfig, PeerConfig, TenantConfig, TrustedIssuer};
pub use self::workspace::WorkspaceConfig;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub auth: AuthConfig,
    pub limits: LimitsConfig,
    pub storage: StorageConfig,
    pub admin: AdminConfig,
    pub telemetry: TelemetryConfig,
    pub tls: TlsConfig,
    pub acp: AcpConfig,
    pub cluster: ClusterConfig,
    pub workspace: WorkspaceConfig,
    pub oci: OciConfig,
    /// The component digest each plugin must have, set for one reload by a
    /// cluster rollout (never read from a file).
    #[serde(skip)]
    pub pins: BTreeMap<String, String>,
    /// Component digests kept on disk whatever `server.keep_versions` says:
    /// those a rollback of the cluster's current rollout would pin (never
    /// read from a file).
    #[serde(skip)]
    pub keep_digests: std::collections::BTreeSet<String>,
    /// Plugins by name. Absent: every `*.wasm` in `server.plugin_dir`, with default limits.
    pub plugins: Option<BTreeMap<String, PluginConfig>>,
    pub tenants: Vec<TenantConfig>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the HTTP/WebSocket listener.
    pub listen: SocketAddr,
    /// Where the gateway keeps its files (the SQLite database, compiled plugins).
    pub data_dir: PathBuf,
    /// Name reported in `systemInfo`.
    pub name: String,
    /// Where plugins are found when no `[plugins]` table is given.
    pub plugin_dir: PathBuf,
    /// Public keys (`ed25519:<base64>`) plugins must be signed by; empty: none required.
    pub plugin_signers: Vec<String>,
    /// Where compiled plugins are cached; empty: `<data_dir>/cache`. Several
    /// gateways may share one (artifacts are written whole, then renamed).
    pub cache_dir: PathBuf,
    /// Older versions of each plugin kept in `data_dir/components`, most
    /// recently served first, besides the one serving and those the
    /// cluster's rollout pins or a rollback would return to; more are removed.
    pub keep_versions: usize,
    /// Largest accepted frame, line or HTTP body, in bytes.
    pub max_message_bytes: usize,
    /// How long a disconnected session can be resumed with its `resumeToken`.
    pub resume_window_secs: u64,
    /// Browser origins (`https://app.example`) allowed to open WebSockets, call
    /// `/map/rpc` and read `/map/events`. Same-origin requests are always allowed.
    pub allowed_origins: Vec<String>,
    /// A new connection must send its first complete request head (after
    /// its TLS handshake) within this time of being accepted, and each later
    /// HTTP/1.1 one within this time of the previous answer.
    pub header_timeout_ms: u64,
    /// An HTTP connection with no request in flight is closed after this long;
    /// a WebSocket that answers no ping for this long is closed too.
    pub idle_timeout_secs: u64,
    /// Open connections at most. At the cap, the oldest connection that has
    /// not yet sent a request head is closed to admit a new one; with none,
    /// the new one is answered 503 and closed.
    pub max_connections: usize,
    /// Threads for plugin calls that run past their first 5 ms slice or wait,
    /// apart from the ones serving connections (0: one per CPU, at least 2),
    /// so a busy plugin cannot starve the core.
    pub plugin_threads: usize,
    /// Plugin instances alive at once across every tenant and plugin (the
    /// engine reserves memory for this many). When all are taken, idle ones
    /// are retired first; calls then wait up to their deadline for one.
    pub max_instances: usize,
    /// On SIGTERM or Ctrl-C: how long calls in flight may take to finish
    /// and connections to close before the process exits anyway.
    pub drain_secs: u64,
    /// Record metrics and serve them at `GET /metrics` (admin token, or
    /// loopback peers when none is set).
    pub metrics: bool,
}

impl ServerConfig {
    /// Where compiled plugins are cached.
    pub fn plugin_cache(&self) -> PathBuf {
        if self.cache_dir.as_os_str().is_empty() {
            self.data_dir.join("cache")
        } else {
            self.cache_dir.clone()
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Tenant for connections that present no credentials. Empty: credentials required.
    pub anonymous_tenant: String,
    /// Also let peers from other hosts in without credentials (off: loopback only).
    pub anonymous_remote: bool,
    /// Failed authentications one source address may make per minute before
    /// it is refused (4000 with `retryAfterMs`, HTTP 429) until the minute ends.
    pub failures_per_minute: u32,
    /// Failed authentications one connection may make before it is closed.
    pub failures_per_connection: u32,
    /// Key that signs the access tokens `map/auth/refresh` issues (HS256).
    /// Empty: a random key per process, so tokens end with the process.
    pub token_secret: Secret,
    /// Lifetime of an issued access token.
    pub token_ttl_secs: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Events each tenant keeps for `map/replay`.
    pub replay_events: usize,
    /// Bytes of events each tenant keeps for `map/replay` (the oldest go first).
    pub replay_bytes: usize,
    /// Notifications queued for one connection before its subscriptions drop
    /// events (and report `subscription.overflow`).
    pub outbox_frames: usize,
    /// Bytes queued for one connection before its notifications are dropped the same way.
    pub outbox_bytes: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `sqlite://PATH` or `postgres://…`; empty: `sqlite://<data_dir>/gateway.db`.
    pub url: SecretUrl,
    /// SQLite only: `normal` survives a crash of the gateway process, `full`
    /// (fsync on every commit) also a crash of the machine.
    pub sync: String,
    /// SQLite only: MiB of recently read and written values kept in memory
    /// (0: none). PostgreSQL reads always go to the database.
    pub cache_mb: usize,
    /// Embedded default: how often each tenant's replay window is written
    /// to `<data_dir>/events.db` (events newer than this are lost to a
    /// kill -9; a graceful stop writes everything).
    pub event_log_flush_ms: u64,
    /// PostgreSQL only: once the database is found unreachable, storage
    /// calls fail at once (retryable) and a connection is tried this often
    /// until one succeeds.
    pub probe_ms: u64,
}

/// Cluster mode: several gateways on one PostgreSQL and one NATS server
/// (with JetStream) behave as one. Off while `nats` is empty.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// `nats://host:port` of the NATS server (JetStream enabled).
    pub nats: SecretUrl,
    /// This node's name, unique in the cluster; empty: the host name and process id.
    pub node: String,
    /// Prefix of every stream, bucket and subject the cluster uses: clusters
    /// sharing one NATS server take different names.
    pub name: String,
    /// A node not heard from for this long is dead: its sessions are
    /// disconnected (and may be resumed elsewhere) and, after the resume
    /// window, its agents are unregistered.
    pub presence_timeout_ms: u64,
    /// How often subscription positions are saved for a resume on another
    /// node (a resumed subscription starts from its next-to-last save).
    pub checkpoint_ms: u64,
    /// A singleton plugin's owner holds a lease for this long and renews it
    /// every quarter of it; when the owner dies, another node takes over
    /// within about 1.25 times this (docs/operations/cluster.md).
    pub singleton_lease_ms: u64,
    /// Events of one tenant that this node made and the cluster's event
    /// log has not yet acknowledged, at most this many MiB: past it the
    /// tenant's `map/send` calls here are refused (4000, retryable) until
    /// the log catches up, so a slow or unreachable log cannot fill memory.
    pub event_backlog_mb: usize,
}

impl ClusterConfig {
    pub fn enabled(&self) -> bool {
        !self.nats.is_empty()
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Bearer token for `/admin/*`. Empty: the admin API answers loopback peers only.
    pub token: Secret,
}

/// The ACP bridge (`/acp` and `map-gateway acp`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AcpConfig {
    /// How long a request of a MAP agent to the editor (a permission prompt,
    /// a file read) may stay unanswered before the agent is told it failed.
    pub client_request_timeout_ms: u64,
    /// How long an editor's request may wait for the MAP agent while the
    /// agent sends nothing on its session; then it fails, and a prompt is
    /// cancelled on the agent's side.
    pub agent_request_timeout_ms: u64,
}

/// TLS on the listener, for deployments without a proxy in front. Both
/// files empty: plain TCP. The files are read again on SIGHUP and when they
/// change, so a renewed certificate is served without a restart.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

impl TlsConfig {
    pub fn enabled(&self) -> bool {
        !self.cert_file.as_os_str().is_empty()
    }
}

/// Logs and traces. Read once at start (a reload does not change them).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Log lines on stderr as `text` or `json` (one object per line).
    pub log_format: String,
    /// OTLP/HTTP collector for traces, e.g. `http://127.0.0.1:4318` (spans
    /// go to `/v1/traces` under it; plain HTTP, so a collector on the host
    /// or its private network). Empty: no traces are made.
    pub otlp_endpoint: String,
    /// `http/protobuf` or `http/json`.
    pub otlp_protocol: String,
    /// Share of traces started here that are kept (0.0 to 1.0); a caller's
    /// `traceparent` decides for the traces it continues.
    pub sample_ratio: f64,
    /// The spans' `service.name`.
    pub service_name: String,
}

impl Config {
    /// Read a TOML file, then the process's `MAP_GATEWAY__SECTION__KEY`
    /// variables over it (`env`); fields neither sets keep their defaults.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut table: toml::Table = text.parse().with_context(|| format!("parsing {}", path.display()))?;
        env::overlay(&mut table, std::env::vars())?;
        let mut config: Config = table.try_into().with_context(|| format!("parsing {} (and the MAP_GATEWAY__ variables)", path.display()))?;
        if let Some(dir) = path.parent() {
            config.rebase(dir);
        }
        config.validate()?;
        Ok(config)
    }

    /// The embedded defaults with the process's `MAP_GATEWAY__SECTION__KEY`
    /// variables over them: the configuration without a file.
    pub fn from_env() -> anyhow::Result<Config> {
        let mut table = toml::Table::new();
        env::overlay(&mut table, std::env::vars())?;
        if table.is_empty() {
            return Ok(Config::default());
        }
        let config: Config = table.try_into().context("parsing the MAP_GATEWAY__ variables")?;
        config.validate()?;
        Ok(config)
    }

    /// Relative paths start at the config file's folder (`dir`); empty ones stay empty.
    fn rebase(&mut self, dir: &Path) {
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        rebase(&mut self.server.data_dir);
        rebase(&mut self.server.plugin_dir);
        if !self.server.cache_dir.as_os_str().is_empty() {
            rebase(&mut self.server.cache_dir);
        }
        for file in [&mut self.tls.cert_file, &mut self.tls.key_file] {
            if !file.as_os_str().is_empty() {
                rebase(file);
            }
        }
        for j in self.tenants.iter_mut().filter_map(|t| t.jwt.as_mut()) {
            if !j.public_key_file.as_os_str().is_empty() {
                rebase(&mut j.public_key_file);
            }
        }
        for peer in self.tenants.iter_mut().filter_map(|t| t.federation.as_mut()).flat_map(|f| f.peers.iter_mut()) {
            if !peer.ca_file.as_os_str().is_empty() {
                rebase(&mut peer.ca_file);
            }
        }
        for version in self.tenants.iter_mut().flat_map(|t| t.plugin_versions.values_mut()).filter(|v| !v.starts_with("oci://")) {
            *version = dir.join(&*version).to_string_lossy().into_owned();
        }
        // A plugin fetched from a registry (`source`) has no path.
        for plugin in self.plugins.iter_mut().flat_map(|m| m.values_mut()).filter(|p| !p.path.as_os_str().is_empty()) {
            rebase(&mut plugin.path);
        }
    }

    /// The storage URL in effect (with its password: to connect with).
    pub fn storage_url(&self) -> String {
        if self.storage.url.is_empty() {
            format!("sqlite://{}", self.server.data_dir.join("gateway.db").display())
        } else {
            self.storage.url.expose().to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_embedded_default() {
        let c: Config = toml::from_str("").unwrap();
        c.validate().unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:4700");
        assert_eq!(c.tenants[0].id, "default");
        assert_eq!(c.auth.anonymous_tenant, "default");
    }
}
