//! The SQLite backend's read cache: recently read keys with their values
//! and versions (absent keys too), and recently read pages of ranges,
//! bounded in bytes, least recently used out first. Only this process
//! writes the database, and its writer applies every committed change here
//! before it acknowledges the commit (a cached key's entry is replaced, and
//! every cached page whose range holds the key is dropped), so a hit is
//! what the database holds: reads stay snapshots and plugins still read
//! their own writes.
//!
//! A write does not add a key that is not cached: records written once and
//! never read (a log's entries, a mailbox's turns) would otherwise fill the
//! budget, push out what is read, and cost a copy of every value written.
//! A key that is read comes in on its first read and is kept current by
//! later writes.
//!
//! A reader that missed fills the cache with what it read only if no
//! commit since it looked (`generation`) wrote those keys: otherwise it
//! could put back a value that a commit had just replaced. Recent commits'
//! keys are remembered (as hashes, a bounded number) for that check; when
//! they no longer reach back to the reader's look, the fill is dropped.
//! Under a steady stream of commits a read key would otherwise never come
//! in, since writes do not bring keys in. A page is kept only if no commit
//! at all came between.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use hashlink::LruCache;
use parking_lot::Mutex;

use super::ops::Item;
use super::{Page, Scope};

/// What an entry costs beyond its key and value (map node, list links).
const ENTRY_OVERHEAD: usize = 96;

pub struct Cache {
    inner: Mutex<Inner>,
    budget: usize,
}

enum Cached {
    Item(Option<Item>),
    /// A page and the collection (`collection_key`) it was read from.
    Page {
        page: Page,
        collection: String,
    },
}

/// A cached page's range: writes to keys in `lower..=upper` drop it.
struct Range {
    lower: String,
    upper: String,
    entry: String,
}

struct Inner {
    entries: LruCache<String, Cached>,
    /// Cached pages by collection, for dropping those a write touches.
    ranges: HashMap<String, Vec<Range>>,
    bytes: usize,
    /// Commits applied so far.
    generation: u64,
    /// Keys written by recent commits: (generation, hash of the entry key), oldest first.
    written: VecDeque<(u64, u64)>,
    /// Commits up to this one may have written keys `written` no longer holds.
    forgotten: u64,
}

/// Written keys remembered for fills that raced a commit (16 bytes each).
const WRITTEN_KEYS: usize = 4096;

fn key_hash(key: &str) -> u64 {
    foldhash::fast::FixedState::with_seed(0).hash_one(key)
}

/// One key a commit wrote: its value and version, or `None` when deleted.
/// The value is borrowed from the write, and copied only for a cached key.
pub struct Change<'a> {
    pub scope: &'a Scope,
    pub collection: &'a str,
    pub key: &'a str,
    pub value: Option<(Cow<'a, [u8]>, u64)>,
}

/// What a lookup found.
pub enum Lookup<T> {
    Hit(T),
    /// Not cached: read the database, then fill with this generation.
    Miss(u64),
}

/// Append `part` with its length first, so that no two sequences of parts
/// make the same key. (Built by hand: keys are made for every read.)
pub fn push_part(out: &mut String, part: &str) {
    out.push_str(itoa::Buffer::new().format(part.len()));
    out.push(':');
    out.push_str(part);
}

/// A scope's collection, as a key prefix.
fn collection_key(scope: &Scope, collection: &str) -> String {
    let mut out = String::with_capacity(scope.tenant.len() + scope.plugin.len() + collection.len() + 80);
    for part in [&scope.tenant, &scope.plugin, collection] {
        push_part(&mut out, part);
    }
    out
}

fn item_key(scope: &Scope, collection: &str, key: &str) -> String {
    let mut out = collection_key(scope, collection);
    out.push('i');
    out.push_str(key);
    out
}

fn page_key(collection: &str, request: &str) -> String {
    let mut out = String::with_capacity(collection.len() + request.len() + 1);
    out.push_str(collection);
    out.push('p');
    out.push_str(request);
    out
}

fn cost(key: &str, cached: &Cached) -> usize {
    ENTRY_OVERHEAD
        + key.len()
        + match cached {
            Cached::Item(item) => item.as_ref().map_or(0, |i| i.value.len()),
            Cached::Page { page, .. } => page.entries.iter().map(|(k, i)| ENTRY_OVERHEAD + k.len() + i.value.len()).sum(),
        }
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some(old) = self.entries.remove(key) {
            self.forget(key, &old);
        }
    }

    /// Account for an entry that left the map.
    fn forget(&mut self, key: &str, old: &Cached) {
        self.bytes -= cost(key, old);
        if let Cached::Page { collection, .. } = old {
            if let Some(ranges) = self.ranges.get_mut(collection) {
                ranges.retain(|r| r.entry != key);
                if ranges.is_empty() {
                    self.ranges.remove(collection);
                }
            }
        }
    }

    fn put(&mut self, key: String, cached: Cached, budget: usize) {
        let added = cost(&key, &cached);
        self.remove(&key);
        if added > budget {
            return;
        }
        self.bytes += added;
        self.entries.insert(key, cached);
        while self.bytes > budget {
            match self.entries.remove_lru() {
                Some((k, v)) => self.forget(&k, &v),
                None => break,
            }
        }
    }

    /// Whether a fill looked up at `generation` may put `key`: no commit
    /// since then wrote it, as far as `written` reaches back.
    fn unwritten_since(&self, generation: u64, key: &str) -> bool {
        if generation == self.generation {
            return true;
        }
        if self.forgotten > generation {
            return false;
        }
        let hash = key_hash(key);
        !self.written.iter().rev().take_while(|(g, _)| *g > generation).any(|(_, h)| *h == hash)
    }

    fn remember_written(&mut self, key: &str) {
        if self.written.len() == WRITTEN_KEYS {
            if let Some((g, _)) = self.written.pop_front() {
                self.forgotten = g;
            }
        }
        self.written.push_back((self.generation, key_hash(key)));
    }

    /// A key of `collection` changed: drop the pages whose range holds it.
    fn touch(&mut self, collection: &str, key: &str) {
        let Some(ranges) = self.ranges.get(collection) else { return };
        let stale: Vec<String> = ranges.iter().filter(|r| r.lower.as_str() <= key && key <= r.upper.as_str()).map(|r| r.entry.clone()).collect();
        for entry in stale {
            self.remove(&entry);
        }
    }
}

impl Cache {
    /// A cache of at most `budget` bytes; 0 turns it off.
    pub fn new(budget: usize) -> Cache {
        Cache {
            inner: Mutex::new(Inner {
                entries: LruCache::new_unbounded(),
                ranges: HashMap::new(),
                bytes: 0,
                generation: 0,
                written: VecDeque::new(),
                forgotten: 0,
            }),
            budget,
        }
    }

    fn on(&self) -> bool {
        self.budget > 0
    }

    /// All of `keys` from the cache, or a miss to read them from the database.
    pub fn lookup(&self, scope: &Scope, keys: &[(String, String)]) -> Lookup<Vec<Option<Item>>> {
        let cache_keys: Vec<String> = if self.on() { keys.iter().map(|(c, k)| item_key(scope, c, k)).collect() } else { Vec::new() };
        let mut inner = self.inner.lock();
        if !self.on() {
            return Lookup::Miss(inner.generation);
        }
        let mut found = Vec::with_capacity(keys.len());
        for k in &cache_keys {
            match inner.entries.get(k) {
                Some(Cached::Item(item)) => found.push(item.clone()),
                _ => return Lookup::Miss(inner.generation),
            }
        }
        Lookup::Hit(found)
    }

    /// Remember what a reader found, but not the keys a commit wrote since
    /// its lookup returned `generation`.
    pub fn fill(&self, generation: u64, scope: &Scope, keys: &[(String, String)], found: &[Option<Item>]) {
        if !self.on() {
            return;
        }
        let entries: Vec<(String, Option<Item>)> = keys.iter().zip(found).map(|((c, k), item)| (item_key(scope, c, k), item.clone())).collect();
        let mut inner = self.inner.lock();
        for (k, item) in entries {
            if inner.unwritten_since(generation, &k) {
                inner.put(k, Cached::Item(item), self.budget);
            }
        }
    }

    /// A page read before with the same request (`request` names the range
    /// and the page's bounds).
    pub fn page(&self, scope: &Scope, collection: &str, request: &str) -> Lookup<Page> {
        let key = if self.on() { page_key(&collection_key(scope, collection), request) } else { String::new() };
        let mut inner = self.inner.lock();
        match inner.entries.get(&key) {
            Some(Cached::Page { page, .. }) if self.on() => Lookup::Hit(page.clone()),
            _ => Lookup::Miss(inner.generation),
        }
    }

    /// Remember a page read from keys `lower..=upper`, unless a commit was
    /// applied since its lookup returned `generation`.
    pub fn fill_page(&self, generation: u64, scope: &Scope, collection: &str, request: &str, (lower, upper): (&str, &str), page: &Page) {
        if !self.on() {
            return;
        }
        let collection = collection_key(scope, collection);
        let key = page_key(&collection, request);
        let range = Range { lower: lower.to_string(), upper: upper.to_string(), entry: key.clone() };
        let cached = Cached::Page { page: page.clone(), collection: collection.clone() };
        let mut inner = self.inner.lock();
        if inner.generation != generation {
            return;
        }
        inner.put(key.clone(), cached, self.budget);
        if inner.entries.contains_key(&key) {
            inner.ranges.entry(collection).or_default().push(range);
        }
    }

    /// Apply one committed transaction's changes (in order: a later change
    /// of a key wins). Called by the writer after the commit and before it
    /// answers anyone. Only keys already cached take the new value.
    pub fn apply(&self, changes: Vec<Change<'_>>) {
        let mut inner = self.inner.lock();
        inner.generation += 1;
        if !self.on() {
            return;
        }
        for Change { scope, collection, key, value } in changes {
            let collection = collection_key(scope, collection);
            inner.touch(&collection, key);
            let mut item_key = collection;
            item_key.push('i');
            item_key.push_str(key);
            inner.remember_written(&item_key);
            if inner.entries.contains_key(&item_key) {
                let item = value.map(|(value, version)| Item { value: value.into_owned(), version });
                inner.put(item_key, Cached::Item(item), self.budget);
            }
        }
    }

    /// Bytes held (as the budget counts them).
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(t: &str) -> Scope {
        Scope { tenant: t.into(), plugin: "p".into() }
    }

    fn keys(ks: &[&str]) -> Vec<(String, String)> {
        ks.iter().map(|k| ("c".to_string(), k.to_string())).collect()
    }

    fn item(v: &str, version: u64) -> Option<Item> {
        Some(Item { value: v.as_bytes().to_vec(), version })
    }

    /// A commit that writes `value` (or deletes, for `None`) at `key` of collection "c".
    fn write<'a>(s: &'a Scope, key: &'a str, value: Option<&'a str>, version: u64) -> Change<'a> {
        Change { scope: s, collection: "c", key, value: value.map(|v| (Cow::Borrowed(v.as_bytes()), version)) }
    }

    /// A reader's miss and fill of `keys`, with nothing committed in between.
    fn read_in(c: &Cache, s: &Scope, ks: &[(String, String)], found: &[Option<Item>]) {
        let Lookup::Miss(generation) = c.lookup(s, ks) else { panic!("expected a miss") };
        c.fill(generation, s, ks, found);
    }

    fn hit<T>(l: Lookup<T>) -> T {
        match l {
            Lookup::Hit(v) => v,
            Lookup::Miss(_) => panic!("expected a hit"),
        }
    }

    #[test]
    fn a_fill_after_a_commit_is_dropped() {
        let c = Cache::new(1 << 20);
        let (s, ks) = (scope("t"), keys(&["a"]));
        let Lookup::Miss(generation) = c.lookup(&s, &ks) else { panic!("empty cache hit") };
        // A commit lands between the reader's database read and its fill.
        c.apply(vec![write(&s, "a", Some("new"), 2)]);
        c.fill(generation, &s, &ks, &[item("old", 1)]);
        assert!(matches!(c.lookup(&s, &ks), Lookup::Miss(_)), "the old value was not kept");
        read_in(&c, &s, &ks, &[item("new", 2)]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![item("new", 2)]);
    }

    #[test]
    fn a_fill_after_a_commit_of_other_keys_is_kept() {
        let c = Cache::new(1 << 20);
        let (s, ks) = (scope("t"), keys(&["a"]));
        let Lookup::Miss(generation) = c.lookup(&s, &ks) else { panic!("empty cache hit") };
        c.apply(vec![write(&s, "b", Some("x"), 2)]);
        c.fill(generation, &s, &ks, &[item("a", 1)]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![item("a", 1)]);
        // A cached key written while another reader read it keeps the new value.
        let Lookup::Miss(generation) = c.lookup(&s, &keys(&["z"])) else { panic!("z is not cached") };
        c.apply(vec![write(&s, "a", Some("new"), 3)]);
        c.fill(generation, &s, &ks, &[item("a", 1)]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![item("new", 3)]);
    }

    #[test]
    fn a_fill_older_than_the_remembered_writes_is_dropped() {
        let c = Cache::new(1 << 20);
        let (s, ks) = (scope("t"), keys(&["a"]));
        let Lookup::Miss(generation) = c.lookup(&s, &ks) else { panic!("empty cache hit") };
        let names: Vec<String> = (0..=WRITTEN_KEYS).map(|i| format!("k{i}")).collect();
        for name in &names {
            c.apply(vec![write(&s, name, Some("x"), 2)]);
        }
        c.fill(generation, &s, &ks, &[item("a", 1)]);
        assert!(matches!(c.lookup(&s, &ks), Lookup::Miss(_)), "a fill that the remembered writes no longer cover was kept");
    }

    #[test]
    fn absent_keys_and_deletes_are_remembered() {
        let c = Cache::new(1 << 20);
        let (s, ks) = (scope("t"), keys(&["a", "b"]));
        let Lookup::Miss(generation) = c.lookup(&s, &ks) else { panic!() };
        c.fill(generation, &s, &ks, &[item("x", 1), None]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![item("x", 1), None]);
        c.apply(vec![write(&s, "a", None, 2)]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![None, None]);
        // A cached absent key takes its first value.
        c.apply(vec![write(&s, "b", Some("y"), 3)]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![None, item("y", 3)]);
    }

    #[test]
    fn scopes_and_collections_do_not_collide() {
        let c = Cache::new(1 << 20);
        read_in(&c, &scope("t"), &keys(&["ab"]), &[item("1", 1)]);
        hit(c.lookup(&scope("t"), &keys(&["ab"])));
        assert!(matches!(c.lookup(&scope("t"), &[("ca".into(), "b".into())]), Lookup::Miss(_)));
        assert!(matches!(c.lookup(&scope("u"), &keys(&["ab"])), Lookup::Miss(_)));
        assert!(matches!(c.lookup(&Scope { tenant: "t".into(), plugin: "q".into() }, &keys(&["ab"])), Lookup::Miss(_)));
    }

    #[test]
    fn the_budget_holds_and_the_least_recently_used_go_first() {
        let budget = 3 * (ENTRY_OVERHEAD + 12 + 100);
        assert_eq!(item_key(&scope("t"), "c", "k1").len(), 12);
        let c = Cache::new(budget);
        let s = scope("t");
        let value = "v".repeat(100);
        for k in ["k1", "k2", "k3"] {
            read_in(&c, &s, &keys(&[k]), &[item(&value, 1)]);
        }
        hit(c.lookup(&s, &keys(&["k1"])));
        read_in(&c, &s, &keys(&["k4"]), &[item(&value, 1)]);
        assert!(c.bytes() <= budget);
        assert!(matches!(c.lookup(&s, &keys(&["k2"])), Lookup::Miss(_)), "k2 was the least recently used");
        hit(c.lookup(&s, &keys(&["k1", "k3", "k4"])));
        // A value bigger than the whole budget is not kept, and drops its stale entry.
        let big = "v".repeat(budget);
        c.apply(vec![write(&s, "k1", Some(&big), 2)]);
        assert!(matches!(c.lookup(&s, &keys(&["k1"])), Lookup::Miss(_)));
    }

    #[test]
    fn off_means_always_a_miss() {
        let c = Cache::new(0);
        let s = scope("t");
        read_in(&c, &s, &keys(&["a"]), &[item("x", 1)]);
        assert!(matches!(c.lookup(&s, &keys(&["a"])), Lookup::Miss(_)));
    }

    #[test]
    fn writes_keep_cached_keys_current_and_add_no_others() {
        let c = Cache::new(1 << 20);
        let s = scope("t");
        read_in(&c, &s, &keys(&["read"]), &[item("1", 1)]);
        let before = c.bytes();
        let turn = "t".repeat(2000);
        c.apply(vec![write(&s, "read", Some("2"), 2), write(&s, "turn/1", Some(&turn), 2)]);
        assert_eq!(hit(c.lookup(&s, &keys(&["read"]))), vec![item("2", 2)]);
        assert!(matches!(c.lookup(&s, &keys(&["turn/1"])), Lookup::Miss(_)), "a key written and never read is not cached");
        assert_eq!(c.bytes(), before, "the write took no room");
    }

    fn page(keys: &[&str]) -> Page {
        Page { entries: keys.iter().map(|k| (k.to_string(), Item { value: b"v".to_vec(), version: 1 })).collect(), next: None }
    }

    #[test]
    fn a_write_in_a_pages_range_drops_the_page() {
        let c = Cache::new(1 << 20);
        let s = scope("t");
        let Lookup::Miss(generation) = c.page(&s, "c", "conv1/") else { panic!() };
        c.fill_page(generation, &s, "c", "conv1/", ("conv1/", "conv1/\u{10FFFF}"), &page(&["conv1/a"]));
        assert_eq!(hit(c.page(&s, "c", "conv1/")).entries.len(), 1);
        // Writes outside the range, or in another collection or scope, keep it.
        let (u, other) = (scope("u"), Change { scope: &s, collection: "d", key: "conv1/b", value: None });
        c.apply(vec![write(&s, "conv2/a", Some("x"), 2), other, write(&u, "conv1/b", Some("x"), 2)]);
        assert_eq!(hit(c.page(&s, "c", "conv1/")).entries.len(), 1);
        c.apply(vec![write(&s, "conv1/b", Some("x"), 3)]);
        assert!(matches!(c.page(&s, "c", "conv1/"), Lookup::Miss(_)));
        // A page read before a commit is not kept.
        let Lookup::Miss(generation) = c.page(&s, "c", "conv1/") else { panic!() };
        c.apply(vec![write(&s, "conv9/z", Some("x"), 4)]);
        c.fill_page(generation, &s, "c", "conv1/", ("conv1/", "conv1/\u{10FFFF}"), &page(&["conv1/a"]));
        assert!(matches!(c.page(&s, "c", "conv1/"), Lookup::Miss(_)));
    }
}
