//! The directory behind its lock, and the sink that hears of its changes:
//! persistence (scopes in the embedded default) and replication
//! (everything in a cluster) see each change without every method handler
//! having to announce it.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use futures_util::future::BoxFuture;
use parking_lot::{Mutex, MutexGuard};

use super::registry::Registry;
use super::tracked::{Changes, Position, Tracked};

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
    pub async fn walk<V, T>(
        &self,
        map: fn(&Registry) -> &Tracked<V>,
        from: Option<Position>,
        limit: usize,
        mut pick: impl FnMut(&Registry, &Arc<V>) -> Option<T>,
    ) -> Vec<T> {
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
    use crate::model::Scope;

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
