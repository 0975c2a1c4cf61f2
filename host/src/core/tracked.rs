//! The directory's maps with optional change tracking, and the lock that
//! hands the changes on: persistence (scopes in the embedded default) and
//! replication (everything in a cluster) see each change without every
//! method handler having to announce it.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use foldhash::HashMap;
use parking_lot::{Mutex, MutexGuard};

use super::registry::Registry;
use super::extensions::BoxFuture;

/// A map keyed by id that can remember which keys were written.
pub struct Tracked<V> {
    map: HashMap<String, V>,
    /// Keys written since the last `take_dirty` (`None`: not tracking).
    dirty: Option<Vec<String>>,
}

impl<V> Default for Tracked<V> {
    fn default() -> Self {
        Tracked { map: HashMap::default(), dirty: None }
    }
}

impl<V> Deref for Tracked<V> {
    type Target = HashMap<String, V>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<V> Tracked<V> {
    fn touch(&mut self, key: &str) {
        if let Some(d) = &mut self.dirty {
            d.push(key.to_string());
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        if self.map.contains_key(key) {
            self.touch(key);
        }
        self.map.get_mut(key)
    }

    pub fn insert(&mut self, key: String, value: V) -> Option<V> {
        self.touch(&key);
        self.map.insert(key, value)
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        let old = self.map.remove(key);
        if old.is_some() {
            self.touch(key);
        }
        old
    }

    /// Every value, mutably: each counts as written when tracking.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        if let Some(d) = &mut self.dirty {
            d.extend(self.map.keys().cloned());
        }
        self.map.values_mut()
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

    /// Write without counting it as a change (applying someone else's).
    pub fn insert_quiet(&mut self, key: String, value: V) -> Option<V> {
        self.map.insert(key, value)
    }

    pub fn remove_quiet(&mut self, key: &str) -> Option<V> {
        self.map.remove(key)
    }

    pub fn get_mut_quiet(&mut self, key: &str) -> Option<&mut V> {
        self.map.get_mut(key)
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
}

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
}
