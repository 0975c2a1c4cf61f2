//! Time and time-ordered ids: `<prefix>-<ULID>`, e.g. `note-01J9Z3…`.
//!
//! An id is 26 Crockford base32 characters after the prefix: 48 bits of Unix
//! milliseconds, then 80 bits of which the first 20 carry the nanoseconds
//! within the millisecond and the last 60 are random (from the WASI random
//! source). So, as storage keys:
//!
//! - ids of one prefix sort by the time they were made, also across the
//!   instances and processes of a plugin (as far as their clocks agree);
//! - within one instance every id is greater than the one before, even when
//!   the clock stands still or steps back;
//! - 60 random bits keep ids made in the same nanosecond apart.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of the ULID part of an id.
pub use map_protocol::ids::ULID_LEN;
const MS_MAX: u64 = (1 << 48) - 1;
const ENTROPY_MAX: u128 = (1 << 80) - 1;

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

/// 64 random bits: `RandomState` is keyed from the WASI random source (and
/// each one made differs), so hashing the time already read is enough; a
/// second clock read would cost a host call per id.
fn random_u64(ms: u64) -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(ms);
    h.finish()
}

/// A new ULID (26 characters, no prefix).
pub fn ulid() -> String {
    ulid_at().0
}

/// A new ULID and the millisecond it carries.
pub fn ulid_at() -> (String, u64) {
    let (ms, sub_ns) = now();
    let fresh = ((sub_ns as u128) << 60) | (random_u64(ms) as u128 & ((1 << 60) - 1));
    let (ms, entropy) = LAST.with(|last| {
        let next = successor(last.get(), (ms.min(MS_MAX), fresh));
        last.set(next);
        next
    });
    (encode(ms, entropy), ms)
}

/// The pair to hand out after `last` when the clock reads `fresh`: `fresh`
/// if it is greater, else one more than `last`.
fn successor(last: (u64, u128), fresh: (u64, u128)) -> (u64, u128) {
    if fresh > last {
        fresh
    } else if last.1 < ENTROPY_MAX {
        (last.0, last.1 + 1)
    } else {
        (last.0 + 1, 0)
    }
}

/// A new id `<prefix>-<ULID>`.
pub fn new_id(prefix: &str) -> String {
    new_id_at(prefix).0
}

/// A new id `<prefix>-<ULID>` and the millisecond it was made at (use it as
/// the record's timestamp, so that [`bounds_of_ms`] matches).
pub fn new_id_at(prefix: &str) -> (String, u64) {
    let (ulid, ms) = ulid_at();
    (format!("{prefix}-{ulid}"), ms)
}

fn encode(ms: u64, entropy: u128) -> String {
    String::from_utf8_lossy(&map_protocol::ids::encode(ms, entropy)).into_owned()
}

/// The millisecond an id (with or without a prefix) was made at.
pub use map_protocol::ids::time_of;

/// The smallest and greatest id of `prefix` made in millisecond `ms`: key
/// bounds for a time filter over records keyed by id. Times past the 48-bit
/// range clamp to its end instead of wrapping around.
pub fn bounds_of_ms(prefix: &str, ms: u64) -> (String, String) {
    (format!("{prefix}-{}", encode(ms, 0)), format!("{prefix}-{}", encode(ms, ENTROPY_MAX)))
}

/// Unix milliseconds as an ISO-8601 UTC timestamp, to the second.
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // The civil date of a day count since 1970-01-01 (H. Hinnant's algorithm).
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
    use map_protocol::ids::ALPHABET as CROCKFORD;

    #[test]
    fn ids_increase_and_have_the_ulid_shape() {
        let ids: Vec<String> = (0..1000).map(|_| new_id("turn")).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(ids[0].len(), "turn-".len() + ULID_LEN);
        assert!(ids[0][5..].bytes().all(|b| CROCKFORD.contains(&b)));
    }

    #[test]
    fn the_encoding_orders_by_time_first() {
        assert_eq!(encode(0, 0), "00000000000000000000000000");
        assert_eq!(encode(1, 0), "00000000010000000000000000");
        assert!(encode(1_700_000_000_000, ENTROPY_MAX) < encode(1_700_000_000_001, 0));
    }

    #[test]
    fn a_standing_or_stepping_back_clock_still_gives_greater_ids() {
        assert_eq!(successor((5, 10), (5, 11)), (5, 11));
        assert_eq!(successor((5, 10), (5, 3)), (5, 11), "same millisecond, smaller entropy");
        assert_eq!(successor((5, 10), (4, 99)), (5, 11), "clock stepped back");
        assert_eq!(successor((5, ENTROPY_MAX), (5, 0)), (6, 0));
        assert_eq!(successor((5, 10), (6, 0)), (6, 0));
    }

    #[test]
    fn ids_carry_their_time_and_bounds_enclose_them() {
        let (id, ms) = new_id_at("turn");
        assert_eq!(time_of(&id), Some(ms));
        let (lo, hi) = bounds_of_ms("turn", ms);
        assert!(lo <= id && id <= hi);
        let (_, prev_hi) = bounds_of_ms("turn", ms - 1);
        assert!(prev_hi < id);
        let (far_lo, _) = bounds_of_ms("turn", u64::MAX);
        assert!(id < far_lo, "a far-future bound stays above today's ids");
        assert_eq!(time_of("short"), None);
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(1_706_745_600_000), "2024-02-01T00:00:00Z");
    }
}
