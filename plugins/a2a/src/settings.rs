//! The bridge's configuration for a tenant (`plugin_config.a2a`).

use serde::Deserialize;

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// The URL clients reach the bridge at; empty: `http://<Host>/a2a`.
    pub base_url: String,
    /// Largest JSON-RPC request body, in bytes (413 above).
    pub max_request_bytes: usize,
    /// Tasks one tenant may hold (-32603 with `tenantTaskLimit` above).
    pub max_tasks_per_tenant: i64,
    /// How long a blocking SendMessage waits for the agent's first answer.
    pub blocking_wait_ms: u64,
    /// How long one SSE response follows a task before it ends (the client
    /// goes on with SubscribeToTask).
    pub stream_window_ms: u64,
    /// Requests one sender (its principal, or its address when anonymous)
    /// may make in a minute (429 above).
    pub requests_per_minute: u64,
    /// Push notification configs one task may hold.
    pub max_push_configs: usize,
    /// The wait before a failed push delivery is tried again, doubling up to a minute.
    pub push_retry_base_ms: u64,
    /// Attempts at one push delivery before it is given up.
    pub push_max_attempts: u32,
    /// Record each task's messages and artifacts as a mail conversation
    /// (when mail is enabled for the tenant).
    pub record_in_mail: bool,
    /// External A2A agents that `a2a/send` reaches by name:
    /// `{name: {url, headers?, bearer?}}`, `url` being a card URL or an
    /// agent's base URL. Checked when used; credentials are never shown.
    pub peers: std::collections::BTreeMap<String, serde_json::Value>,
    /// How often a remote task is polled while it runs (failures back off,
    /// doubling up to a minute).
    pub poll_ms: u64,
    /// How long a remote task is followed before the bridge stops polling it.
    pub follow_ms: u64,
    /// How long a fetched agent card is used before it is fetched again.
    pub card_ttl_ms: u64,
    /// The `max-age` of the cards the bridge serves (their `Cache-Control`), in seconds.
    pub card_max_age_s: u64,
    /// The Ed25519 key (`ed25519-secret:<base64>`, as `map-gateway plugin
    /// keygen` writes it) the cards the bridge serves are signed with; empty: unsigned.
    pub card_signing_key: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            base_url: String::new(),
            max_request_bytes: 256 << 10,
            max_tasks_per_tenant: 10_000,
            blocking_wait_ms: 10_000,
            stream_window_ms: 20_000,
            requests_per_minute: 600,
            max_push_configs: 10,
            push_retry_base_ms: 500,
            push_max_attempts: 6,
            record_in_mail: true,
            peers: Default::default(),
            poll_ms: 2_000,
            follow_ms: 86_400_000,
            card_ttl_ms: 300_000,
            card_max_age_s: 300,
            card_signing_key: String::new(),
        }
    }
}

impl Settings {
    pub fn load() -> Settings {
        map_plugin_sdk::config::load()
    }

    /// The bridge's base URL, from the configuration or the request's Host.
    pub fn base(&self, host: Option<&str>) -> String {
        if !self.base_url.is_empty() {
            return self.base_url.trim_end_matches('/').to_string();
        }
        let host = host.filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))).unwrap_or("localhost");
        format!("http://{host}/a2a")
    }
}
