//! What one storage call asks for, and the limits every call is checked
//! against before it reaches the database.

use super::{Page, ScanOptions, StoreError};

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
    Put {
        collection: String,
        key: String,
        value: Vec<u8>,
    },
    Delete {
        collection: String,
        key: String,
    },
    /// Add to a decimal counter (absent = 0).
    Add {
        collection: String,
        key: String,
        delta: i64,
    },
    /// The key's version must be this one (0: the key must be absent).
    ExpectVersion {
        collection: String,
        key: String,
        version: u64,
    },
    /// The key's value must be this one (`None`: the key must be absent).
    ExpectValue {
        collection: String,
        key: String,
        value: Option<Vec<u8>>,
    },
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

    pub fn collection(&self) -> &str {
        self.target().0
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

/// The key range of a scan: keys `>= lower` (`> lower` when strict) and `< upper`.
pub struct Bounds {
    pub lower: String,
    pub strict: bool,
    pub upper: String,
}

pub fn bounds(o: &ScanOptions) -> Bounds {
    let strict = o.after.as_ref().is_some_and(|a| a.as_str() >= o.prefix.as_str());
    let lower = if strict { o.after.clone().unwrap_or_default() } else { o.prefix.clone() };
    let prefix_end = format!("{}{PREFIX_END}", o.prefix);
    let upper = match &o.before {
        Some(b) if b.as_str() < prefix_end.as_str() => b.clone(),
        _ => prefix_end,
    };
    Bounds { lower, strict, upper }
}

pub fn over_budget(max_bytes: usize) -> StoreError {
    StoreError::Invalid(format!("the result would exceed {max_bytes} bytes (the plugin's memory allowance); ask for fewer entries"))
}

/// A page filled row by row: stops at `limit` entries or before `soft`
/// bytes (but always takes a first entry that fits `hard`).
pub struct PageFill {
    entries: Vec<(String, Item)>,
    bytes: usize,
    limit: usize,
    soft: usize,
    hard: usize,
    cut: bool,
}

impl PageFill {
    pub fn new(limit: u32, soft: usize, hard: usize) -> PageFill {
        PageFill { entries: Vec::new(), bytes: 0, limit: limit.min(MAX_PAGE) as usize, soft, hard, cut: false }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The bounds a page is filled to, as text (part of a cached page's name).
    pub fn shape(&self) -> String {
        let mut out = String::with_capacity(40);
        for n in [self.limit, self.soft, self.hard] {
            out.push_str(itoa::Buffer::new().format(n));
            out.push('/');
        }
        out
    }

    /// Take one row; `Ok(false)` when the page is full.
    pub fn offer(&mut self, key: String, item: Item) -> Result<bool, StoreError> {
        let size = key.len() + item.value.len();
        if self.entries.is_empty() && size > self.hard {
            return Err(over_budget(self.hard));
        }
        if !self.entries.is_empty() && self.bytes + size > self.soft {
            self.cut = true;
            return Ok(false);
        }
        self.bytes += size;
        self.entries.push((key, item));
        Ok(self.entries.len() < self.limit)
    }

    pub fn finish(self) -> Page {
        let full = self.cut || (self.limit > 0 && self.entries.len() == self.limit);
        let next = if full { self.entries.last().map(|(k, _)| k.clone()) } else { None };
        Page { entries: self.entries, next }
    }
}

/// The answer to a `get-many`, filled row by row, in the order asked.
pub struct ManyFill<'a> {
    keys: &'a [(String, String)],
    found: Vec<Option<Item>>,
    bytes: usize,
    max_bytes: usize,
}

impl<'a> ManyFill<'a> {
    pub fn new(keys: &'a [(String, String)], max_bytes: usize) -> Result<ManyFill<'a>, StoreError> {
        if keys.len() > MAX_KEYS {
            return Err(StoreError::Invalid(format!("get-many reads at most {MAX_KEYS} keys (got {})", keys.len())));
        }
        for (c, k) in keys {
            check_key(c, k)?;
        }
        Ok(ManyFill { keys, found: vec![None; keys.len()], bytes: 0, max_bytes })
    }

    /// `IN (VALUES (…), …)` for the keys, numbered from parameter `first`
    /// with the database's parameter sign (`$` or `?`).
    pub fn values_list(&self, sign: char, first: usize) -> String {
        let pairs: Vec<String> = (0..self.keys.len()).map(|i| format!("({sign}{}, {sign}{})", first + 2 * i, first + 1 + 2 * i)).collect();
        pairs.join(", ")
    }

    /// Record one row found; every position that asked for it gets it.
    pub fn offer(&mut self, collection: &str, key: &str, item: Item) -> Result<(), StoreError> {
        for (i, _) in self.keys.iter().enumerate().filter(|(_, (c, k))| c == collection && k == key) {
            self.bytes += item.value.len() + key.len();
            if self.bytes > self.max_bytes {
                return Err(over_budget(self.max_bytes));
            }
            self.found[i] = Some(item.clone());
        }
        Ok(())
    }

    /// The row for position `index`, known without a search (a cache hit).
    pub fn place(&mut self, index: usize, item: Item) -> Result<(), StoreError> {
        self.bytes += item.value.len() + self.keys[index].1.len();
        if self.bytes > self.max_bytes {
            return Err(over_budget(self.max_bytes));
        }
        self.found[index] = Some(item);
        Ok(())
    }

    pub fn finish(self) -> Vec<Option<Item>> {
        self.found
    }
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
