//! Which components a configuration loads: each configured plugin, and
//! the versions tenants pin for themselves (`plugin_versions`), each
//! fetched, checked (pin, signers) and compiled once, or reused when
//! unchanged since the last load.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::retention::{self, kept_dir};
use super::{artifacts, oci, outbound, signing, Limits, Loaded, Plugin, PluginHost};
use map_config::{Config, PluginConfig, TenantConfig};

/// The key a tenant's plugin is loaded under: its name, or for a version
/// the tenant pins, the name and that version's source.
pub(super) fn key(tenant: &TenantConfig, name: &str) -> String {
    match tenant.plugin_versions.get(name) {
        Some(source) => format!("{name} {source}"),
        None => name.to_string(),
    }
}

/// The settings of a version a tenant pins: the plugin's own, with the component from `source`.
fn pinned_version(base: &PluginConfig, source: &str) -> PluginConfig {
    let (path, source) = if source.starts_with("oci://") { (PathBuf::new(), Some(source.to_string())) } else { (PathBuf::from(source), None) };
    PluginConfig { path, source, sha256: None, ..base.clone() }
}

/// A plugin's settings with `path` at its component: the file it names,
/// or the one fetched from its OCI `source`.
async fn fetched(config: &Config, settings: &PluginConfig, reload: bool) -> anyhow::Result<PluginConfig> {
    let Some(source) = &settings.source else { return Ok(settings.clone()) };
    let path = oci::fetch(&config.oci, &config.server.data_dir, source, reload).await?;
    Ok(PluginConfig { path, ..settings.clone() })
}

/// Keep a loaded component (once per digest, with its defaults and
/// signature), so a rollback finds it after its file changed; a failure
/// only costs rollbacks to it. Noted as serving now, for `retention`.
fn keep(config: &Config, name: &str, wasm: &Path, digest: &str) {
    let dir = kept_dir(config, digest);
    if !dir.join("plugin.wasm").exists() {
        copy_in(&dir, wasm, digest);
    }
    if dir.exists() {
        retention::mark_served(&dir, name);
    }
}

fn copy_in(dir: &Path, wasm: &Path, digest: &str) {
    let tmp = dir.with_extension(format!("{}.tmp", std::process::id()));
    let copied = std::fs::create_dir_all(&tmp).and_then(|_| {
        for (from, to) in
            [(wasm.with_extension("toml"), "plugin.toml"), (signing::signature_path(wasm), "plugin.wasm.sig"), (wasm.to_path_buf(), "plugin.wasm")]
        {
            if from.exists() {
                std::fs::copy(&from, tmp.join(to))?;
            }
        }
        std::fs::rename(&tmp, dir)
    });
    if let Err(e) = copied {
        let _ = std::fs::remove_dir_all(&tmp);
        tracing::warn!(digest, error = %e, "could not keep a copy of the component for rollbacks");
    }
}

impl PluginHost {
    /// Every component the configuration binds, by key (see `key`).
    pub(super) async fn load_all(
        &self,
        config: &Config,
        wanted: &BTreeMap<String, PluginConfig>,
        loaded: &HashMap<String, Loaded>,
        reload: bool,
    ) -> anyhow::Result<HashMap<String, Loaded>> {
        let binds = |t: &TenantConfig, name: &str| t.plugins.as_ref().is_none_or(|l| l.iter().any(|p| p == name));
        let mut next = HashMap::new();
        for (name, settings) in wanted {
            let users: Vec<&str> = config.tenants.iter().filter(|t| binds(t, name) && !t.plugin_versions.contains_key(name)).map(|t| t.id.as_str()).collect();
            next.insert(name.clone(), self.entry(config, loaded, name, name, settings, &users, reload).await?);
        }
        for t in &config.tenants {
            for (name, source) in &t.plugin_versions {
                let base = wanted.get(name).with_context(|| format!("tenant {}: plugin_versions names {name}, which is not a configured plugin", t.id))?;
                let key = key(t, name);
                if next.contains_key(&key) {
                    continue;
                }
                let users: Vec<&str> =
                    config.tenants.iter().filter(|u| binds(u, name) && u.plugin_versions.get(name) == Some(source)).map(|u| u.id.as_str()).collect();
                let settings = pinned_version(base, source);
                next.insert(key.clone(), self.entry(config, loaded, &key, name, &settings, &users, reload).await?);
            }
        }
        Ok(next)
    }

    /// One component: fetched, checked against its pin and the signers of
    /// the gateway and of the tenants that use it (before anything is
    /// compiled), then loaded, or the last load reused when unchanged.
    #[allow(clippy::too_many_arguments)]
    async fn entry(
        &self,
        config: &Config,
        loaded: &HashMap<String, Loaded>,
        key: &str,
        name: &str,
        settings: &PluginConfig,
        users: &[&str],
        reload: bool,
    ) -> anyhow::Result<Loaded> {
        let mut settings = fetched(config, settings, reload).await.with_context(|| format!("plugin {name}"))?;
        // Errors name what the user wrote: the oci:// reference, not the cache it was pulled into.
        let mut shown = settings.source.clone().unwrap_or_else(|| settings.path.display().to_string());
        let mut bytes = std::fs::read(&settings.path).with_context(|| format!("reading plugin {name} at {}", settings.path.display()))?;
        let mut digest = map_store::digest_hex(&bytes);
        if let Some(pin) = config.pins.get(key).filter(|pin| **pin != digest) {
            // A rollout names another version than the file's: one this node kept.
            let kept = kept_dir(config, pin).join("plugin.wasm");
            bytes = std::fs::read(&kept).map_err(|_| anyhow::anyhow!("plugin {name}: this node has no component with SHA-256 {pin} ({shown} is {digest})"))?;
            (shown, settings.path, digest) = (kept.display().to_string(), kept, pin.clone());
        }
        let settings = &settings;
        let signer = signing::admit(config, name, &settings.path, &shown, &digest, users)?;
        let reuse = loaded.get(key).filter(|l| l.digest == digest && &l.settings == settings);
        let mut entry = match reuse {
            Some(l) => l.clone(),
            None => self.load(name, &shown, settings, bytes, digest).await?,
        };
        entry.signer = signer;
        keep(config, name, &settings.path, &entry.digest);
        Ok(entry)
    }

    /// Compile and start a component; `shown` names it in errors (its file or `oci://` reference).
    async fn load(&self, name: &str, shown: &str, settings: &PluginConfig, bytes: Vec<u8>, digest: String) -> anyhow::Result<Loaded> {
        if let Some(pinned) = settings.sha256.as_deref().filter(|p| !p.eq_ignore_ascii_case(&digest)) {
            anyhow::bail!("plugin {name}: {shown} has SHA-256 {digest}, but its sha256 pins {pinned}: refusing to load it");
        }
        let source = artifacts::Source { engine: &self.engine, name, bytes, digest: &digest, cache_dir: &self.cache_dir, shared: self.shared.as_ref() };
        let (component, origin) = artifacts::load(source).await.with_context(|| format!("compiling plugin {name} ({shown})"))?;
        let limits = Limits {
            deadline: Duration::from_millis(settings.deadline_ms),
            memory_bytes: (settings.memory_mb as usize) << 20,
            idle_instances: settings.instances,
            max_result_bytes: self.max_result_bytes,
            max_concurrency: settings.max_concurrency,
            mode: settings.mode,
            stream_max: Duration::from_millis(settings.stream_max_ms),
            stream_idle: Duration::from_millis(settings.stream_idle_ms),
            max_streams: settings.max_streams,
        };
        let none = outbound::Policy::new(&[], Duration::ZERO, 0, "~loader", name)?;
        let ctx = self.context(self.scratch.clone(), name, settings.config.expose().clone(), settings, false, none);
        let plugin = Plugin::load(name, &component, &self.linker, self.budget.clone(), ctx, limits).await.with_context(|| format!("loading plugin {name}"))?;
        tracing::info!(plugin = name, version = plugin.version(), artifact = origin.as_str(), "plugin loaded");
        Ok(Loaded { digest, signer: None, settings: settings.clone(), plugin: Arc::new(plugin), origin })
    }
}
