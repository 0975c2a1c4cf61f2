//! What one storage call asks for, and the limits every call is checked
//! against before it reaches the database.

use super::StoreError;

/// Longest key and value a plugin may store, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
pub const MAX_VALUE_BYTES: usize = 16 << 20;
/// Most operations and bytes one write call may carry, so that one tenant
/// holds the database's writer only briefly.
pub const MAX_OPS: usize = 10_000;
pub const MAX_CALL_BYTES: usize = 32 << 20;
/// Most keys one `get-many` may read, and most entries one page may hold.
pub const MAX_KEYS: usize = 1000;
pub const MAX_PAGE: u32 = 1000;
/// Upper bound of a prefix range; keys may not contain it.
pub const PREFIX_END: char = '\u{10FFFF}';

/// One operation of an atomic commit.
#[derive(Clone, Debug)]
pub enum Op {
    Put { collection: String, key: String, value: Vec<u8> },
    Delete { collection: String, key: String },
    /// Add to a decimal counter (absent = 0).
    Add { collection: String, key: String, delta: i64 },
    /// The key's version must be this one (0: the key must be absent).
    ExpectVersion { collection: String, key: String, version: u64 },
    /// The key's value must be this one (`None`: the key must be absent).
    ExpectValue { collection: String, key: String, value: Option<Vec<u8>> },
}

impl Op {
    fn target(&self) -> (&str, &str) {
        match self {
            Op::Put { collection, key, .. }
            | Op::Delete { collection, key }
            | Op::Add { collection, key, .. }
            | Op::ExpectVersion { collection, key, .. }
            | Op::ExpectValue { collection, key, .. } => (collection, key),
        }
    }

    pub fn is_condition(&self) -> bool {
        matches!(self, Op::ExpectVersion { .. } | Op::ExpectValue { .. })
    }

    fn bytes(&self) -> usize {
        let (c, k) = self.target();
        c.len()
            + k.len()
            + match self {
                Op::Put { value, .. } => value.len(),
                Op::ExpectValue { value, .. } => value.as_ref().map_or(0, Vec::len),
                _ => 8,
            }
    }
}

/// A stored value with its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub value: Vec<u8>,
    pub version: u64,
}

/// The answer to a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Applied: the version of every key written, the new counter values in
    /// order, and how many keys the deletes removed.
    Committed { version: u64, counters: Vec<i64>, deleted: u64 },
    /// Not applied: the condition at this index did not hold.
    Conflict(u32),
}

pub fn check_key(collection: &str, key: &str) -> Result<(), StoreError> {
    if collection.is_empty() || collection.len() > 128 {
        return Err(StoreError::Invalid("collection names are 1 to 128 bytes".into()));
    }
    if key.len() > MAX_KEY_BYTES || key.contains(PREFIX_END) {
        return Err(StoreError::Invalid(format!("keys are at most {MAX_KEY_BYTES} bytes and may not contain U+10FFFF")));
    }
    Ok(())
}

/// Bytes of keys and values a call carries.
pub fn call_bytes(ops: &[Op]) -> usize {
    ops.iter().map(Op::bytes).sum()
}

/// Check a whole commit before it reaches the database.
pub fn check_ops(ops: &[Op]) -> Result<(), StoreError> {
    if ops.len() > MAX_OPS {
        return Err(StoreError::Invalid(format!("one write carries at most {MAX_OPS} operations (got {})", ops.len())));
    }
    for op in ops {
        let (collection, key) = op.target();
        check_key(collection, key)?;
        if let Op::Put { value, .. } = op {
            if value.len() > MAX_VALUE_BYTES {
                return Err(StoreError::Invalid(format!("values are at most {MAX_VALUE_BYTES} bytes")));
            }
        }
    }
    let bytes = call_bytes(ops);
    if bytes > MAX_CALL_BYTES {
        return Err(StoreError::Invalid(format!("one write carries at most {MAX_CALL_BYTES} bytes of keys and values (got {bytes})")));
    }
    Ok(())
}

/// The new text of a counter after adding `delta` to `current`.
pub fn add_to_counter(current: Option<&[u8]>, delta: i64, key: &str) -> Result<i64, StoreError> {
    let now = match current {
        None => 0,
        Some(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .ok_or_else(|| StoreError::Invalid(format!("the value of {key} is not a decimal integer, so it cannot be counted")))?,
    };
    now.checked_add(delta).ok_or_else(|| StoreError::Invalid(format!("the counter {key} would overflow a 64-bit integer")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_over_its_operation_or_byte_allowance_is_refused() {
        let put = |n: usize| Op::Put { collection: "c".into(), key: format!("k{n}"), value: vec![b'x'; 4 << 20] };
        assert!(check_ops(&(0..7).map(put).collect::<Vec<_>>()).is_ok());
        assert!(matches!(check_ops(&(0..9).map(put).collect::<Vec<_>>()), Err(StoreError::Invalid(m)) if m.contains("bytes")));
        let many: Vec<Op> = (0..=MAX_OPS).map(|n| Op::Delete { collection: "c".into(), key: n.to_string() }).collect();
        assert!(matches!(check_ops(&many), Err(StoreError::Invalid(m)) if m.contains("operations")));
    }

    #[test]
    fn counters_are_decimal_text_and_refuse_overflow() {
        assert_eq!(add_to_counter(None, 5, "k").unwrap(), 5);
        assert_eq!(add_to_counter(Some(b"-3"), 5, "k").unwrap(), 2);
        assert!(add_to_counter(Some(b"abc"), 1, "k").is_err());
        assert!(add_to_counter(Some(i64::MAX.to_string().as_bytes()), 1, "k").is_err());
    }
}
