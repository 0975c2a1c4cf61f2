//! The composition root: opens storage, builds the plugin host and the
//! tenants, binds the plugins to the tenants, and hands it all to the core.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::core::extensions::ExtensionHost;
use crate::core::Gateway;
use crate::plugins::PluginHost;
use crate::store::Store;

/// A gateway with its storage and plugins, ready to serve.
pub async fn start(config: Config, config_path: Option<PathBuf>) -> anyhow::Result<Arc<Gateway>> {
    std::fs::create_dir_all(&config.server.data_dir).map_err(|e| anyhow::anyhow!("creating the data directory {}: {e}", config.server.data_dir.display()))?;
    let db = Store::open(&config.storage_url(), config.storage.sync == "full", config.storage.cache_mb << 20).await?;
    let host = PluginHost::new(&config, db)?;
    let tenants = Gateway::tenants_of(&config)?;
    host.apply(&config, &tenants).await?;
    let host: Arc<dyn ExtensionHost> = Arc::new(host);
    Ok(Arc::new(Gateway::assemble(config, tenants, Some(host), config_path)))
}
