//! The directory's maps: entries by id in creation order, with optional
//! tracking of the keys written (which `directory` hands on).

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use foldhash::HashMap;

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
    /// Counts every write, so a view derived from the entries can tell it
    /// is still current.
    generation: u64,
}

impl<V> Default for Tracked<V> {
    fn default() -> Self {
        Tracked { map: HashMap::default(), order: BTreeSet::new(), dirty: None, generation: 0 }
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

    /// Changes with every insert, removal and `get_mut` (of an existing key).
    pub fn generation(&self) -> u64 {
        self.generation
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

    pub(super) fn track(&mut self) {
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

    pub(super) fn has_dirty(&self) -> bool {
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
        self.generation += 1;
        self.order.insert((value.created_at(), key.clone()));
        let old = self.map.insert(key.clone(), Arc::new(value))?;
        if old.created_at() != self.map[&key].created_at() {
            self.order.remove(&(old.created_at(), key));
        }
        Some(Arc::unwrap_or_clone(old))
    }

    pub fn remove_quiet(&mut self, key: &str) -> Option<V> {
        let old = self.map.remove(key)?;
        self.generation += 1;
        self.order.remove(&(old.created_at(), key.to_string()));
        Some(Arc::unwrap_or_clone(old))
    }

    /// The entry to change: a copy if a listing still holds it.
    pub fn get_mut_quiet(&mut self, key: &str) -> Option<&mut V> {
        let entry = self.map.get_mut(key)?;
        self.generation += 1;
        Some(Arc::make_mut(entry))
    }
}

/// The keys written under one hold of the directory lock.
#[derive(Default, Debug)]
pub struct Changes {
    pub agents: Vec<String>,
    pub scopes: Vec<String>,
    pub sessions: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Scope;

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
}
