//! The SQLite backend's read cache: recently read and written keys with
//! their values and versions (absent keys too), bounded in bytes, least
//! recently used out first. Only this process writes the database, and its
//! writer puts every committed change here before it acknowledges the
//! commit, so a hit is what the database holds: reads stay snapshots and
//! plugins still read their own writes.
//!
//! A reader that missed fills the cache with what it read only if no
//! commit was applied since it looked (`generation`): otherwise it could
//! put back a value that a commit had just replaced.

use hashlink::LruCache;
use parking_lot::Mutex;

use super::ops::Item;
use super::Scope;

/// What an entry costs beyond its key and value (map node, list links).
const ENTRY_OVERHEAD: usize = 96;

pub struct Cache {
    inner: Mutex<Inner>,
    budget: usize,
}

struct Inner {
    entries: LruCache<String, Option<Item>>,
    bytes: usize,
    /// Commits applied so far.
    generation: u64,
}

/// What a lookup found.
pub enum Lookup {
    /// Every key, in the order asked.
    Hit(Vec<Option<Item>>),
    /// Some key is not cached: read the database, then `fill` with this.
    Miss(u64),
}

/// The cache's key: lengths first, so that no two scopes or keys collide.
fn cache_key(scope: &Scope, collection: &str, key: &str) -> String {
    let (t, p) = (&scope.tenant, &scope.plugin);
    format!("{}:{t}{}:{p}{}:{collection}{key}", t.len(), p.len(), collection.len())
}

fn cost(key: &str, item: &Option<Item>) -> usize {
    ENTRY_OVERHEAD + key.len() + item.as_ref().map_or(0, |i| i.value.len())
}

impl Inner {
    fn put(&mut self, key: String, item: Option<Item>, budget: usize) {
        let added = cost(&key, &item);
        if added > budget {
            if let Some(old) = self.entries.remove(&key) {
                self.bytes -= cost(&key, &old);
            }
            return;
        }
        self.bytes += added;
        if let Some(old) = self.entries.insert(key.clone(), item) {
            self.bytes -= cost(&key, &old);
        }
        while self.bytes > budget {
            match self.entries.remove_lru() {
                Some((k, v)) => self.bytes -= cost(&k, &v),
                None => break,
            }
        }
    }
}

impl Cache {
    /// A cache of at most `budget` bytes; 0 turns it off.
    pub fn new(budget: usize) -> Cache {
        Cache { inner: Mutex::new(Inner { entries: LruCache::new_unbounded(), bytes: 0, generation: 0 }), budget }
    }

    fn on(&self) -> bool {
        self.budget > 0
    }

    /// All of `keys` from the cache, or a miss to read them from the database.
    pub fn lookup(&self, scope: &Scope, keys: &[(String, String)]) -> Lookup {
        let cache_keys: Vec<String> = if self.on() { keys.iter().map(|(c, k)| cache_key(scope, c, k)).collect() } else { Vec::new() };
        let mut inner = self.inner.lock();
        if !self.on() {
            return Lookup::Miss(inner.generation);
        }
        let mut found = Vec::with_capacity(keys.len());
        for k in &cache_keys {
            match inner.entries.get(k) {
                Some(item) => found.push(item.clone()),
                None => return Lookup::Miss(inner.generation),
            }
        }
        Lookup::Hit(found)
    }

    /// Remember what a reader found, unless a commit was applied since its
    /// lookup returned `generation`.
    pub fn fill(&self, generation: u64, scope: &Scope, keys: &[(String, String)], found: &[Option<Item>]) {
        if !self.on() {
            return;
        }
        let entries: Vec<(String, Option<Item>)> = keys.iter().zip(found).map(|((c, k), item)| (cache_key(scope, c, k), item.clone())).collect();
        let mut inner = self.inner.lock();
        if inner.generation != generation {
            return;
        }
        for (k, item) in entries {
            inner.put(k, item, self.budget);
        }
    }

    /// Apply one committed transaction's changes (in order: a later change
    /// of a key wins). Called by the writer after the commit and before it
    /// answers anyone.
    pub fn apply(&self, changes: Vec<(&Scope, &str, &str, Option<Item>)>) {
        let entries: Vec<(String, Option<Item>)> = if self.on() { changes.into_iter().map(|(s, c, k, item)| (cache_key(s, c, k), item)).collect() } else { Vec::new() };
        let mut inner = self.inner.lock();
        inner.generation += 1;
        for (k, item) in entries {
            inner.put(k, item, self.budget);
        }
    }

    /// Bytes held, for tests.
    #[cfg(test)]
    fn bytes(&self) -> usize {
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

    fn hit(l: Lookup) -> Vec<Option<Item>> {
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
        c.apply(vec![(&s, "c", "a", item("new", 2))]);
        c.fill(generation, &s, &ks, &[item("old", 1)]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![item("new", 2)]);
    }

    #[test]
    fn absent_keys_and_deletes_are_remembered() {
        let c = Cache::new(1 << 20);
        let (s, ks) = (scope("t"), keys(&["a", "b"]));
        let Lookup::Miss(generation) = c.lookup(&s, &ks) else { panic!() };
        c.fill(generation, &s, &ks, &[item("x", 1), None]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![item("x", 1), None]);
        c.apply(vec![(&s, "c", "a", None)]);
        assert_eq!(hit(c.lookup(&s, &ks)), vec![None, None]);
    }

    #[test]
    fn scopes_and_collections_do_not_collide() {
        let c = Cache::new(1 << 20);
        c.apply(vec![(&scope("t"), "c", "ab", item("1", 1))]);
        assert!(matches!(c.lookup(&scope("t"), &[("ca".into(), "b".into())]), Lookup::Miss(_)));
        assert!(matches!(c.lookup(&scope("u"), &keys(&["ab"])), Lookup::Miss(_)));
        assert!(matches!(c.lookup(&Scope { tenant: "t".into(), plugin: "q".into() }, &keys(&["ab"])), Lookup::Miss(_)));
    }

    #[test]
    fn the_budget_holds_and_the_least_recently_used_go_first() {
        let budget = 3 * (ENTRY_OVERHEAD + 14 + 100);
        let c = Cache::new(budget);
        let s = scope("t");
        let value = "v".repeat(100);
        for k in ["k1", "k2", "k3"] {
            c.apply(vec![(&s, "c", k, item(&value, 1))]);
        }
        hit(c.lookup(&s, &keys(&["k1"])));
        c.apply(vec![(&s, "c", "k4", item(&value, 1))]);
        assert!(c.bytes() <= budget);
        assert!(matches!(c.lookup(&s, &keys(&["k2"])), Lookup::Miss(_)), "k2 was the least recently used");
        hit(c.lookup(&s, &keys(&["k1", "k3", "k4"])));
        // A value bigger than the whole budget is not kept, and drops its stale entry.
        c.apply(vec![(&s, "c", "k1", item(&"v".repeat(budget), 2))]);
        assert!(matches!(c.lookup(&s, &keys(&["k1"])), Lookup::Miss(_)));
    }

    #[test]
    fn off_means_always_a_miss() {
        let c = Cache::new(0);
        let s = scope("t");
        c.apply(vec![(&s, "c", "a", item("x", 1))]);
        assert!(matches!(c.lookup(&s, &keys(&["a"])), Lookup::Miss(_)));
    }
}
