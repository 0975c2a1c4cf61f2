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

struct Last {
    ms: u64,
    rand: u128,
}

static LAST: Mutex<Last> = Mutex::new(Last { ms: 0, rand: 0 });

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

/// A monotonic ULID: ids made in the same millisecond still sort in creation order.
pub fn ulid() -> String {
    let ms = now_ms();
    let rand = {
        let mut last = LAST.lock();
        if ms <= last.ms {
            last.rand = (last.rand + 1) & ((1u128 << 80) - 1);
        } else {
            last.ms = ms;
            last.rand = random_u128() & ((1u128 << 79) - 1);
        }
        (last.ms, last.rand)
    };
    encode(rand.0, rand.1)
}

fn encode(ms: u64, rand: u128) -> String {
    let value: u128 = ((ms as u128 & 0xFFFF_FFFF_FFFF) << 80) | rand;
    let mut out = [0u8; 26];
    for (i, slot) in out.iter_mut().enumerate() {
        let shift = 125 - 5 * i as u32;
        *slot = ALPHABET[((value >> shift) & 0x1F) as usize];
    }
    String::from_utf8(out.to_vec()).expect("alphabet is ASCII")
}

/// `<prefix>-<ULID>`, e.g. `sess-01J…`.
pub fn prefixed(prefix: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + 27);
    s.push_str(prefix);
    s.push('-');
    s.push_str(&ulid());
    s
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
