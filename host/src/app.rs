//! The composition root: opens storage, builds the plugin host and the
//! tenants, binds the plugins to the tenants, and hands it all to the core.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::journal::Journal;
use map_cluster::{Cluster, Joining};
use map_config::Config;
use map_core::extensions::ExtensionHost;
use map_core::fabric::LocalFabric;
use map_core::{Gateway, Tenants};
use map_plugin_host::PluginHost;
use map_store::Store;

/// A gateway with its storage and plugins, ready to serve.
pub async fn start(config: Config, config_path: Option<PathBuf>) -> anyhow::Result<Arc<Gateway>> {
    crate::token_client::install();
    if config.server.metrics {
        map_observe::metrics::install()?;
    }
    std::fs::create_dir_all(&config.server.data_dir).map_err(|e| anyhow::anyhow!("creating the data directory {}: {e}", config.server.data_dir.display()))?;
    let db = Store::open(&config.storage_url(), config.storage.sync == "full", config.storage.cache_mb << 20, Duration::from_millis(config.storage.probe_ms))
        .await?;
    db.sample_cache();
    let mut host = PluginHost::new(&config, db.clone())?;
    if config.cluster.enabled() {
        let cluster = Cluster::connect(&config).await?;
        host.join_cluster(cluster.singletons(), &cluster.node, Duration::from_millis(config.cluster.singleton_lease_ms));
        let tenants = Gateway::tenants_with(&config, |id| cluster.fabric_for(id))?;
        let joining = follow_the_rollout(&host, &config, &tenants, &db).await?;
        let host: Arc<dyn ExtensionHost> = Arc::new(host);
        let gateway = Arc::new(Gateway::assemble(config, tenants, Some(host), config_path));
        cluster.start(&gateway, joining).await?;
        crate::federation::start(&gateway, &db).await?;
        sample_log_sizes(&gateway);
        return Ok(gateway);
    }
    let journal = Journal::open(&config.server.data_dir.join("events.db"), config.limits.replay_events)?;
    let mut failed = None;
    let tenants = Gateway::tenants_with(&config, |id| {
        let fresh = LocalFabric::new(config.limits.replay_events, config.limits.replay_bytes);
        match journal.fabric_for(id, fresh) {
            Ok(f) => f,
            Err(e) => {
                failed.get_or_insert(e);
                Arc::new(LocalFabric::new(config.limits.replay_events, config.limits.replay_bytes))
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(e.context("reading the event log"));
    }
    for t in tenants.all() {
        journal.keep_scopes(t)?;
    }
    journal.spawn_flusher(Duration::from_millis(config.storage.event_log_flush_ms));
    host.apply(&config, &tenants).await?;
    let host: Arc<dyn ExtensionHost> = Arc::new(host);
    let gateway = Arc::new(Gateway::assemble(config, tenants, Some(host), config_path));
    gateway.at_stop(move || journal.flush());
    crate::federation::start(&gateway, &db).await?;
    sample_log_sizes(&gateway);
    Ok(gateway)
}

/// Load the plugins a cluster node starts with: the versions of the
/// cluster's current rollout (kept in PostgreSQL), so a node that restarts,
/// or was down while it ran, serves what the others serve; its
/// configuration's versions when there is none, or when it cannot (then
/// it reports why).
async fn follow_the_rollout(host: &PluginHost, config: &Config, tenants: &Tenants, db: &Store) -> anyhow::Result<Joining> {
    let log = db.rollout_log();
    let current = match &log {
        Some(log) => log.current(&config.cluster.name).await.map_err(|e| anyhow::anyhow!("reading the cluster's current rollout: {e}"))?,
        None => None,
    };
    let Some(rollout) = &current else {
        host.apply(config, tenants).await?;
        return Ok(Joining { log, current, error: None });
    };
    let mut pinned = config.clone();
    pinned.pins = rollout.pins.clone();
    pinned.keep_digests = rollout.previous.values().cloned().collect();
    let error = match host.apply(&pinned, tenants).await {
        Ok(()) => None,
        Err(e) => {
            tracing::error!(rollout = %rollout.id, error = %format!("{e:#}"), "could not load the cluster's current rollout; starting on this node's configuration");
            // What the rollout and its rollback pin stays kept all the same.
            let mut own = config.clone();
            own.keep_digests = rollout.previous.values().chain(rollout.pins.values()).cloned().collect();
            host.apply(&own, tenants).await?;
            Some(format!("{e:#}"))
        }
    };
    Ok(Joining { log, current, error })
}

/// Report each tenant's replay log size when metrics are scraped.
fn sample_log_sizes(gateway: &Arc<Gateway>) {
    let weak = Arc::downgrade(gateway);
    map_observe::metrics::sample_on_scrape(move || {
        if let Some(gw) = weak.upgrade() {
            for t in gw.tenants.all() {
                let log = t.fabric.inspect();
                map_observe::metrics::event_log(&t.id, log.log_events, log.log_bytes);
            }
        }
    });
}

/// Check a configuration as `serve` would use it, without serving: tenants
/// and credentials, every plugin compiled, instantiated and bound to each
/// tenant that names it. Nothing is written to its data directory (a
/// throwaway store and artifact cache are used). A summary, or what is wrong.
pub async fn check(mut config: Config) -> anyhow::Result<String> {
    let scratch = std::env::temp_dir().join(format!("map-gateway-check-{}-{}", std::process::id(), map_protocol::ids::now_ms()));
    std::fs::create_dir_all(&scratch)?;
    let result = async {
        if config.tls.enabled() {
            crate::transport::tls::load(&config.tls.cert_file, &config.tls.key_file)?;
        }
        let storage = map_config::redact_url(&config.storage_url());
        let plugin_dir = std::path::absolute(&config.server.plugin_dir).unwrap_or_else(|_| config.server.plugin_dir.clone());
        config.server.data_dir = scratch.clone();
        let db = Store::open(&format!("sqlite://{}", scratch.join("check.db").display()), false, 0, Duration::ZERO).await?;
        let host = PluginHost::new(&config, db)?;
        let tenants = Gateway::tenants_of(&config)?;
        host.apply(&config, &tenants).await?;
        let status = host.status().await;
        let plugins: Vec<String> = status["plugins"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| format!("{} {} (sha256 {})", p["name"].as_str().unwrap_or("?"), p["version"].as_str().unwrap_or("?"), p["digest"].as_str().unwrap_or("?")))
            .collect();
        let plugins = if plugins.is_empty() { format!("none (no component in {})", plugin_dir.display()) } else { plugins.join(", ") };
        anyhow::Ok(format!("configuration OK: {} tenant(s); storage: {storage} (not contacted); plugins: {plugins}", config.tenants.len()))
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}
