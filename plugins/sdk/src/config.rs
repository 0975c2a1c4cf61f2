//! The plugin's configuration for the calling tenant: its `config` table
//! in the gateway's configuration, overlaid by the tenant's `plugin_config`.
//!
//! The host never changes an instance's configuration (a reload starts new
//! instances), so it is read and parsed once per instance, on first use.

use std::cell::OnceCell;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::bindings::map_gateway::plugin::config as wit;
use crate::log;

thread_local! {
    static ALL: OnceCell<(String, Map<String, Value>)> = const { OnceCell::new() };
}

/// Run `f` on the configuration's text and its parsed object.
fn with_all<R>(f: impl FnOnce(&str, &Map<String, Value>) -> R) -> R {
    ALL.with(|cell| {
        let (text, map) = cell.get_or_init(|| {
            let text = wit::all();
            let map = serde_json::from_str(&text).unwrap_or_default();
            (text, map)
        });
        f(text, map)
    })
}

/// The whole configuration as a `T` (use `#[serde(default)]` so missing
/// keys keep their defaults). A malformed configuration is logged as a
/// warning and `T::default()` applies, so a typo cannot take the plugin down.
pub fn load<T: DeserializeOwned + Default>() -> T {
    with_all(|raw, map| match T::deserialize(Value::Object(map.clone())) {
        Ok(settings) => settings,
        Err(e) => {
            log::warn(&format!("ignoring malformed configuration ({e}): {raw}"));
            T::default()
        }
    })
}

/// One top-level key; `None` when absent or not a `T` (the latter logged).
pub fn get<T: DeserializeOwned>(key: &str) -> Option<T> {
    with_all(|_, map| {
        let value = map.get(key)?;
        match T::deserialize(value) {
            Ok(v) => Some(v),
            Err(e) => {
                log::warn(&format!("ignoring malformed configuration key {key} ({e}): {value}"));
                None
            }
        }
    })
}

/// The whole configuration as JSON text (`{}` when none is set).
pub fn raw() -> String {
    with_all(|raw, _| raw.to_string())
}
