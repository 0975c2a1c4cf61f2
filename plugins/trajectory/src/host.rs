//! Thin wrappers over the host imports, with storage errors turned into ours.

use crate::error::Result;
use crate::map_gateway::plugin::log::{self, Level};
use crate::map_gateway::plugin::store::{self, ScanOptions, Write};
use crate::map_gateway::plugin::types::RpcError;
use crate::map_gateway::plugin::{config, events, router};

pub fn get(collection: &str, key: &str) -> Result<Option<String>> {
    Ok(store::get(collection, key)?)
}

/// Entries of `collection` under `prefix` strictly between `after` and
/// `before`, greatest key first.
pub fn scan_newest_first(collection: &str, prefix: &str, after: Option<String>, before: Option<String>, limit: u32) -> Result<Vec<(String, String)>> {
    let opts = ScanOptions { prefix: prefix.to_string(), after, before, limit, reverse: true };
    Ok(store::scan(collection, &opts)?.into_iter().map(|e| (e.key, e.value)).collect())
}

/// Apply writes atomically.
pub fn batch(writes: &[Write]) -> Result<()> {
    Ok(store::batch(writes)?)
}

pub fn put(collection: &str, key: &str, value: String) -> Write {
    Write { collection: collection.to_string(), key: key.to_string(), value: Some(value) }
}

pub fn delete(collection: &str, key: &str) -> Write {
    Write { collection: collection.to_string(), key: key.to_string(), value: None }
}

/// Publish an event; a failure is logged, since what it reports is already stored.
pub fn emit(event_type: &str, data: &str) {
    if let Err(e) = events::emit(event_type, data) {
        warn(&format!("could not emit {event_type}: {e}"));
    }
}

pub fn notify(participant_id: &str, method: &str, params: &str) -> std::result::Result<(), RpcError> {
    router::notify(participant_id, method, params)
}

pub fn config_all() -> String {
    config::all()
}

pub fn warn(message: &str) {
    log::log(Level::Warn, message);
}
