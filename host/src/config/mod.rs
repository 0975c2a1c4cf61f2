//! TOML configuration with embedded defaults: every field may be left out.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

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
    /// Plugins by name. Absent: every `*.wasm` in `server.plugin_dir`, with default limits.
    pub plugins: Option<BTreeMap<String, PluginConfig>>,
    pub tenants: Vec<TenantConfig>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `sqlite://PATH` or `postgres://…`; empty: `sqlite://<data_dir>/gateway.db`.
    pub url: String,
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
}

/// Cluster mode: several gateways on one PostgreSQL and one NATS server
/// (with JetStream) behave as one. Off while `nats` is empty.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// `nats://host:port` of the NATS server (JetStream enabled).
    pub nats: String,
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
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig { nats: String::new(), node: String::new(), name: "map".into(), presence_timeout_ms: 3000, checkpoint_ms: 250 }
    }
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
    pub token: String,
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

impl Default for AcpConfig {
    fn default() -> Self {
        AcpConfig { client_request_timeout_ms: 30_000, agent_request_timeout_ms: 600_000 }
    }
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

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig { log_format: "text".into(), otlp_endpoint: String::new(), otlp_protocol: "http/protobuf".into(), sample_ratio: 1.0, service_name: "map-gateway".into() }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PluginConfig {
    /// The component file (relative paths start at the config file's folder).
    pub path: PathBuf,
    /// Handed to the plugin through the `config` import (tenants may override keys).
    pub config: serde_json::Value,
    /// Wall-clock limit of one call.
    pub deadline_ms: u64,
    /// Linear memory cap of one instance.
    pub memory_mb: u64,
    /// Ready instances kept per tenant.
    pub instances: usize,
    /// Calls of one tenant running at once; more wait up to `deadline_ms`,
    /// then get 4000 with `retryAfterMs`.
    pub max_concurrency: usize,
    /// For plugins that export `http-handler`: the path prefix they serve (e.g. `/mamp`).
    pub http_prefix: String,
    /// `pooled`: interchangeable instances, no state between calls.
    /// `singleton`: one long-lived instance per tenant receives every call, in order.
    pub mode: InstanceMode,
    /// Hosts the plugin may reach with `wasi:http/outgoing-handler`:
    /// `api.example.com` (any port) or `api.example.com:8443`. Nothing else is
    /// reachable. A host that resolves to a loopback or private address is
    /// refused unless that address itself is listed (`127.0.0.1:9000`).
    pub outbound_hosts: Vec<String>,
    /// An outbound request must have its response headers within this time.
    pub outbound_timeout_ms: u64,
    /// Largest outbound response body a plugin may read.
    pub outbound_max_bytes: usize,
}

/// How a plugin's calls are spread over instances.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMode {
    #[default]
    Pooled,
    Singleton,
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
    /// Where compiled plugins are cached; empty: `<data_dir>/cache`. Several
    /// gateways may share one (artifacts are written whole, then renamed).
    pub cache_dir: PathBuf,
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
    pub token_secret: String,
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

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TenantConfig {
    pub id: String,
    /// Credentials of `map/connect` `auth {method: "api-key"}` that land in this tenant.
    pub api_keys: Vec<Credential>,
    /// Credentials of `auth {method: "bearer"}` that land in this tenant.
    pub bearer_tokens: Vec<Credential>,
    /// `auth {method: "none"}` lands in this tenant as this principal, and
    /// `none` is offered in `authRequired.methods`. Absent: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub none_principal: Option<String>,
    /// Plugins enabled for this tenant. Absent: all configured plugins.
    pub plugins: Option<Vec<String>>,
    /// Per-plugin configuration overriding the plugin's own `config` keys.
    pub plugin_config: BTreeMap<String, serde_json::Value>,
    /// Bearer tokens that are JWTs issued by someone else, checked with this key.
    pub jwt: Option<JwtConfig>,
    /// Hosts each plugin may reach over HTTP for this tenant, besides the
    /// plugin's own `outbound_hosts` (same form).
    pub outbound_hosts: BTreeMap<String, Vec<String>>,
}

/// How a tenant checks JWT bearer tokens: signature, expiry, audience, issuer.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct JwtConfig {
    /// HS256/384/512: the shared secret.
    pub secret: String,
    /// RS*/ES*/PS*/EdDSA: a PEM public key file.
    pub public_key_file: PathBuf,
    /// `HS256` (default), `RS256`, `ES256`, … the only algorithm accepted.
    pub algorithm: String,
    /// Required `aud`; empty: not checked.
    pub audience: String,
    /// Required `iss`; empty: not checked.
    pub issuer: String,
    /// The claim naming the principal (default `sub`).
    pub principal_claim: String,
}

/// A configured secret: `"the-key"`, or `{ secret = "the-key", principal = "alice" }`
/// to name the principal it authenticates (default `<tenant>/<method>/<index>`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Credential {
    Secret(String),
    WithPrincipal {
        #[serde(alias = "key", alias = "token")]
        secret: String,
        principal: Option<String>,
    },
}

impl Credential {
    pub fn secret(&self) -> &str {
        match self {
            Credential::Secret(s) | Credential::WithPrincipal { secret: s, .. } => s,
        }
    }

    pub fn principal(&self) -> Option<&str> {
        match self {
            Credential::WithPrincipal { principal: Some(p), .. } => Some(p),
            _ => None,
        }
    }
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig { path: PathBuf::new(), config: serde_json::json!({}), deadline_ms: 1000, memory_mb: 64, instances: 4, max_concurrency: 64, http_prefix: String::new(), mode: InstanceMode::Pooled, outbound_hosts: Vec::new(), outbound_timeout_ms: 10_000, outbound_max_bytes: 8 << 20 }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig { url: String::new(), sync: "normal".into(), cache_mb: 64, event_log_flush_ms: 1000 }
    }
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

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:4700".parse().expect("valid literal"),
            data_dir: PathBuf::from("data"),
            name: "map-gateway".into(),
            plugin_dir: PathBuf::from("plugins/dist"),
            cache_dir: PathBuf::new(),
            max_message_bytes: 8 << 20,
            resume_window_secs: 300,
            allowed_origins: Vec::new(),
            header_timeout_ms: 10_000,
            idle_timeout_secs: 120,
            max_connections: 10_000,
            plugin_threads: 0,
            max_instances: 512,
            drain_secs: 10,
            metrics: true,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig { anonymous_tenant: "default".into(), anonymous_remote: false, failures_per_minute: 30, failures_per_connection: 5, token_secret: String::new(), token_ttl_secs: 3600 }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig { replay_events: 10_000, replay_bytes: 64 << 20, outbox_frames: 4096, outbox_bytes: 32 << 20 }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            storage: StorageConfig::default(),
            admin: AdminConfig::default(),
            telemetry: TelemetryConfig::default(),
            tls: TlsConfig::default(),
            acp: AcpConfig::default(),
            cluster: ClusterConfig::default(),
            plugins: None,
            tenants: vec![TenantConfig { id: "default".into(), ..Default::default() }],
        }
    }
}

impl Config {
    /// Read a TOML file; fields it leaves out keep their defaults.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut config: Config = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if let Some(dir) = path.parent() {
            let rebase = |p: &mut PathBuf| {
                if p.is_relative() {
                    *p = dir.join(&*p);
                }
            };
            rebase(&mut config.server.data_dir);
            rebase(&mut config.server.plugin_dir);
            if !config.server.cache_dir.as_os_str().is_empty() {
                rebase(&mut config.server.cache_dir);
            }
            for file in [&mut config.tls.cert_file, &mut config.tls.key_file] {
                if !file.as_os_str().is_empty() {
                    rebase(file);
                }
            }
            for j in config.tenants.iter_mut().filter_map(|t| t.jwt.as_mut()) {
                if !j.public_key_file.as_os_str().is_empty() {
                    rebase(&mut j.public_key_file);
                }
            }
            for plugin in config.plugins.iter_mut().flat_map(|m| m.values_mut()) {
                rebase(&mut plugin.path);
            }
        }
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.tenants.is_empty() {
            bail!("at least one [[tenants]] entry is required");
        }
        let mut seen = std::collections::HashSet::new();
        let mut credentials = std::collections::HashSet::new();
        for t in &self.tenants {
            if t.id.is_empty() || !seen.insert(t.id.as_str()) {
                bail!("tenant ids must be unique and non-empty (got {:?})", t.id);
            }
            for c in t.api_keys.iter().chain(&t.bearer_tokens) {
                if c.secret().is_empty() || !credentials.insert(c.secret()) {
                    bail!("a credential is empty or given more than once");
                }
            }
            if t.none_principal.as_deref().is_some_and(str::is_empty) {
                bail!("tenant {:?}: none_principal must name a principal", t.id);
            }
        }
        if self.tenants.iter().filter(|t| t.none_principal.is_some()).count() > 1 {
            bail!("none_principal is set on more than one tenant: auth method none can lead into one tenant only");
        }
        let anon = &self.auth.anonymous_tenant;
        if !anon.is_empty() && !seen.contains(anon.as_str()) {
            bail!("auth.anonymous_tenant {anon:?} is not a configured tenant");
        }
        if self.storage.cache_mb > 1 << 20 {
            bail!("storage.cache_mb must be at most 1048576");
        }
        if !matches!(self.storage.sync.as_str(), "normal" | "full") {
            bail!("storage.sync must be normal or full");
        }
        for (name, p) in self.plugins.iter().flatten() {
            p.validate(name)?;
        }
        if self.server.max_message_bytes < 1024 {
            bail!("server.max_message_bytes must be at least 1024");
        }
        if self.limits.outbox_bytes < self.server.max_message_bytes || self.limits.replay_bytes < self.server.max_message_bytes {
            bail!("limits.outbox_bytes and limits.replay_bytes must be at least server.max_message_bytes");
        }
        if self.server.max_connections == 0 || self.server.header_timeout_ms == 0 || self.server.idle_timeout_secs == 0 {
            bail!("server.max_connections, header_timeout_ms and idle_timeout_secs must be positive");
        }
        if !(1..=100_000).contains(&self.server.max_instances) {
            bail!("server.max_instances must be between 1 and 100000");
        }
        for o in &self.server.allowed_origins {
            if o != "*" && !(o.starts_with("http://") || o.starts_with("https://")) || o.ends_with('/') {
                bail!("server.allowed_origins: {o:?} is not an origin like https://app.example (or *)");
            }
        }
        if self.tls.cert_file.as_os_str().is_empty() != self.tls.key_file.as_os_str().is_empty() {
            bail!("tls.cert_file and tls.key_file go together: give both or neither");
        }
        let day = 1..=86_400_000;
        if !day.contains(&self.acp.client_request_timeout_ms) || !day.contains(&self.acp.agent_request_timeout_ms) {
            bail!("acp.client_request_timeout_ms and acp.agent_request_timeout_ms must be between 1 and 86400000 (a day)");
        }
        if self.cluster.enabled() {
            if !self.storage.url.starts_with("postgres") {
                bail!("cluster mode keeps plugin state in PostgreSQL: set storage.url to a postgres:// URL shared by every node");
            }
            if self.cluster.name.is_empty() || !self.cluster.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                bail!("cluster.name must be letters, digits, - and _");
            }
            if self.cluster.presence_timeout_ms < 100 || self.cluster.checkpoint_ms == 0 {
                bail!("cluster.presence_timeout_ms must be at least 100 and cluster.checkpoint_ms positive");
            }
        }
        let t = &self.telemetry;
        if !matches!(t.log_format.as_str(), "text" | "json") {
            bail!("telemetry.log_format must be text or json");
        }
        if !matches!(t.otlp_protocol.as_str(), "http/protobuf" | "http/json") {
            bail!("telemetry.otlp_protocol must be http/protobuf or http/json");
        }
        if !(t.otlp_endpoint.is_empty() || t.otlp_endpoint.starts_with("http://")) {
            bail!("telemetry.otlp_endpoint must be an http:// URL (or empty): export to a collector on the host or its network");
        }
        if !(0.0..=1.0).contains(&t.sample_ratio) {
            bail!("telemetry.sample_ratio must be between 0.0 and 1.0");
        }
        Ok(())
    }
}

impl Config {
    /// The configuration as TOML, with every secret replaced by `"<redacted>"`.
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        const R: &str = "<redacted>";
        let mut c = self.clone();
        for secret in [&mut c.admin.token, &mut c.auth.token_secret] {
            if !secret.is_empty() {
                *secret = R.into();
            }
        }
        if let Some(at) = c.storage.url.find('@') {
            // postgres://user:password@host/db: keep the user, hide the password.
            if let Some(colon) = c.storage.url[..at].rfind(':').filter(|&i| !c.storage.url[..i].ends_with('/') && c.storage.url[..i].contains("//")) {
                c.storage.url.replace_range(colon + 1..at, R);
            }
        }
        for t in &mut c.tenants {
            for cred in t.api_keys.iter_mut().chain(t.bearer_tokens.iter_mut()) {
                let principal = cred.principal().map(String::from);
                *cred = Credential::WithPrincipal { secret: R.into(), principal };
            }
            if let Some(j) = &mut t.jwt {
                if !j.secret.is_empty() {
                    j.secret = R.into();
                }
            }
        }
        Ok(toml::to_string(&c)?)
    }

    /// The storage URL in effect.
    pub fn storage_url(&self) -> String {
        if self.storage.url.is_empty() {
            format!("sqlite://{}", self.server.data_dir.join("gateway.db").display())
        } else {
            self.storage.url.clone()
        }
    }

    /// The plugins in effect: the `[plugins]` table, or every component in `plugin_dir`.
    pub fn plugin_settings(&self) -> anyhow::Result<BTreeMap<String, PluginConfig>> {
        if let Some(p) = &self.plugins {
            tracing::warn!(
                plugin_dir = %self.server.plugin_dir.display(),
                configured = ?p.keys().collect::<Vec<_>>(),
                "a [plugins] table is given: only those plugins load, none from plugin_dir (name each plugin you want, the standard ones too)"
            );
            return Ok(p.clone());
        }
        let mut found = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(&self.server.plugin_dir) else { return Ok(found) };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "wasm") {
                let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
                let settings = PluginConfig::beside(&path).with_context(|| format!("plugin {name}"))?;
                settings.validate(&name)?;
                found.insert(name, settings);
            }
        }
        Ok(found)
    }
}

impl PluginConfig {
    /// A component found in `plugin_dir`: default settings, or those of
    /// `NAME.toml` beside `NAME.wasm` (a `[plugins.NAME]` table without `path`).
    fn beside(wasm: &Path) -> anyhow::Result<PluginConfig> {
        let sidecar = wasm.with_extension("toml");
        let mut settings = match std::fs::read_to_string(&sidecar) {
            Ok(text) => toml::from_str(&text).with_context(|| format!("reading {}", sidecar.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => PluginConfig::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", sidecar.display())),
        };
        settings.path = wasm.to_path_buf();
        Ok(settings)
    }

    fn validate(&self, name: &str) -> anyhow::Result<()> {
        if self.deadline_ms == 0 || self.memory_mb == 0 || self.memory_mb > 1024 || self.max_concurrency == 0 {
            bail!("plugin {name}: deadline_ms and max_concurrency must be positive and memory_mb between 1 and 1024");
        }
        if !self.config.is_object() {
            bail!("plugin {name}: config must be a table");
        }
        let reserved = ["/map", "/admin", "/healthz"].iter().any(|r| self.http_prefix == *r || self.http_prefix.starts_with(&format!("{r}/")));
        if !self.http_prefix.is_empty() && (!self.http_prefix.starts_with('/') || self.http_prefix.ends_with('/') || reserved) {
            bail!("plugin {name}: http_prefix must start with / , not end with /, and stay out of /map, /admin and /healthz");
        }
        Ok(())
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

    #[test]
    fn prints_toml_without_secrets() {
        let c: Config = toml::from_str(
            "[admin]\ntoken=\"adm1n\"\n[storage]\nurl=\"postgres://u:pw@h/db\"\n[[tenants]]\nid=\"a\"\napi_keys=[\"k1\", {secret=\"k2\", principal=\"bob\"}]\njwt={secret=\"s3cr3t\"}",
        )
        .unwrap();
        let text = c.to_redacted_toml().unwrap();
        for secret in ["adm1n", "pw@", "k1", "k2", "s3cr3t"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("bob") && text.contains("postgres://u:<redacted>@h/db"), "{text}");
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.tenants[0].api_keys.len(), 2);
    }

    #[test]
    fn rejects_unknown_fields_and_bad_tenants() {
        assert!(toml::from_str::<Config>("[server]\nlisten_port = 1").is_err());
        let c: Config = toml::from_str("[auth]\nanonymous_tenant = \"nope\"").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("[[tenants]]\nid=\"a\"\napi_keys=[\"k\"]\n[[tenants]]\nid=\"b\"\napi_keys=[\"k\"]\n[auth]\nanonymous_tenant=\"\"").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("[[tenants]]\nid=\"a\"\nnone_principal=\"g\"\n[[tenants]]\nid=\"b\"\nnone_principal=\"h\"\n[auth]\nanonymous_tenant=\"\"").unwrap();
        assert!(c.validate().is_err(), "none leads into one tenant only");
        let c: Config = toml::from_str("[[tenants]]\nid=\"a\"\nnone_principal=\"\"\n[auth]\nanonymous_tenant=\"\"").unwrap();
        assert!(c.validate().is_err(), "a named principal");
    }

    #[test]
    fn acp_bounds_are_checked() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!((c.acp.client_request_timeout_ms, c.acp.agent_request_timeout_ms), (30_000, 600_000));
        for bad in ["agent_request_timeout_ms = 0", "client_request_timeout_ms = 0", "agent_request_timeout_ms = 86400001"] {
            let c: Config = toml::from_str(&format!("[acp]\n{bad}")).unwrap();
            assert!(c.validate().is_err(), "{bad}");
        }
    }
}
