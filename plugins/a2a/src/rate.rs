//! Per-sender request rates: at most `requestsPerMinute` requests a
//! minute from one sender, counted in the tenant's store (so every node of
//! a cluster counts the same), answered with 429 above it. A sender is the
//! principal the gateway authenticated, or, for anonymous callers, their
//! address (headers the host sets and clients cannot forge).

use map_plugin_sdk::store::{keys, Batch, Counter};
use map_plugin_sdk::{ids, HttpRequest};

pub const RATES: Counter = Counter::new("rates");

/// Who sent the request.
pub fn sender(req: &HttpRequest) -> String {
    let header = |name: &str| req.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or_default();
    match header("x-map-principal") {
        "" | "anonymous" => format!("anonymous@{}", header("x-map-client-address")),
        p => p.to_string(),
    }
}

/// Count one request; `Err(seconds until the next minute)` past the limit.
/// A store that fails lets the request through (the limit protects the
/// bridge, the store's failure is reported by what follows).
pub fn admit(sender: &str, per_minute: u64) -> Result<(), u64> {
    let now = ids::now_ms();
    let minute = now / 60_000;
    let mut batch = Batch::new();
    let slot = batch.add(&RATES, keys::join(&[keys::escape(sender), keys::number(minute)]), 1);
    // The minute before last is done with.
    batch.delete_key(RATES.name(), keys::join(&[keys::escape(sender), keys::number(minute.saturating_sub(2))]));
    match batch.apply() {
        Ok(done) if done.counter(slot) as u64 > per_minute => Err(60 - (now / 1000) % 60),
        _ => Ok(()),
    }
}
