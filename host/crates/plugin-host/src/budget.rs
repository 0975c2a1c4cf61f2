//! The engine-wide cap on live instances. The pooling allocator has room
//! for a fixed number; each live instance holds a ticket, and a start that
//! finds none left first retires ready-but-idle instances of any pool
//! (the longest idle first), then waits for a ticket up to its deadline.
//! So a busy tenant can grow its pool while the engine has room, and an
//! engine that is full queues calls instead of failing them.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Ready instances of one pool that the budget may retire.
pub trait Idle: Send + Sync {
    /// When the longest-idle instance was released; `None` when none is idle.
    fn idle_since(&self) -> Option<Instant>;
    /// Drop the longest-idle instance (after releasing any lock); `false`
    /// if none was left (another start may have taken it).
    fn retire_longest_idle(&self) -> bool;
}

/// Held by a live instance; dropping the instance returns it.
pub type Ticket = OwnedSemaphorePermit;

pub struct Budget {
    tickets: Arc<Semaphore>,
    capacity: usize,
    pools: Mutex<Vec<Weak<dyn Idle>>>,
}

impl Budget {
    pub fn new(capacity: usize) -> Arc<Budget> {
        let budget = Arc::new(Budget { tickets: Arc::new(Semaphore::new(capacity)), capacity, pools: Mutex::new(Vec::new()) });
        let weak = Arc::downgrade(&budget);
        map_observe::metrics::sample_on_scrape(move || {
            if let Some(b) = weak.upgrade() {
                map_observe::metrics::instances(b.capacity - b.tickets.available_permits(), b.capacity);
            }
        });
        budget
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Let `idle` give up instances when the engine is full.
    pub fn register(&self, idle: Arc<dyn Idle>) {
        let mut pools = self.pools.lock();
        pools.retain(|p| p.strong_count() > 0);
        pools.push(Arc::downgrade(&idle));
    }

    /// A ticket for one more instance, or `None` when every instance stayed
    /// busy for `wait`.
    pub async fn ticket(&self, wait: Duration) -> Option<Ticket> {
        if let Ok(t) = self.tickets.clone().try_acquire_owned() {
            return Some(t);
        }
        // Each retired instance frees one ticket; a concurrent start may take
        // it first, so retire again until one is ours or nothing is idle.
        let until = Instant::now() + wait;
        loop {
            let retired = self.retire_one();
            if let Ok(t) = self.tickets.clone().try_acquire_owned() {
                return Some(t);
            }
            if !retired {
                let left = until.saturating_duration_since(Instant::now());
                return tokio::time::timeout(left, self.tickets.clone().acquire_owned()).await.ok()?.ok();
            }
        }
    }

    /// Drop the longest-idle ready instance of any pool; `false` if none is idle.
    fn retire_one(&self) -> bool {
        let pools: Vec<Arc<dyn Idle>> = self.pools.lock().iter().filter_map(Weak::upgrade).collect();
        let oldest = pools.iter().filter_map(|p| p.idle_since().map(|at| (at, p))).min_by_key(|(at, _)| *at).map(|(_, p)| p);
        // Another start may have emptied it meanwhile; the caller looks again.
        oldest.is_some_and(|p| p.retire_longest_idle())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_budget_waits_for_a_ticket_and_gives_up_at_the_deadline() {
        let budget = Budget::new(1);
        let held = budget.ticket(Duration::ZERO).await.expect("the first ticket is free");
        assert!(budget.ticket(Duration::from_millis(20)).await.is_none(), "no instance is idle and none ends");
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.ticket(Duration::from_secs(5)).await.is_some() }
        });
        tokio::task::yield_now().await;
        drop(held);
        assert!(waiting.await.unwrap(), "a ticket returned goes to the start that waits");
    }
}
