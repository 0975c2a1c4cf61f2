//! TOML configuration with embedded defaults: every field may be left out.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub auth: AuthConfig,
    pub limits: LimitsConfig,
    pub storage: StorageConfig,
    pub admin: AdminConfig,
    /// Plugins by name. Absent: every `*.wasm` in `server.plugin_dir`, with default limits.
    pub plugins: Option<BTreeMap<String, PluginConfig>>,
    pub tenants: Vec<TenantConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `sqlite://PATH` or `postgres://…`; empty: `sqlite://<data_dir>/gateway.db`.
    pub url: String,
    /// SQLite only: `normal` survives a crash of the gateway process, `full`
    /// (fsync on every commit) also a crash of the machine.
    pub sync: String,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Bearer token for `/admin/*`. Empty: the admin API answers loopback peers only.
    pub token: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
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
    /// For plugins of the `http-extension` world: the path prefix they serve (e.g. `/mamp`).
    pub http_prefix: String,
}

#[derive(Debug, Clone, Deserialize)]
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
    /// Largest accepted frame, line or HTTP body, in bytes.
    pub max_message_bytes: usize,
    /// How long a disconnected session can be resumed with its `resumeToken`.
    pub resume_window_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Tenant for connections that present no credentials. Empty: credentials required.
    pub anonymous_tenant: String,
    /// Also let peers from other hosts in without credentials (off: loopback only).
    pub anonymous_remote: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Events each tenant keeps for `map/replay`.
    pub replay_events: usize,
    /// Notifications queued for one connection before its subscriptions drop
    /// events (and report `subscription.overflow`).
    pub outbox_frames: usize,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TenantConfig {
    pub id: String,
    /// Credentials of `map/connect` `auth {method: "api-key"}` that land in this tenant.
    pub api_keys: Vec<String>,
    /// Credentials of `auth {method: "bearer"}` that land in this tenant.
    pub bearer_tokens: Vec<String>,
    /// Plugins enabled for this tenant. Absent: all configured plugins.
    pub plugins: Option<Vec<String>>,
    /// Per-plugin configuration overriding the plugin's own `config` keys.
    pub plugin_config: BTreeMap<String, serde_json::Value>,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig { path: PathBuf::new(), config: serde_json::json!({}), deadline_ms: 1000, memory_mb: 64, instances: 4, http_prefix: String::new() }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig { url: String::new(), sync: "normal".into() }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:4700".parse().expect("valid literal"),
            data_dir: PathBuf::from("data"),
            name: "map-gateway".into(),
            plugin_dir: PathBuf::from("plugins/dist"),
            max_message_bytes: 8 << 20,
            resume_window_secs: 300,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig { anonymous_tenant: "default".into(), anonymous_remote: false }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig { replay_events: 10_000, outbox_frames: 4096 }
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
                if !credentials.insert(c.as_str()) {
                    bail!("a credential is given to more than one tenant");
                }
            }
        }
        let anon = &self.auth.anonymous_tenant;
        if !anon.is_empty() && !seen.contains(anon.as_str()) {
            bail!("auth.anonymous_tenant {anon:?} is not a configured tenant");
        }
        if !matches!(self.storage.sync.as_str(), "normal" | "full") {
            bail!("storage.sync must be normal or full");
        }
        for (name, p) in self.plugins.iter().flatten() {
            if p.deadline_ms == 0 || p.memory_mb == 0 || p.memory_mb > 1024 {
                bail!("plugin {name}: deadline_ms must be positive and memory_mb between 1 and 1024");
            }
            if !p.config.is_object() {
                bail!("plugin {name}: config must be a table");
            }
            let reserved = ["/map", "/admin", "/healthz"].iter().any(|r| p.http_prefix == *r || p.http_prefix.starts_with(&format!("{r}/")));
            if !p.http_prefix.is_empty() && (!p.http_prefix.starts_with('/') || p.http_prefix.ends_with('/') || reserved) {
                bail!("plugin {name}: http_prefix must start with / , not end with /, and stay out of /map, /admin and /healthz");
            }
        }
        if self.server.max_message_bytes < 1024 {
            bail!("server.max_message_bytes must be at least 1024");
        }
        Ok(())
    }
}

impl Config {
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
            return Ok(p.clone());
        }
        let mut found = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(&self.server.plugin_dir) else { return Ok(found) };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "wasm") {
                let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
                found.insert(name, PluginConfig { path, ..PluginConfig::default() });
            }
        }
        Ok(found)
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
    fn rejects_unknown_fields_and_bad_tenants() {
        assert!(toml::from_str::<Config>("[server]\nlisten_port = 1").is_err());
        let c: Config = toml::from_str("[auth]\nanonymous_tenant = \"nope\"").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("[[tenants]]\nid=\"a\"\napi_keys=[\"k\"]\n[[tenants]]\nid=\"b\"\napi_keys=[\"k\"]\n[auth]\nanonymous_tenant=\"\"").unwrap();
        assert!(c.validate().is_err());
    }
}
