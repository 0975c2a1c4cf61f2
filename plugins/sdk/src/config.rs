//! The plugin's configuration for the calling tenant: its `config` table
//! in the gateway's configuration, overlaid by the tenant's `plugin_config`.

use serde::de::DeserializeOwned;

use crate::bindings::map_gateway::plugin::config as wit;
use crate::log;

/// The whole configuration as a `T` (use `#[serde(default)]` so missing
/// keys keep their defaults). A malformed configuration is logged as a
/// warning and `T::default()` applies, so a typo cannot take the plugin down.
pub fn load<T: DeserializeOwned + Default>() -> T {
    let raw = wit::all();
    match serde_json::from_str(&raw) {
        Ok(settings) => settings,
        Err(e) => {
            log::warn(&format!("ignoring malformed configuration ({e}): {raw}"));
            T::default()
        }
    }
}

/// One top-level key; `None` when absent or not a `T` (the latter logged).
pub fn get<T: DeserializeOwned>(key: &str) -> Option<T> {
    let raw = wit::get(key)?;
    match serde_json::from_str(&raw) {
        Ok(v) => Some(v),
        Err(e) => {
            log::warn(&format!("ignoring malformed configuration key {key} ({e}): {raw}"));
            None
        }
    }
}

/// The whole configuration as JSON text (`{}` when none is set).
pub fn raw() -> String {
    wit::all()
}
