//! `[workspace]`: the workspace extension (`workspace/search|list|read`),
//! which the gateway relays to the agent that owns the files.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// Serve and advertise the extension (off: its methods answer -32601,
    /// and a plugin may serve them instead).
    pub enabled: bool,
    /// How long a relayed request waits for the agent's answer.
    pub timeout_ms: u64,
    /// Requests that may wait for one agent's session at once; more are
    /// refused (4000) until some are answered.
    pub max_pending: usize,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        WorkspaceConfig { enabled: true, timeout_ms: 10_000, max_pending: 64 }
    }
}

impl WorkspaceConfig {
    pub fn check(&self) -> anyhow::Result<()> {
        if !(1..=600_000).contains(&self.timeout_ms) {
            anyhow::bail!("workspace.timeout_ms must be between 1 and 600000 (ten minutes)");
        }
        if !(1..=10_000).contains(&self.max_pending) {
            anyhow::bail!("workspace.max_pending must be between 1 and 10000");
        }
        Ok(())
    }
}
