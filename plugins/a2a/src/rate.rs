//! Per-sender request rates: at most `requestsPerMinute` requests in any
//! sliding minute from one sender, counted in the tenant's store (so every
//! node of a cluster counts the same), answered with 429 above it. A sender
//! is the principal the gateway authenticated, or, for anonymous callers,
//! their address (headers the host sets and clients cannot forge).
//!
//! The window slides: the requests of the last 60 s are estimated from two
//! per-minute counters, the current one and the previous one weighed by the
//! share of the window it still covers. So a turn of the clock's minute
//! gives no fresh allowance, and a sender waits as long as the estimate says.

use map_plugin_sdk::store::{keys, Batch, Counter};
use map_plugin_sdk::{ids, HttpRequest};

pub const RATES: Counter = Counter::new("rates");

/// The window, in milliseconds.
const WINDOW: u64 = 60_000;

/// Who sent the request.
pub fn sender(req: &HttpRequest) -> String {
    let header = |name: &str| req.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or_default();
    match header("x-map-principal") {
        "" | "anonymous" => format!("anonymous@{}", header("x-map-client-address")),
        p => p.to_string(),
    }
}

/// Count one request; past the limit it is taken back out of the count and
/// the answer is `Err(seconds until a request would be let through)`. A
/// store that fails lets the request through (the limit protects the
/// bridge, the store's failure is reported by what follows).
pub fn admit(sender: &str, per_minute: u64) -> Result<(), u64> {
    let now = ids::now_ms();
    let minute = now / WINDOW;
    let key = |m: u64| keys::join(&[keys::escape(sender), keys::number(m)]);
    let mut batch = Batch::new();
    let current = batch.add(&RATES, key(minute), 1);
    let previous = batch.add(&RATES, key(minute.saturating_sub(1)), 0);
    // The minute before last is done with.
    batch.delete_key(RATES.name(), key(minute.saturating_sub(2)));
    let Ok(done) = batch.apply() else { return Ok(()) };
    let (current, previous) = (done.counter(current).max(1) as u64, done.counter(previous).max(0) as u64);
    let into = now % WINDOW;
    if within(previous, current, into, per_minute) {
        return Ok(());
    }
    let _ = RATES.add(&key(minute), -1);
    Err(retry_after(previous, current - 1, into, per_minute))
}

/// Whether `current` requests this minute and `previous` the minute before
/// fit the limit `into` ms into this minute.
fn within(previous: u64, current: u64, into: u64, per_minute: u64) -> bool {
    previous * (WINDOW - into) + current * WINDOW <= per_minute * WINDOW
}

/// Seconds (at least 1) until one more request fits, if no other comes.
fn retry_after(previous: u64, current: u64, into: u64, per_minute: u64) -> u64 {
    let wait_ms = if current < per_minute && previous > 0 {
        // Later this minute, once the previous minute's share has shrunk enough.
        let at = WINDOW.saturating_sub((per_minute - current - 1) * WINDOW / previous);
        at.saturating_sub(into)
    } else if per_minute == 0 {
        WINDOW - into
    } else {
        // Next minute, when this one is the previous.
        let at = WINDOW - (per_minute - 1) * WINDOW / current.max(1);
        WINDOW - into + at
    };
    wait_ms.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_minute_counts_by_the_share_of_the_window_it_still_covers() {
        // Three requests late in the last minute, the limit three: no room right after the turn…
        assert!(!within(3, 1, 100, 3));
        // … room once a third of the window has passed.
        assert!(within(3, 1, 20_000, 3));
        assert_eq!(retry_after(3, 0, 100, 3), 20);
        // A minute full of its own requests waits for the next minute and part of it.
        assert!(!within(0, 4, 30_000, 3));
        assert_eq!(retry_after(0, 3, 30_000, 3), 30 + 20);
    }
}
