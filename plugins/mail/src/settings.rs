//! The plugin's configuration for the current tenant. Each key is read on
//! its own, so a malformed one (logged) falls back to its default without
//! taking the others along.

use map_plugin_sdk::config;

/// Thread nesting allowed when `max_thread_depth` is not configured.
pub const DEFAULT_MAX_THREAD_DEPTH: u32 = 8;

/// `enabled = false` turns mail off for a tenant: every method answers 10010.
pub fn enabled() -> bool {
    config::get::<bool>("enabled").unwrap_or(true)
}

/// How deep threads may nest (a top-level thread has depth 1).
pub fn max_thread_depth() -> u32 {
    config::get::<u64>("max_thread_depth").map(|d| d.min(u32::MAX as u64) as u32).unwrap_or(DEFAULT_MAX_THREAD_DEPTH)
}

/// `allow_observers = false` keeps observer clients out: a caller that
/// declared `capabilities.mail.canObserve: true` at `map/connect` then gets
/// nothing for it (it reads and hears only what it takes part in).
pub fn allow_observers() -> bool {
    config::get::<bool>("allow_observers").unwrap_or(true)
}
