//! The directory's maps with optional change tracking, and the lock that
//! hands the changes on: persistence (scopes in the embedded default) and
//! replication (everything in a cluster) see each change without every
//! method handler having to announce it.

use std::collections::BTreeSet;
use std::ops::{Bound, Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use foldhash::HashMap;
use parking_lot::{Mutex, MutexGuard};

use super::registry::Registry;
use super::extensions::BoxFuture;

/// An entry's creation time (Unix ms): listings go by it, then by id. It
/// must not change once the entry is in a map (only a new `insert` may).
pub trait Created {
    fn created_at(&self) -> u64;
}

/// Where a walk in creation order stands: the last entry it saw.
pub type Position = (u64, String);

/// A map keyed by id that can remember which keys were written, and walk
/// its entries in creation order. Entries are shared (`Arc`): a listing
/// takes them a piece at a time and builds its answer after the lock is
/// released; a later write copies the entry instead of changing it under
/// the listing.
pub struct Tracked<V> {
    map: HashMap<String, Arc<V>>,
    /// Every key, by creation time then id.
    order: BTreeSet<Position>,
    /// Keys written since the last `take_dirty` (`None`: not tracking).
    dirty: Option<Vec<String>>,
}

impl<V> Default for Tracked<V> {
    fn default() -> Self {
        Tracked { map: HashMap::default(), order: BTreeSet::new(), dirty: None }
    }
}

impl<V> Tracked<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.map.get(key).map(|v| &**v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The entry itself, shared: it stays as it is now whatever is written later.
    pub fn shared(&self, key: &str) -> Option<Arc<V>> {
        self.map.get(key).cloned()
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values().map(|v| &**v)
    }

    /// Every value, by creation time then id.
    pub fn in_order(&self) -> impl Iterator<Item = &V> {
        self.order.iter().filter_map(|(_, k)| self.get(k))
    }

    /// Up to `n` entries after `from` (from the first without), in creation order.
    pub fn after(&self, from: Option<&Position>, n: usize) -> impl Iterator<Item = (&Position, &Arc<V>)> {
        let start = from.map_or(Bound::Unbounded, Bound::Excluded);
        self.order.range((start, Bound::Unbounded)).take(n).filter_map(|at| Some((at, self.map.get(&at.1)?)))
    }

    fn touch(&mut self, key: &str) {
        if let Some(d) = &mut self.dirty {
            d.push(key.to_string());
        }
    }

    fn track(&mut self) {
        self.dirty.get_or_insert_with(Vec::new);
    }

    /// The keys written since the last call, each once.
    pub fn take_dirty(&mut self) -> Vec<String> {
        let Some(d) = &mut self.dirty else { return Vec::new() };
        let mut keys = std::mem::take(d);
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    fn has_dirty(&self) -> bool {
        self.dirty.as_ref().is_some_and(|d| !d.is_empty())
    }
}

impl<V: Created + Clone> Tracked<V> {
    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        if self.map.contains_key(key) {
            self.touch(key);
        }
        self.get_mut_quiet(key)
    }

    pub fn insert(&mut self, key: String, value: V) -> Option<V> {
        self.touch(&key);
        self.insert_quiet(key, value)
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        let old = self.remove_quiet(key);
        if old.is_some() {
            self.touch(key);
        }
        old
    }

    /// Write without counting it as a change (applying someone else's).
    pub fn insert_quiet(&mut self, key: String, value: V) -> Option<V> {
        self.order.insert((value.created_at(), key.clone()));
        let old = self.map.insert(key.clone(), Arc::new(value))?;
        if old.created_at() != self.map[&key].created_at() {
            self.order.remove(&(old.created_at(), key));
        }
        Some(Arc::unwrap_or_clone(old))
    }

    pub fn remove_quiet(&mut self, key: &str) -> Option<V> {
        let old = self.map.remove(key)?;
        self.order.remove(&(old.created_at(), key.to_string()));
        Some(Arc::unwrap_or_clone(old))
    }

    /// The entry to change: a copy if a listing still holds it.
    pub fn get_mut_quiet(&mut self, key: &str) -> Option<&mut V> {
        self.map.get_mut(key).map(Arc::make_mut)
    }
}

/// The keys written under one hold of the directory lock.
#[derive(Default, Debug)]
pub struct Changes {
    pub agents: Vec<String>,
    pub scopes: Vec<String>,
    pub sessions: Vec<String>,
}

/// Who hears of directory changes. Called with the directory still locked,
/// so changes arrive in the order they were made; it must not block long.
pub trait ChangeSink: Send + Sync {
    fn changed(&self, reg: &Registry, changes: Changes);
    /// Done once the changes reported so far are kept where the sink puts
    /// them (none: it keeps them at once, or does not say).
    fn saved(&self) -> Option<BoxFuture<'static, ()>> {
        None
    }
}

/// Which maps a sink wants changes of.
#[derive(Clone, Copy)]
pub struct Track {
    pub agents: bool,
    pub scopes: bool,
    pub sessions: bool,
}

/// The directory behind its lock.
#[derive(Default)]
pub struct Directory {
    inner: Mutex<Registry>,
    sink: OnceLock<Arc<dyn ChangeSink>>,
}

impl Directory {
    pub fn lock(&self) -> DirectoryGuard<'_> {
        DirectoryGuard { guard: self.inner.lock(), sink: self.sink.get() }
    }

    /// Done once the changes made so far are kept by the sink (see `ChangeSink::saved`).
    pub fn saved(&self) -> Option<BoxFuture<'static, ()>> {
        self.sink.get()?.saved()
    }

    /// Start telling `sink` of changes to the maps `track` names (once).
    pub fn watch(&self, sink: Arc<dyn ChangeSink>, track: Track) {
        let mut reg = self.inner.lock();
        if track.agents {
            reg.agents.track();
        }
        if track.scopes {
            reg.scopes.track();
        }
        if track.sessions {
            reg.sessions.track();
        }
        let _ = self.sink.set(sink);
    }

    /// Walk one map in creation order, after `from` (from the start
    /// without), without holding the lock for long: `WALK_CHUNK` entries per
    /// hold, yielding to the runtime between holds, so other requests wait
    /// for one piece at most. `pick` sees each entry beside the whole
    /// directory and says what to keep; the walk stops once `limit` are
    /// kept. An entry written meanwhile is seen as it was or as it is, one
    /// added or removed meanwhile may be missed; none is seen twice.
    pub async fn walk<V, T>(&self, map: fn(&Registry) -> &Tracked<V>, from: Option<Position>, limit: usize, mut pick: impl FnMut(&Registry, &Arc<V>) -> Option<T>) -> Vec<T> {
        let mut kept = Vec::new();
        let mut at = from;
        while kept.len() < limit {
            let next = {
                let reg = self.inner.lock();
                let mut last = None;
                for (position, entry) in map(&reg).after(at.as_ref(), WALK_CHUNK) {
                    last = Some(position);
                    kept.extend(pick(&reg, entry));
                    if kept.len() >= limit {
                        break;
                    }
                }
                last.cloned()
            };
            match next {
                Some(position) => at = Some(position),
                None => break,
            }
            tokio::task::yield_now().await;
        }
        kept
    }
}

/// Entries a `walk` reads per hold of the directory lock.
const WALK_CHUNK: usize = 512;

pub struct DirectoryGuard<'a> {
    guard: MutexGuard<'a, Registry>,
    sink: Option<&'a Arc<dyn ChangeSink>>,
}

impl Deref for DirectoryGuard<'_> {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.guard
    }
}

impl DerefMut for DirectoryGuard<'_> {
    fn deref_mut(&mut self) -> &mut Registry {
        &mut self.guard
    }
}

impl Drop for DirectoryGuard<'_> {
    fn drop(&mut self) {
        let Some(sink) = self.sink else { return };
        let reg = &mut *self.guard;
        if !(reg.agents.has_dirty() || reg.scopes.has_dirty() || reg.sessions.has_dirty()) {
            return;
        }
        let changes = Changes { agents: reg.agents.take_dirty(), scopes: reg.scopes.take_dirty(), sessions: reg.sessions.take_dirty() };
        sink.changed(reg, changes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::Scope;

    struct Seen(Mutex<Vec<String>>);
    impl ChangeSink for Seen {
        fn changed(&self, _: &Registry, changes: Changes) {
            self.0.lock().extend(changes.scopes);
        }
    }

    #[test]
    fn writes_are_reported_once_per_hold_and_quiet_ones_not_at_all() {
        let dir = Directory::default();
        let seen = Arc::new(Seen(Mutex::new(Vec::new())));
        dir.watch(seen.clone(), Track { agents: false, scopes: true, sessions: false });
        {
            let mut reg = dir.lock();
            reg.scopes.insert("s1".into(), Scope::open("s1", "p"));
            reg.scopes.get_mut("s1").unwrap().name = Some("one".into());
            reg.scopes.insert_quiet("s2".into(), Scope::open("s2", "p"));
        }
        assert_eq!(*seen.0.lock(), vec!["s1".to_string()]);
        drop(dir.lock());
        assert_eq!(seen.0.lock().len(), 1, "a hold without writes reports nothing");
    }

    fn scope_at(id: &str, created_at: u64) -> Scope {
        Scope { created_at, ..Scope::open(id, "p") }
    }

    fn ids<'a>(scopes: impl Iterator<Item = &'a Scope>) -> Vec<String> {
        scopes.map(|s| s.id.clone()).collect()
    }

    #[test]
    fn entries_go_by_creation_time_then_id() {
        let mut t = Tracked::default();
        t.insert("b".into(), scope_at("b", 2));
        t.insert("a".into(), scope_at("a", 2));
        t.insert("c".into(), scope_at("c", 1));
        assert_eq!(ids(t.in_order()), ["c", "a", "b"]);
        t.insert("c".into(), scope_at("c", 3));
        assert_eq!(ids(t.in_order()), ["a", "b", "c"], "a new insert with another time moves the entry");
        t.remove("a");
        assert_eq!(ids(t.in_order()), ["b", "c"]);
        assert_eq!(ids(t.after(Some(&(2, "b".into())), 10).map(|(_, s)| &**s)), ["c"]);
        assert_eq!(ids(t.after(None, 1).map(|(_, s)| &**s)), ["b"]);
    }

    #[test]
    fn a_shared_entry_stays_as_it_was_when_written_later() {
        let mut t = Tracked::default();
        t.insert("s".into(), scope_at("s", 1));
        let before = t.shared("s").expect("there");
        t.get_mut("s").expect("there").name = Some("new".into());
        assert_eq!(before.name, None);
        assert_eq!(t.get("s").and_then(|s| s.name.as_deref()), Some("new"));
    }

    #[tokio::test]
    async fn a_walk_sees_each_entry_once_in_order_and_stops_at_its_limit() {
        let dir = Directory::default();
        let n = WALK_CHUNK * 2 + 5;
        {
            let mut reg = dir.lock();
            for i in 0..n {
                let id = format!("s{i:05}");
                reg.scopes.insert(id.clone(), scope_at(&id, 7));
            }
        }
        let all = dir.walk(|r| &r.scopes, None, usize::MAX, |_, s| Some(s.id.clone())).await;
        assert_eq!(all, (0..n).map(|i| format!("s{i:05}")).collect::<Vec<_>>());
        let some = dir.walk(|r| &r.scopes, Some((7, "s00009".into())), 3, |_, s| Some(s.id.clone())).await;
        assert_eq!(some, ["s00010", "s00011", "s00012"]);
        let picked = dir.walk(|r| &r.scopes, None, usize::MAX, |_, s| s.id.ends_with("00").then(|| s.id.clone())).await;
        assert_eq!(picked.len(), n.div_ceil(100));
    }
}
