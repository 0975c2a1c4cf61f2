//! Clock and identifiers: `ckpt-<ULID>` for checkpoints without a
//! client-supplied id, `stream-<ULID>` for content streams.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Calls made by this instance, mixed into identifiers so that two made in
/// the same nanosecond still differ.
static MINTED: AtomicU64 = AtomicU64::new(0);

fn now() -> std::time::Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Unix milliseconds.
pub fn now_ms() -> u64 {
    now().as_millis() as u64
}

/// A ULID: 48 bits of milliseconds, then 80 bits that differ between callers
/// (`seed` names the caller) and between calls. The plugin has no random
/// source of its own, so those bits are hashed from the seed, the clock's
/// nanoseconds and a per-instance counter.
pub fn ulid(seed: &str) -> String {
    let t = now();
    let mut h = Sha256::new();
    h.update(seed.as_bytes());
    h.update(t.as_nanos().to_le_bytes());
    h.update(MINTED.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let entropy = h.finalize();
    encode_ulid(t.as_millis() as u64, &entropy[..10])
}

fn encode_ulid(ms: u64, entropy: &[u8]) -> String {
    let mut value: u128 = u128::from(ms & 0xFFFF_FFFF_FFFF) << 80;
    for (i, b) in entropy.iter().take(10).enumerate() {
        value |= u128::from(*b) << (72 - 8 * i);
    }
    (0..26).rev().map(|i| CROCKFORD[((value >> (5 * i)) & 31) as usize] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_sort_by_time_and_differ() {
        assert_eq!(encode_ulid(0, &[0; 10]), "00000000000000000000000000");
        assert_eq!(encode_ulid(1, &[0; 10]), "00000000010000000000000000");
        assert!(encode_ulid(1_700_000_000_000, &[255; 10]) < encode_ulid(1_700_000_000_001, &[0; 10]));
        let (a, b) = (ulid("s"), ulid("s"));
        assert_eq!(a.len(), 26);
        assert_ne!(a, b);
    }
}
