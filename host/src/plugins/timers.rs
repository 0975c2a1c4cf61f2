//! One-shot timers of a (tenant, plugin): scheduled by the `timers` import,
//! delivered to the plugin's `lifecycle.on-timer` on whatever version of the
//! plugin the tenant runs when they fire (the host aims them at each version
//! it binds).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

/// Timers one (tenant, plugin) may have pending.
pub const MAX_PENDING: usize = 10_000;
/// Longest delay of a timer.
pub const MAX_DELAY: Duration = Duration::from_secs(7 * 24 * 3600);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a due timer is delivered to: a version of the plugin bound to the tenant.
pub trait OnTimer: Send + Sync {
    fn on_timer(self: Arc<Self>, id: u64, tag: String) -> BoxFuture<'static, ()>;
}

pub struct Timers {
    tenant: String,
    plugin: String,
    runtime: Handle,
    pending: Mutex<HashMap<u64, AbortHandle>>,
    /// The version of the plugin the tenant runs; `None` while it runs none.
    target: Mutex<Option<Weak<dyn OnTimer>>>,
}

impl Timers {
    pub fn new(tenant: &str, plugin: &str, runtime: Handle) -> Arc<Timers> {
        Arc::new(Timers { tenant: tenant.to_string(), plugin: plugin.to_string(), runtime, pending: Mutex::new(HashMap::new()), target: Mutex::new(None) })
    }

    /// Deliver timers that fire from now on to `target` (`None`: the tenant no longer runs the plugin).
    pub fn aim(&self, target: Option<Weak<dyn OnTimer>>) {
        *self.target.lock() = target;
    }

    pub fn schedule(self: &Arc<Self>, delay_ms: u64, tag: String) -> Result<u64, String> {
        let delay = Duration::from_millis(delay_ms);
        if delay > MAX_DELAY {
            return Err(format!("a timer may be at most {} ms away", MAX_DELAY.as_millis()));
        }
        let mut pending = self.pending.lock();
        if pending.len() >= MAX_PENDING {
            return Err(format!("{MAX_PENDING} timers are pending already"));
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let weak = Arc::downgrade(self);
        let task = self.runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(timers) = weak.upgrade() else { return };
            // Whoever removes the entry owns the timer: a cancel that came first wins.
            if timers.pending.lock().remove(&id).is_none() {
                return;
            }
            let target = timers.target.lock().as_ref().and_then(Weak::upgrade);
            match target {
                Some(target) => target.on_timer(id, tag).await,
                None => tracing::warn!(tenant = timers.tenant, plugin = timers.plugin, timer = id, "timer fired for a plugin the tenant no longer runs"),
            }
        });
        pending.insert(id, task.abort_handle());
        Ok(id)
    }

    pub fn cancel(&self, id: u64) -> bool {
        match self.pending.lock().remove(&id) {
            Some(task) => {
                task.abort();
                true
            }
            None => false,
        }
    }
}
