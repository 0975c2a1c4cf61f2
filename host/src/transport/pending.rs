//! Connections that have not yet sent a complete request head, oldest
//! first. Each must send one within the header timeout counted from accept
//! (a TLS handshake included); when the listener is full, the oldest of
//! them is closed to make room for a new peer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

/// What `evict_oldest` closed.
#[derive(PartialEq)]
pub enum Evicted {
    SlotHolder,
    Waiter,
    Nobody,
}

/// One waiting connection: how to evict it, and whether it holds a slot.
struct Entry {
    evict: watch::Sender<bool>,
    holds_slot: Arc<AtomicBool>,
}

#[derive(Default)]
pub struct Pending {
    /// By admission order: the first entry is the oldest. Eviction sends
    /// `true`: a watch, so a connection sees it whenever it next looks (a
    /// notification could be lost to a wait abandoned meanwhile).
    waiting: Mutex<BTreeMap<u64, Entry>>,
    next: AtomicU64,
}

impl Pending {
    /// Register a connection that must send its first request head by `deadline`.
    /// `holds_slot`: it has its connection slot already (else it is to say
    /// so with [`Waiting::got_slot`] once it has).
    pub fn admit(self: &Arc<Self>, deadline: Instant, holds_slot: bool) -> Arc<Waiting> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (evict, evicted) = watch::channel(false);
        let holds_slot = Arc::new(AtomicBool::new(holds_slot));
        self.waiting.lock().insert(id, Entry { evict, holds_slot: holds_slot.clone() });
        Arc::new(Waiting { pending: self.clone(), id, evicted, holds_slot, started: AtomicBool::new(false), deadline })
    }

    /// Tell the oldest waiting connection to close, one that holds a slot
    /// first (its slot comes free). What was evicted: a slot holder, one
    /// still waiting for a slot (it frees a descriptor, no slot), or nobody.
    pub fn evict_oldest(&self) -> Evicted {
        let mut waiting = self.waiting.lock();
        let holder = waiting.iter().find(|(_, e)| e.holds_slot.load(Ordering::Relaxed)).map(|(id, _)| *id);
        let (id, evicted) = match holder {
            Some(id) => (id, Evicted::SlotHolder),
            None => match waiting.keys().next() {
                Some(id) => (*id, Evicted::Waiter),
                None => return Evicted::Nobody,
            },
        };
        if let Some(e) = waiting.remove(&id) {
            e.evict.send_replace(true);
        }
        evicted
    }
}

/// One connection until its first request head.
pub struct Waiting {
    pending: Arc<Pending>,
    id: u64,
    evicted: watch::Receiver<bool>,
    holds_slot: Arc<AtomicBool>,
    started: AtomicBool,
    deadline: Instant,
}

impl Waiting {
    /// The connection has its slot now: evicting it frees one.
    pub fn got_slot(&self) {
        self.holds_slot.store(true, Ordering::Relaxed);
    }

    /// A complete request head arrived: the connection no longer waits.
    pub fn started(&self) {
        if !self.started.swap(true, Ordering::Relaxed) {
            self.pending.waiting.lock().remove(&self.id);
        }
    }

    /// Resolves when the connection must close: it was evicted, or the
    /// deadline passed, before a request head arrived. Never after one did.
    pub async fn expired(&self) {
        let mut evicted = self.evicted.clone();
        tokio::select! {
            _ = tokio::time::sleep_until(self.deadline) => {}
            // Closed without `true`: it left the queue with a request head, or is being dropped.
            closed = async { evicted.wait_for(|e| *e).await.is_err() } => if closed {
                std::future::pending::<()>().await;
            },
        }
        if self.started.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.pending.waiting.lock().remove(&self.id);
    }
}
