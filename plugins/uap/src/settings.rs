//! The plugin's configuration (`[plugins.uap] config = {…}`, tenants may override keys).

use serde::Deserialize;

#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// How long an agent has to accept or decline a proposal before the job
    /// goes to another agent (and never back to this one).
    pub acceptance_timeout_ms: u64,
    /// Proposals and sessions one agent holds at once.
    pub sessions_per_agent: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { acceptance_timeout_ms: 30_000, sessions_per_agent: 1 }
    }
}

impl Settings {
    pub fn load() -> Settings {
        let mut s: Settings = map_plugin_sdk::config::load();
        s.acceptance_timeout_ms = s.acceptance_timeout_ms.max(1);
        s.sessions_per_agent = s.sessions_per_agent.max(1);
        s
    }
}
