//! Time and ULID-style ids (`conv-…`, `turn-…`, `thread-…`).
//!
//! Ids double as storage keys, so their byte order must follow creation
//! order. A plain ULID only orders by millisecond, and several instances of
//! this plugin run side by side, so the first 20 bits of the "random" part
//! carry the nanoseconds within the millisecond: ids made on different
//! instances still sort by wall-clock time, and 60 random bits keep them
//! unique across instances and restarts.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    now().0
}

/// (milliseconds, nanoseconds within that millisecond).
fn now() -> (u64, u32) {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_millis() as u64, d.subsec_nanos() % 1_000_000)
}

thread_local! {
    /// The last (time, entropy) pair handed out by this instance.
    static LAST: Cell<(u64, u128)> = const { Cell::new((0, 0)) };
}

/// 64 fresh random bits. `RandomState` is seeded from the WASI random source.
fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(now_ms());
    h.finish()
}

/// A new id `<prefix>-<26 Crockford base32 chars>` and the millisecond it was made at.
pub fn new_id(prefix: &str) -> (String, u64) {
    let (ms, sub_ns) = now();
    let fresh = ((sub_ns as u128) << 60) | (random_u64() as u128 & ((1 << 60) - 1));
    let (ms, entropy) = LAST.with(|last| {
        let (last_ms, last_entropy) = last.get();
        // Within one instance ids must be strictly increasing even when the
        // clock does not move (or steps back a little).
        let next = if ms > last_ms || (ms == last_ms && fresh > last_entropy) {
            (ms, fresh)
        } else if last_entropy + 1 < (1 << 80) {
            (last_ms, last_entropy + 1)
        } else {
            (last_ms + 1, 0)
        };
        last.set(next);
        next
    });
    (format!("{prefix}-{}", encode(ms, entropy)), ms)
}

fn encode(ms: u64, entropy: u128) -> String {
    let value: u128 = ((ms as u128 & ((1 << 48) - 1)) << 80) | (entropy & ((1 << 80) - 1));
    (0..26).rev().map(|i| CROCKFORD[((value >> (i * 5)) & 31) as usize] as char).collect()
}

/// The smallest and greatest id body of a millisecond: used as key bounds for
/// timestamp filters, since an id's time part equals its record's timestamp.
pub fn bounds_of_ms(prefix: &str, ms: u64) -> (String, String) {
    // Times past the 48-bit range clamp to its end instead of wrapping around.
    let ms = ms.min((1 << 48) - 1);
    (format!("{prefix}-{}", encode(ms, 0)), format!("{prefix}-{}", encode(ms, (1 << 80) - 1)))
}

/// Format Unix milliseconds as an ISO-8601 UTC timestamp (second precision).
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_and_have_the_ulid_shape() {
        let (a, _) = new_id("turn");
        let (b, _) = new_id("turn");
        assert!(a < b, "{a} < {b}");
        assert_eq!(a.len(), "turn-".len() + 26);
    }

    #[test]
    fn bounds_enclose_ids_of_their_millisecond() {
        let (id, ms) = new_id("turn");
        let (lo, hi) = bounds_of_ms("turn", ms);
        assert!(lo <= id && id <= hi);
        let (_, prev_hi) = bounds_of_ms("turn", ms - 1);
        assert!(prev_hi < id);
        let (far_lo, _) = bounds_of_ms("turn", u64::MAX);
        assert!(id < far_lo, "a far-future bound stays above today's ids");
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(1_706_745_600_000), "2024-02-01T00:00:00Z");
    }
}
