//! Key ranges of a collection, read page by page with `scan-page`.

use super::collection::{Codec, Collection};
use crate::bindings::map_gateway::plugin::store::{self as wit, PageOptions};
use crate::error::Result;

/// Entries asked for per `scan-page` call when reading on ([`Range::each`]).
pub const PAGE: u32 = 256;
/// The host's cap on the entries of one page.
const MAX_PAGE: u32 = 1000;

/// One stored value with its key and version.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry<T> {
    pub key: String,
    pub value: T,
    pub version: u64,
}

/// One page of a range.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub entries: Vec<Entry<T>>,
    /// Present when the range may hold more: a cursor for [`Range::resume`].
    /// Absent when the range is done.
    pub next: Option<String>,
}

impl<T> Page<T> {
    pub fn values(self) -> Vec<T> {
        self.entries.into_iter().map(|e| e.value).collect()
    }
}

/// The keys of a collection that start with a prefix, optionally only those
/// strictly between two keys, in key order or (`reverse`) greatest first.
///
/// Each page is one consistent snapshot; a range read over several pages
/// may see writes made between them.
#[derive(Debug)]
pub struct Range<T, C> {
    collection: Collection<T, C>,
    prefix: String,
    after: Option<String>,
    before: Option<String>,
    reverse: bool,
    max_bytes: u32,
}

impl<T, C> Clone for Range<T, C> {
    fn clone(&self) -> Self {
        Range {
            collection: self.collection,
            prefix: self.prefix.clone(),
            after: self.after.clone(),
            before: self.before.clone(),
            reverse: self.reverse,
            max_bytes: self.max_bytes,
        }
    }
}

impl<T, C: Codec<T>> Range<T, C> {
    pub(crate) fn new(collection: Collection<T, C>, prefix: String) -> Self {
        Range { collection, prefix, after: None, before: None, reverse: false, max_bytes: 0 }
    }

    /// Only keys strictly greater than `key` (a full key).
    pub fn after(mut self, key: impl Into<String>) -> Self {
        self.after = Some(key.into());
        self
    }

    /// Only keys strictly smaller than `key` (a full key).
    pub fn before(mut self, key: impl Into<String>) -> Self {
        self.before = Some(key.into());
        self
    }

    /// Greatest key first.
    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// Stop a page before its keys and values exceed this many bytes (0: the
    /// plugin's memory allowance, which also caps it). A page holds at least
    /// one entry that fits the allowance.
    pub fn max_bytes(mut self, bytes: u32) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Continue after a cursor from [`Page::next`] (or an entry's key): in
    /// key order the range then starts after it, reversed it ends before
    /// it. `None` leaves the range as it is.
    pub fn resume(mut self, cursor: Option<impl Into<String>>) -> Self {
        if let Some(cursor) = cursor {
            let cursor = cursor.into();
            if self.reverse {
                self.before = Some(cursor);
            } else {
                self.after = Some(cursor);
            }
        }
        self
    }

    fn options(&self, limit: u32) -> PageOptions {
        PageOptions {
            prefix: self.prefix.clone(),
            after: self.after.clone(),
            before: self.before.clone(),
            limit: limit.min(MAX_PAGE),
            max_bytes: self.max_bytes,
            reverse: self.reverse,
        }
    }

    /// One page of at most `limit` entries (the host caps it at 1,000, and
    /// at the byte bound): one `scan-page` call.
    pub fn page(&self, limit: u32) -> Result<Page<T>> {
        let page = wit::scan_page(self.collection.name(), &self.options(limit))?;
        let entries = page
            .entries
            .into_iter()
            .map(|e| Ok(Entry { value: self.collection.decode(&e.key, &e.item.value)?, key: e.key, version: e.item.version }))
            .collect::<Result<Vec<_>>>()?;
        Ok(Page { entries, next: page.next })
    }

    /// Visit entries in order until `visit` returns `false` or the range
    /// ends, reading [`PAGE`] entries per host call.
    pub fn each(&self, mut visit: impl FnMut(Entry<T>) -> Result<bool>) -> Result<()> {
        let mut range = self.clone();
        loop {
            let page = range.page(PAGE)?;
            for entry in page.entries {
                if !visit(entry)? {
                    return Ok(());
                }
            }
            match page.next {
                Some(next) => range = range.resume(Some(next)),
                None => return Ok(()),
            }
        }
    }

    /// The first `n` entries in order (fewer when the range ends first),
    /// reading on past short pages.
    pub fn take(&self, n: usize) -> Result<Vec<Entry<T>>> {
        let mut out = Vec::with_capacity(n.min(MAX_PAGE as usize));
        let mut range = self.clone();
        while out.len() < n {
            let want = (n - out.len()).min(MAX_PAGE as usize) as u32;
            let page = range.page(want)?;
            out.extend(page.entries);
            match page.next {
                Some(next) => range = range.resume(Some(next)),
                None => break,
            }
        }
        out.truncate(n);
        Ok(out)
    }

    /// The first entry in order, if any.
    pub fn first(&self) -> Result<Option<Entry<T>>> {
        Ok(self.take(1)?.pop())
    }

    /// Every value of the range, in order.
    pub fn values(&self) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.each(|e| {
            out.push(e.value);
            Ok(true)
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TURNS: Collection<String> = Collection::new("turns");

    #[test]
    fn resume_moves_the_bound_on_the_reading_side() {
        let forward = TURNS.prefix("c1/").after("c1/a").resume(Some("c1/m"));
        let o = forward.options(10);
        assert_eq!((o.prefix.as_str(), o.after.as_deref(), o.before.as_deref(), o.reverse), ("c1/", Some("c1/m"), None, false));
        let back = TURNS.prefix("c1/").after("c1/a").reverse().resume(Some("c1/m"));
        let o = back.options(10);
        assert_eq!((o.after.as_deref(), o.before.as_deref(), o.reverse), (Some("c1/a"), Some("c1/m"), true));
        let unchanged = TURNS.all().before("z").resume(None::<String>).options(5);
        assert_eq!((unchanged.after, unchanged.before.as_deref()), (None, Some("z")));
    }

    #[test]
    fn pages_are_capped_at_the_host_limit() {
        assert_eq!(TURNS.all().options(5000).limit, 1000);
        assert_eq!(TURNS.all().max_bytes(4096).options(1).max_bytes, 4096);
    }
}
