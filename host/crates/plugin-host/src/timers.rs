//! One-shot timers of a (tenant, plugin): scheduled by the `timers` import,
//! kept in the plugin's store (collection `$timers`, which only the host
//! reads), and delivered to `lifecycle.on-timer` on whatever version of the
//! plugin the tenant runs when they fire (the host aims them at each
//! version it binds).
//!
//! A timer's id holds its due time (milliseconds since the epoch, shifted
//! left 22 bits, with 22 random bits), and its key is the id in hex, so
//! the store lists timers in due order. Firing deletes the row first
//! (claim) and delivers only if that delete removed it: a cancel, another
//! node, or a fenced-out former owner never delivers it too. So a timer
//! fires at most once; one whose process died before it was due fires
//! late, on the node that next arms (`load`) or sweeps (`sweep`) it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

use map_store::{Op, Outcome, ScanOptions, Scope, Store};

/// Timers one (tenant, plugin) may have pending on one node.
pub const MAX_PENDING: usize = 10_000;
/// Longest delay of a timer.
pub const MAX_DELAY: Duration = Duration::from_secs(7 * 24 * 3600);
/// The host's collection in the plugin's store.
pub const COLLECTION: &str = "$timers";
/// How often stored timers that are overdue (their node died) are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// A timer this late is swept up even if this node armed it.
const OVERDUE: Duration = Duration::from_secs(2);
/// Timers read per page when arming what the store holds.
const PAGE: u32 = 500;

/// What a due timer is delivered to: a version of the plugin bound to the tenant.
pub trait OnTimer: Send + Sync {
    fn on_timer(self: Arc<Self>, id: u64, tag: String) -> BoxFuture<'static, ()>;
}

pub struct Timers {
    scope: Scope,
    /// The plugin's database (fenced when the plugin is a cluster singleton).
    db: Store,
    runtime: Handle,
    /// Armed in this process.
    pending: Mutex<HashMap<u64, AbortHandle>>,
    /// The version of the plugin the tenant runs; `None` while it runs none.
    target: Mutex<Option<Weak<dyn OnTimer>>>,
    /// Whether this node delivers the plugin's timers (a singleton's owner, or any node of a pooled plugin).
    active: AtomicBool,
}

fn key(id: u64) -> String {
    format!("{id:016x}")
}

fn due_ms(id: u64) -> u64 {
    id >> 22
}

fn new_id(due_ms: u64) -> u64 {
    (due_ms << 22) | (map_protocol::ids::random_u64() & 0x3f_ffff)
}

impl Timers {
    pub fn new(scope: Scope, db: Store, runtime: Handle, active: bool) -> Arc<Timers> {
        let timers = Arc::new(Timers { scope, db, runtime, pending: Mutex::new(HashMap::new()), target: Mutex::new(None), active: AtomicBool::new(active) });
        timers.runtime.spawn(sweep_loop(Arc::downgrade(&timers)));
        timers
    }

    /// Deliver timers that fire from now on to `target` (`None`: the tenant no longer runs the plugin).
    pub fn aim(&self, target: Option<Weak<dyn OnTimer>>) {
        *self.target.lock() = target;
    }

    pub async fn schedule(self: &Arc<Self>, delay_ms: u64, tag: String) -> Result<u64, String> {
        let delay = Duration::from_millis(delay_ms);
        if delay > MAX_DELAY {
            return Err(format!("a timer may be at most {} ms away", MAX_DELAY.as_millis()));
        }
        if self.pending.lock().len() >= MAX_PENDING {
            return Err(format!("{MAX_PENDING} timers are pending already"));
        }
        let due = map_protocol::ids::now_ms() + delay_ms;
        // A clash of ids (same millisecond, same random bits) picks another.
        for _ in 0..4 {
            let id = new_id(due);
            let ops = vec![
                Op::ExpectVersion { collection: COLLECTION.into(), key: key(id), version: 0 },
                Op::Put { collection: COLLECTION.into(), key: key(id), value: tag.clone().into_bytes() },
            ];
            match self.db.commit(&self.scope, ops).await {
                Ok(Outcome::Committed { .. }) => {
                    self.arm(id, tag);
                    return Ok(id);
                }
                Ok(Outcome::Conflict(_)) => continue,
                Err(e) => return Err(format!("the timer could not be stored: {e}")),
            }
        }
        Err("no free timer id; try again".into())
    }

    /// Cancel a pending timer: `true` when it was pending (on any node) and now will not fire.
    pub async fn cancel(&self, id: u64) -> bool {
        if let Some(task) = self.pending.lock().remove(&id) {
            task.abort();
        }
        matches!(self.db.delete(&self.scope, COLLECTION, &key(id)).await, Ok(true))
    }

    /// Arm `id` in this process, unless it is armed already.
    fn arm(self: &Arc<Self>, id: u64, tag: String) {
        let mut pending = self.pending.lock();
        if pending.contains_key(&id) {
            return;
        }
        let wait = Duration::from_millis(due_ms(id).saturating_sub(map_protocol::ids::now_ms()));
        let weak = Arc::downgrade(self);
        let task = self.runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(timers) = weak.upgrade() {
                timers.pending.lock().remove(&id);
                timers.fire(id, tag).await;
            }
        });
        pending.insert(id, task.abort_handle());
    }

    /// Claim a due timer in the store and, if this node got it, deliver it.
    async fn fire(&self, id: u64, tag: String) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let (tenant, plugin) = (&self.scope.tenant, &self.scope.plugin);
        // Not claimed while no version of the plugin takes it (during a
        // reload, say): it stays stored, and the sweep delivers it.
        let Some(target) = self.target.lock().as_ref().and_then(Weak::upgrade) else {
            tracing::debug!(tenant, plugin, timer = id, "timer due while no version of the plugin runs; left for the sweep");
            return;
        };
        match self.db.delete(&self.scope, COLLECTION, &key(id)).await {
            Ok(true) => {}
            // Cancelled, or fired by another node.
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(tenant, plugin, timer = id, error = %e, "a due timer could not be claimed; it stays stored");
                return;
            }
        }
        target.on_timer(id, tag).await;
    }

    /// Start (or stop) delivering: a node that became a singleton's owner
    /// arms every stored timer; one that lost it drops its armed ones
    /// (they stay stored for the next owner).
    pub async fn activate(self: &Arc<Self>, active: bool) {
        self.active.store(active, Ordering::Release);
        if !active {
            for (_, task) in self.pending.lock().drain() {
                task.abort();
            }
            return;
        }
        if let Err(e) = self.load(None).await {
            tracing::warn!(tenant = self.scope.tenant, plugin = self.scope.plugin, error = %e, "stored timers could not be read; the sweep retries");
        }
    }

    /// Arm stored timers (due before `until`, when given).
    async fn load(self: &Arc<Self>, until: Option<u64>) -> Result<(), String> {
        let mut after = None;
        loop {
            let o = ScanOptions { prefix: String::new(), after: after.clone(), before: until.map(key), limit: PAGE, reverse: false };
            let page = self.db.scan_page(&self.scope, COLLECTION, &o, usize::MAX, usize::MAX).await.map_err(|e| e.to_string())?;
            for (k, item) in &page.entries {
                if let (Ok(id), Ok(tag)) = (u64::from_str_radix(k, 16), String::from_utf8(item.value.clone())) {
                    self.arm(id, tag);
                }
            }
            match (page.next, page.entries.last()) {
                (Some(_), Some((last, _))) => after = Some(last.clone()),
                _ => return Ok(()),
            }
        }
    }
}

/// Arm stored timers that are overdue: those of a node that died (a pooled
/// plugin's), or that a failed claim left.
async fn sweep_loop(timers: Weak<Timers>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(t) = timers.upgrade() else { return };
        if !t.active.load(Ordering::Acquire) || t.target.lock().is_none() {
            continue;
        }
        let until = new_id(map_protocol::ids::now_ms().saturating_sub(OVERDUE.as_millis() as u64)) & !0x3f_ffff;
        if let Err(e) = t.load(Some(until)).await {
            tracing::debug!(tenant = t.scope.tenant, plugin = t.scope.plugin, error = %e, "sweeping overdue timers");
        }
    }
}
