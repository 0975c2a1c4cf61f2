//! Plugins: their settings, and which plugins a configuration loads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::secret::PluginSettings;
use super::Config;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PluginConfig {
    /// The component file (relative paths start at the config file's folder).
    pub path: PathBuf,
    /// Or an OCI artifact to fetch it from: `oci://HOST[:PORT]/REPO:TAG` or
    /// `…@sha256:…` (kept under `data_dir/oci`; a tag is looked up again only on reload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Handed to the plugin through the `config` import (tenants may override
    /// keys). Values whose keys name a secret are redacted where the host shows them.
    pub config: PluginSettings,
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
    /// The component's pinned SHA-256 (64 hex digits): a file with any other
    /// digest is refused at start and at reload (the old version keeps serving).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// For plugins that export `wasi:http/incoming-handler`: the longest one
    /// request may hold its instance, streaming its response (the head must
    /// still come within `deadline_ms`).
    pub stream_max_ms: u64,
    /// The longest such a stream may go without a byte reaching the client
    /// (the plugin wrote nothing, or the client read nothing).
    pub stream_idle_ms: u64,
    /// Such requests of one tenant open at once; more are refused (503) at once.
    pub max_streams: usize,
    /// The most the host holds of one stream's body: past it, the plugin's write waits.
    pub stream_buffer_bytes: usize,
}

/// How a plugin's calls are spread over instances.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMode {
    #[default]
    Pooled,
    Singleton,
}

impl Config {
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

    pub(super) fn validate(&self, name: &str) -> anyhow::Result<()> {
        if self.deadline_ms == 0 || self.memory_mb == 0 || self.memory_mb > 1024 || self.max_concurrency == 0 {
            bail!("plugin {name}: deadline_ms and max_concurrency must be positive and memory_mb between 1 and 1024");
        }
        if self.stream_max_ms < self.deadline_ms || self.stream_idle_ms == 0 || self.max_streams == 0 || self.stream_buffer_bytes < 1024 {
            bail!("plugin {name}: stream_max_ms must be at least deadline_ms, stream_idle_ms and max_streams positive, stream_buffer_bytes at least 1024");
        }
        if !self.config.expose().is_object() {
            bail!("plugin {name}: config must be a table");
        }
        match &self.source {
            Some(s) if !s.starts_with("oci://") => bail!("plugin {name}: source must be oci://HOST/REPO:TAG or oci://HOST/REPO@sha256:…"),
            Some(_) if !self.path.as_os_str().is_empty() => bail!("plugin {name}: give path or source, not both"),
            None if self.path.as_os_str().is_empty() => bail!("plugin {name}: path (a file) or source (an oci:// artifact) is required"),
            _ => {}
        }
        if self.sha256.as_ref().is_some_and(|d| d.len() != 64 || !d.bytes().all(|b| b.is_ascii_hexdigit())) {
            bail!("plugin {name}: sha256 must be 64 hexadecimal digits");
        }
        let reserved = ["/map", "/admin", "/healthz"].iter().any(|r| self.http_prefix == *r || self.http_prefix.starts_with(&format!("{r}/")));
        if !self.http_prefix.is_empty() && (!self.http_prefix.starts_with('/') || self.http_prefix.ends_with('/') || reserved) {
            bail!("plugin {name}: http_prefix must start with / , not end with /, and stay out of /map, /admin and /healthz");
        }
        Ok(())
    }
}
