//! The bridge's configuration for a tenant (`plugin_config.mamp`).

use std::collections::BTreeMap;

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
    /// Where `agent://<domain>/…` is delivered, and the Bearer key sent with
    /// it; a domain not listed is `https://<domain>` without a key.
    pub peers: BTreeMap<String, Peer>,
    /// Deliveries tried before `message_failed`.
    pub max_attempts: u32,
    /// The first retry's delay; each next one doubles it (at most a minute).
    pub retry_base_ms: u64,
}

#[derive(Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct Peer {
    pub url: String,
    pub key: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { domain: "localhost".into(), max_message_size: 1 << 20, flood_per_minute: 120, peers: BTreeMap::new(), max_attempts: 5, retry_base_ms: 1000 }
    }
}

impl Settings {
    pub fn load() -> Settings {
        map_plugin_sdk::config::load()
    }

    /// The base URL and key for a peer domain.
    pub fn peer(&self, domain: &str) -> Peer {
        match self.peers.get(domain) {
            Some(p) if !p.url.is_empty() => p.clone(),
            Some(p) => Peer { url: format!("https://{domain}"), key: p.key.clone() },
            None => Peer { url: format!("https://{domain}"), key: String::new() },
        }
    }
}
