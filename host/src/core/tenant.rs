//! A tenant: a wall with its own directory, fabric and extensions. Nothing
//! is shared across tenants.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::extensions::{Extensions, NoExtensions};
use super::fabric::{Fabric, LocalFabric};
use super::registry::Registry;
use crate::config::LimitsConfig;

pub struct Tenant {
    pub id: String,
    pub registry: Mutex<Registry>,
    pub fabric: Arc<dyn Fabric>,
    extensions: RwLock<Arc<dyn Extensions>>,
    /// Which sends the observers may want (see `may_observe`), kept beside
    /// the set so a send without interest skips the lock.
    observed: AtomicU8,
}

const OBSERVE_NONE: u8 = 0;
const OBSERVE_WITH_META: u8 = 1;
const OBSERVE_ALL: u8 = 2;

impl Tenant {
    pub fn new(id: &str, limits: &LimitsConfig) -> Tenant {
        Tenant {
            id: id.to_string(),
            registry: Mutex::new(Registry::default()),
            fabric: Arc::new(LocalFabric::new(limits.replay_events, limits.replay_bytes)),
            extensions: RwLock::new(Arc::new(NoExtensions)),
            observed: AtomicU8::new(OBSERVE_NONE),
        }
    }

    /// The tenant's current extensions (a snapshot: a swap does not affect it).
    pub fn extensions(&self) -> Arc<dyn Extensions> {
        self.extensions.read().clone()
    }

    pub fn set_extensions(&self, set: Arc<dyn Extensions>) {
        let mut current = self.extensions.write();
        let observed = match (set.observes_any(false), set.observes_any(true)) {
            (true, _) => OBSERVE_ALL,
            (false, true) => OBSERVE_WITH_META,
            _ => OBSERVE_NONE,
        };
        self.observed.store(observed, Ordering::Relaxed);
        *current = set;
    }

    /// Whether an observer may want a send (with or without `meta`); when
    /// true, `extensions().observes(meta)` decides.
    pub fn may_observe(&self, has_meta: bool) -> bool {
        match self.observed.load(Ordering::Relaxed) {
            OBSERVE_ALL => true,
            OBSERVE_WITH_META => has_meta,
            _ => false,
        }
    }
}
