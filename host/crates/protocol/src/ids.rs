//! Identifiers. Public ids (messages, events, subscriptions, agents) are
//! ULIDs: time-ordered, so ids made in the same millisecond are predictable
//! from each other. Ids that grant access (session handles, resume tokens)
//! come from the operating system's CSPRNG instead and share nothing with them.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(feature = "host")]
use parking_lot::Mutex;

/// Crockford's base32, the ULID alphabet.
pub const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// Characters in a ULID.
pub const ULID_LEN: usize = 26;
const MS_MAX: u64 = (1 << 48) - 1;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Unix milliseconds as ISO 8601 in UTC, to the millisecond
/// (`2026-01-02T03:04:05.678Z`), the calendar from the day count.
pub fn iso8601(ms: u64) -> String {
    let (days, rest) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    // Days since 0000-03-01 in 400-year eras (H. Hinnant's civil_from_days).
    let z = days + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (rest / 3_600_000, rest / 60_000 % 60, rest / 1000 % 60, rest % 1000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
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

#[cfg(feature = "host")]
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
#[cfg(feature = "host")]
pub fn ulid() -> String {
    SHARED.lock().next_id().0.as_str().to_string()
}

/// A ULID kept inline (no heap block): the replay log holds thousands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ulid([u8; 26]);

impl Ulid {
    /// A ULID as text, if it is 26 ASCII letters and digits.
    pub fn parse(s: &str) -> Option<Ulid> {
        let bytes: [u8; 26] = s.as_bytes().try_into().ok()?;
        bytes.iter().all(u8::is_ascii_alphanumeric).then_some(Ulid(bytes))
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("alphabet is ASCII")
    }
}

impl std::fmt::Display for Ulid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A ULID's text: 48 bits of Unix milliseconds (clamped, so ids past the
/// range still sort last), then 80 bits of `rand`.
pub fn encode(ms: u64, rand: u128) -> [u8; ULID_LEN] {
    let value: u128 = ((ms.min(MS_MAX) as u128) << 80) | (rand & ((1 << 80) - 1));
    let mut buf = [0u8; ULID_LEN];
    for (i, slot) in buf.iter_mut().enumerate() {
        *slot = ALPHABET[((value >> (125 - 5 * i as u32)) & 0x1F) as usize];
    }
    buf
}

/// The millisecond a ULID (the last 26 characters of `id`, so a prefixed id
/// too) was made at; `None` if they are not a ULID.
pub fn time_of(id: &str) -> Option<u64> {
    let ulid = id.get(id.len().checked_sub(ULID_LEN)?..)?;
    let mut value: u128 = 0;
    for c in ulid.bytes() {
        let digit = ALPHABET.iter().position(|&d| d == c.to_ascii_uppercase())?;
        value = (value << 5) | digit as u128;
    }
    Some((value >> 80) as u64)
}

/// `<prefix>-<ULID>`, e.g. `sess-01J…`.
#[cfg(feature = "host")]
pub fn prefixed(prefix: &str) -> String {
    prefixed_at(prefix).0
}

/// `prefixed`, with the id's millisecond timestamp.
#[cfg(feature = "host")]
pub fn prefixed_at(prefix: &str) -> (String, u64) {
    let mut s = String::with_capacity(prefix.len() + 27);
    s.push_str(prefix);
    s.push('-');
    let (id, ms) = SHARED.lock().next_id();
    s.push_str(id.as_str());
    (s, ms)
}

/// 128 bits from the operating system's CSPRNG.
#[cfg(feature = "host")]
fn os_random_u128() -> u128 {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the operating system's random source");
    u128::from_le_bytes(b)
}

/// 64 bits from the operating system's CSPRNG.
#[cfg(feature = "host")]
pub fn random_u64() -> u64 {
    os_random_u128() as u64
}

/// A secret token (resume tokens): 256 bits from the CSPRNG, hex.
#[cfg(feature = "host")]
pub fn secret() -> String {
    format!("{:032x}{:032x}", os_random_u128(), os_random_u128())
}

/// A session id, `sess-` and 26 base32 characters: 128 bits from the CSPRNG,
/// unrelated to every other id, so none can be derived from ids a peer sees.
#[cfg(feature = "host")]
pub fn session_id() -> String {
    let v = os_random_u128();
    let mut s = String::with_capacity(31);
    s.push_str("sess-");
    for i in 0..26u32 {
        s.push(ALPHABET[((v >> (5 * i).min(127)) & 0x1F) as usize] as char);
    }
    s
}

/// SHA-256 of a secret, hex: what is kept where the secret itself must not be.
#[cfg(feature = "host")]
pub fn secret_hash(secret: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Compare two secrets in time that depends only on their lengths.
#[cfg(feature = "host")]
pub fn secrets_equal(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(all(test, feature = "host"))]
mod tests {
    #[test]
    fn iso8601_writes_utc_to_the_millisecond() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_767_323_045_678), "2026-01-02T03:04:05.678Z");
        assert_eq!(iso8601(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

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

    #[test]
    fn session_ids_share_nothing_in_a_burst() {
        let ids: Vec<String> = (0..1000).map(|_| session_id()).collect();
        let set: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(set.len(), ids.len());
        // Neighbours in a burst share about 26/32 characters by chance, never a long prefix.
        let shared_prefix = |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        assert!(ids.windows(2).all(|w| shared_prefix(&w[0], &w[1]) < 5 + 8), "{:?}", &ids[..4]);
        assert!(secrets_equal("abc", "abc") && !secrets_equal("abc", "abd") && !secrets_equal("abc", "ab"));
    }
}
