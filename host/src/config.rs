//! TOML configuration with embedded defaults: every field may be left out.

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
    pub tenants: Vec<TenantConfig>,
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
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:4700".parse().expect("valid literal"),
            data_dir: PathBuf::from("data"),
            name: "map-gateway".into(),
            max_message_bytes: 1 << 20,
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
            if config.server.data_dir.is_relative() {
                config.server.data_dir = dir.join(&config.server.data_dir);
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
        if self.server.max_message_bytes < 1024 {
            bail!("server.max_message_bytes must be at least 1024");
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
    fn rejects_unknown_fields_and_bad_tenants() {
        assert!(toml::from_str::<Config>("[server]\nlisten_port = 1").is_err());
        let c: Config = toml::from_str("[auth]\nanonymous_tenant = \"nope\"").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("[[tenants]]\nid=\"a\"\napi_keys=[\"k\"]\n[[tenants]]\nid=\"b\"\napi_keys=[\"k\"]\n[auth]\nanonymous_tenant=\"\"").unwrap();
        assert!(c.validate().is_err());
    }
}
