//! The plugin's configuration for the current tenant (`config` import).

use crate::map_gateway::plugin::config;

/// Thread nesting allowed when `max_thread_depth` is not configured.
pub const DEFAULT_MAX_THREAD_DEPTH: u32 = 8;

fn key<T: serde::de::DeserializeOwned>(name: &str) -> Option<T> {
    config::get(name).and_then(|text| serde_json::from_str(&text).ok())
}

/// `enabled = false` turns mail off for a tenant: every method answers 10010.
pub fn enabled() -> bool {
    key::<bool>("enabled").unwrap_or(true)
}

/// How deep threads may nest (a top-level thread has depth 1).
pub fn max_thread_depth() -> u32 {
    key::<u64>("max_thread_depth").map(|d| d.min(u32::MAX as u64) as u32).unwrap_or(DEFAULT_MAX_THREAD_DEPTH)
}

/// `allow_observers = false` keeps observer clients out: a caller that
/// declared `capabilities.mail.canObserve: true` at `map/connect` then gets
/// nothing for it (it reads and hears only what it takes part in).
pub fn allow_observers() -> bool {
    key::<bool>("allow_observers").unwrap_or(true)
}
