//! Where a tenant plugin's calls find an instance. `pooled`: ready
//! instances are reused, and at most `max_concurrency` calls run at once;
//! after a busy spell every instance it used stays ready for `IDLE_GRACE`
//! (starting one costs far more than a call), then the pool shrinks back
//! to `idle_instances`.
//! `singleton`: one instance takes every call in arrival order; one that
//! failed is replaced by a fresh one (with `init` again), with backoff when
//! failures repeat.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

use super::budget::Idle;
use super::deadline;
use super::instance::Instance;
use super::plugin::{Plugin, Refused};
use super::state::Context;
use map_config::InstanceMode;

/// Ready instances of one pool with when each was released, most recent at the back.
type IdleList = Mutex<VecDeque<(Instance, Instant)>>;

impl Idle for IdleList {
    fn idle_since(&self) -> Option<Instant> {
        self.lock().front().map(|(_, at)| *at)
    }

    fn retire_longest_idle(&self) -> bool {
        // Dropped after the lock is released: freeing an instance takes a while.
        let taken = self.lock().pop_front();
        taken.is_some()
    }
}

/// How long instances beyond `idle_instances` stay ready after their last call.
const IDLE_GRACE: Duration = Duration::from_secs(10);

pub struct Singleton {
    instance: Option<Instance>,
    /// Failures in a row (calls or starts); reset by a call that succeeds.
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

pub enum Pool {
    /// Ready instances (the engine's budget may retire them when it is full).
    Pooled {
        idle: Arc<IdleList>,
        slots: Arc<Semaphore>,
    },
    Singleton(Arc<tokio::sync::Mutex<Singleton>>),
}

/// An instance lent to one call; `release` says how the call went.
pub enum Lease {
    Pooled { instance: Instance, _slot: OwnedSemaphorePermit },
    Singleton(OwnedMutexGuard<Singleton>),
}

impl Lease {
    pub fn instance(&mut self) -> &mut Instance {
        match self {
            Lease::Pooled { instance, .. } => instance,
            Lease::Singleton(guard) => guard.instance.as_mut().expect("a leased singleton has an instance"),
        }
    }
}

/// A turn taken `now`, or else the one `later` gives within `wait` of
/// `asked` (then `ready_at` is when it came); `None` when none came in time.
async fn turn<T>(now: Option<T>, later: impl Future<Output = Option<T>>, asked: Instant, wait: Duration, ready_at: &mut Instant) -> Option<T> {
    if now.is_some() {
        return now;
    }
    let got = deadline::by(asked + wait, later).await.flatten();
    *ready_at = Instant::now();
    // The elapsed check holds the bound even when timers fire late.
    got.filter(|_| *ready_at - asked <= wait)
}

/// Delay before starting a singleton again after `failures` failures in a row.
fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => Duration::from_millis(100u64 << (n - 2).min(9)).min(Duration::from_secs(30)),
    }
}

impl Pool {
    pub fn new(plugin: &Plugin) -> Pool {
        match plugin.limits.mode {
            InstanceMode::Pooled => {
                let idle: Arc<IdleList> = Arc::new(Mutex::new(VecDeque::new()));
                plugin.budget().register(idle.clone());
                Pool::Pooled { idle, slots: Arc::new(Semaphore::new(plugin.limits.max_concurrency.max(1))) }
            }
            InstanceMode::Singleton => {
                Pool::Singleton(Arc::new(tokio::sync::Mutex::new(Singleton { instance: None, failures: 0, retry_at: None, last_error: None })))
            }
        }
    }

    /// An instance for one call, waiting at most one deadline (from
    /// `asked`) for a turn; with it, when it was ready (`asked` itself when
    /// nothing had to wait, which saves reading the clock).
    pub async fn acquire(&self, plugin: &Plugin, ctx: &Arc<Context>, asked: Instant) -> Result<(Lease, Instant), Refused> {
        let wait = plugin.limits.deadline;
        let busy = |why: String| Refused::Busy { retry_after: wait, why };
        let mut ready_at = asked;
        match self {
            Pool::Pooled { idle, slots } => {
                let now = slots.clone().try_acquire_owned().ok();
                let Some(slot) = turn(now, async { slots.clone().acquire_owned().await.ok() }, asked, wait, &mut ready_at).await else {
                    return Err(busy(format!("it is running {} calls of this tenant already", plugin.limits.max_concurrency)));
                };
                // The most recently used: its memory is the most likely cached.
                let ready = idle.lock().pop_back();
                let instance = match ready {
                    Some((i, _)) => i,
                    None => {
                        // Boxed: the rare start would otherwise size every call's future.
                        let started = Box::pin(plugin.start(ctx.clone())).await?;
                        ready_at = Instant::now();
                        started
                    }
                };
                Ok((Lease::Pooled { instance, _slot: slot }, ready_at))
            }
            Pool::Singleton(cell) => {
                let now = cell.clone().try_lock_owned().ok();
                let Some(mut guard) = turn(now, async { Some(cell.clone().lock_owned().await) }, asked, wait, &mut ready_at).await else {
                    return Err(busy("its instance is still busy with earlier calls".into()));
                };
                if guard.instance.is_none() {
                    if let Some(at) = guard.retry_at.filter(|at| *at > Instant::now()) {
                        let why = format!("it is restarting after failing: {}", guard.last_error.as_deref().unwrap_or("unknown"));
                        return Err(Refused::Busy { retry_after: at - Instant::now(), why });
                    }
                    match Box::pin(plugin.start(ctx.clone())).await {
                        Ok(i) => guard.instance = Some(i),
                        Err(Refused::Failed(reason)) => {
                            record_failure(&mut guard, plugin, ctx, &reason);
                            return Err(Refused::Failed(reason));
                        }
                        Err(busy) => return Err(busy),
                    }
                    ready_at = Instant::now();
                }
                Ok((Lease::Singleton(guard), ready_at))
            }
        }
    }

    /// Return an instance after its call (which ended at `now`): kept when
    /// the call went well, dropped (and, for a singleton, replaced on next
    /// use) when it did not.
    pub fn release(&self, lease: Lease, failure: Option<&str>, plugin: &Plugin, ctx: &Context, now: Instant) {
        match (self, lease) {
            (Pool::Pooled { idle, .. }, Lease::Pooled { instance, .. }) => {
                let limits = &plugin.limits;
                // Dropped after the lock is released: freeing an instance takes a while.
                let mut expired = Vec::new();
                let mut idle = idle.lock();
                if failure.is_none() && idle.len() < limits.max_concurrency.max(limits.idle_instances) {
                    idle.push_back((instance, now));
                }
                while idle.len() > limits.idle_instances && idle.front().is_some_and(|(_, at)| now.duration_since(*at) > IDLE_GRACE) {
                    expired.extend(idle.pop_front());
                }
                drop(idle);
                drop(expired);
            }
            (Pool::Singleton(_), Lease::Singleton(mut guard)) => match failure {
                None => {
                    guard.failures = 0;
                    guard.retry_at = None;
                }
                Some(reason) => {
                    guard.instance = None;
                    record_failure(&mut guard, plugin, ctx, reason);
                }
            },
            _ => unreachable!("a lease comes from its own pool"),
        }
    }

    /// Drop the singleton's instance once its current call is over (the
    /// plugin moved to another node); the next owner starts afresh.
    pub async fn reset(&self) {
        if let Pool::Singleton(cell) = self {
            let mut s = cell.lock().await;
            s.instance = None;
            s.failures = 0;
            s.retry_at = None;
        }
    }

    /// Instances ready and in use: `{idle, busy, max}`.
    pub fn instances(&self, plugin: &Plugin) -> serde_json::Value {
        match self {
            Pool::Pooled { idle, slots } => {
                let max = plugin.limits.max_concurrency.max(1);
                serde_json::json!({"idle": idle.lock().len(), "busy": max - slots.available_permits(), "max": max})
            }
            Pool::Singleton(cell) => {
                let (idle, busy) = match cell.try_lock() {
                    Ok(s) => (usize::from(s.instance.is_some()), 0),
                    Err(_) => (0, 1),
                };
                serde_json::json!({"idle": idle, "busy": busy, "max": 1})
            }
        }
    }

    /// The singleton's state, for the operator: `{running, failures, lastError}`
    /// (`{busy: true}` while a call holds it).
    pub fn health(&self) -> Option<serde_json::Value> {
        let Pool::Singleton(cell) = self else { return None };
        Some(match cell.try_lock() {
            Ok(s) => serde_json::json!({"running": s.instance.is_some(), "failures": s.failures, "lastError": s.last_error}),
            Err(_) => serde_json::json!({"busy": true}),
        })
    }
}

fn record_failure(s: &mut Singleton, plugin: &Plugin, ctx: &Context, reason: &str) {
    s.failures += 1;
    let delay = backoff(s.failures);
    s.retry_at = Some(Instant::now() + delay);
    s.last_error = Some(reason.to_string());
    tracing::error!(
        plugin = plugin.name,
        tenant = ctx.scope.tenant,
        failures = s.failures,
        retry_in_ms = delay.as_millis() as u64,
        reason,
        "singleton failed; a fresh instance will take the next call"
    );
}
