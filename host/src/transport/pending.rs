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

#[derive(Default)]
pub struct Pending {
    /// By admission order: the first entry is the oldest. Eviction sends
    /// `true`: a watch, so a connection sees it whenever it next looks (a
    /// notification could be lost to a wait abandoned meanwhile).
    waiting: Mutex<BTreeMap<u64, watch::Sender<bool>>>,
    next: AtomicU64,
}

impl Pending {
    /// Register a connection that must send its first request head by `deadline`.
    pub fn admit(self: &Arc<Self>, deadline: Instant) -> Arc<Waiting> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (evict, evicted) = watch::channel(false);
        self.waiting.lock().insert(id, evict);
        Arc::new(Waiting { pending: self.clone(), id, evicted, started: AtomicBool::new(false), deadline })
    }

    /// Tell the oldest waiting connection to close; `false` when none waits.
    pub fn evict_oldest(&self) -> bool {
        let oldest = self.waiting.lock().pop_first();
        oldest.map(|(_, evict)| evict.send_replace(true)).is_some()
    }
}

/// One connection until its first request head.
pub struct Waiting {
    pending: Arc<Pending>,
    id: u64,
    evicted: watch::Receiver<bool>,
    started: AtomicBool,
    deadline: Instant,
}

impl Waiting {
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
