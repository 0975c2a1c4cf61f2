//! The bridge's configuration for a tenant (`plugin_config.mamp`).

use serde::Deserialize;

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// The domain of this tenant's agents: `agent://<domain>/<agent-id>`.
    pub domain: String,
    /// Largest request body accepted, in bytes (413 above).
    pub max_message_size: usize,
    /// Messages one sender URI may send per minute (429 above).
    pub flood_per_minute: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { domain: "localhost".into(), max_message_size: 1 << 20, flood_per_minute: 120 }
    }
}

impl Settings {
    pub fn load() -> Settings {
        map_plugin_sdk::config::load()
    }
}
