//! The plugin's own counters and gauges, served at the gateway's `/metrics`
//! as `map_plugin_<name>{tenant, plugin, …}`. Names and label keys are
//! `a-z0-9_` (starting with a letter); at most 4 labels, values of at most
//! 64 bytes, 256 series per tenant: never put ids in labels. A refused
//! sample is logged as a warning rather than failing the call: metrics never
//! change what a plugin answers.

use crate::bindings::map_gateway::plugin::metrics as host;

fn owned(labels: &[(&str, &str)]) -> Vec<(String, String)> {
    labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Add `delta` to the counter `name` with these labels.
pub fn count(name: &str, labels: &[(&str, &str)], delta: u64) {
    if let Err(e) = host::counter_add(name, &owned(labels), delta) {
        crate::log::warn(&format!("metric {name} refused: {e}"));
    }
}

/// Set the gauge `name` with these labels.
pub fn gauge(name: &str, labels: &[(&str, &str)], value: f64) {
    if let Err(e) = host::gauge_set(name, &owned(labels), value) {
        crate::log::warn(&format!("metric {name} refused: {e}"));
    }
}
