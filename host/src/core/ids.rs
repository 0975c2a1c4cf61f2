//! Identifiers: ULIDs (time-ordered, unique) with a readable prefix.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A monotonic ULID source: ids it makes in the same millisecond still sort
/// in creation order. The fabric keeps its own, under its lock, so event ids
/// follow the order of its log without a second lock.
pub struct UlidGen {
    ms: u64,
    rand: u128,
}

impl UlidGen {
    pub const fn new() -> UlidGen {
        UlidGen { ms: 0, rand: 0 }
    }

    /// The next id's (milliseconds, randomness).
    fn next(&mut self) -> (u64, u128) {
        let ms = now_ms();
        if ms <= self.ms {
            self.rand = (self.rand + 1) & ((1u128 << 80) - 1);
        } else {
            self.ms = ms;
            self.rand = random_u128() & ((1u128 << 79) - 1);
        }
        (self.ms, self.rand)
    }

    /// A new id and its millisecond timestamp (callers use it as the event's
    /// time, which saves reading the clock twice).
    pub fn next_id(&mut self) -> (Ulid, u64) {
        let (ms, rand) = self.next();
        (Ulid(encode(ms, rand)), ms)
    }
}

impl Default for UlidGen {
    fn default() -> Self {
        UlidGen::new()
    }
}

static SHARED: Mutex<UlidGen> = Mutex::new(UlidGen::new());

fn random_u128() -> u128 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = std::collections::hash_map::RandomState::new();
    let mut a = seed.build_hasher();
    a.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    a.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    let hi = a.finish();
    a.write_u64(hi);
    ((hi as u128) << 64) | a.finish() as u128
}

/// A process-wide monotonic ULID.
pub fn ulid() -> String {
    SHARED.lock().next_id().0.as_str().to_string()
}

/// A ULID kept inline (no heap block): the replay log holds thousands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ulid([u8; 26]);

impl Ulid {
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("alphabet is ASCII")
    }
}

impl std::fmt::Display for Ulid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn encode(ms: u64, rand: u128) -> [u8; 26] {
    let value: u128 = ((ms as u128 & 0xFFFF_FFFF_FFFF) << 80) | rand;
    let mut buf = [0u8; 26];
    for (i, slot) in buf.iter_mut().enumerate() {
        *slot = ALPHABET[((value >> (125 - 5 * i as u32)) & 0x1F) as usize];
    }
    buf
}

/// `<prefix>-<ULID>`, e.g. `sess-01J…`.
pub fn prefixed(prefix: &str) -> String {
    prefixed_at(prefix).0
}

/// `prefixed`, with the id's millisecond timestamp.
pub fn prefixed_at(prefix: &str) -> (String, u64) {
    let mut s = String::with_capacity(prefix.len() + 27);
    s.push_str(prefix);
    s.push('-');
    let (id, ms) = SHARED.lock().next_id();
    s.push_str(id.as_str());
    (s, ms)
}

/// A secret token (resume tokens): 256 bits, hex.
pub fn secret() -> String {
    format!("{:032x}{:032x}", random_u128(), random_u128())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_sort_in_creation_order() {
        let ids: Vec<String> = (0..2000).map(|_| ulid()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids.iter().all(|id| id.len() == 26));
    }

    #[test]
    fn secrets_differ() {
        assert_ne!(secret(), secret());
        assert_eq!(secret().len(), 64);
    }
}
