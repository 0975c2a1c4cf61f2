//! Graceful shutdown. When it begins, connections take no new requests,
//! let the calls in flight finish and answer, then close (WebSocket 1001,
//! SSE streams end, HTTP keep-alive stops); the process waits for them, up
//! to the drain time, before it exits.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub struct Drain {
    stopping: watch::Sender<bool>,
    open: watch::Sender<usize>,
}

/// Held by a connection while it is open.
pub struct Open(Arc<Drain>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Drain {
    pub fn new() -> Arc<Drain> {
        Arc::new(Drain { stopping: watch::channel(false).0, open: watch::channel(0).0 })
    }

    /// A connection opens.
    pub fn enter(self: &Arc<Self>) -> Open {
        self.open.send_modify(|n| *n += 1);
        Open(self.clone())
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    pub fn begin(&self) {
        self.stopping.send_replace(true);
    }

    /// Whether shutdown has begun, as a value to wait on (`wait_for(|s| *s)`).
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Resolves once shutdown has begun.
    pub fn stopping(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.stopping.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    /// Wait until every connection closed, at most `limit`; how many are still open.
    pub async fn closed(&self, limit: Duration) -> usize {
        let mut rx = self.open.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n == 0)).await;
        let left = *self.open.borrow();
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_waits_for_open_connections_up_to_its_limit() {
        let drain = Drain::new();
        let a = drain.enter();
        let b = drain.enter();
        let stopping = tokio::spawn(drain.stopping());
        drain.begin();
        stopping.await.unwrap();
        drop(a);
        assert_eq!(drain.closed(Duration::from_millis(20)).await, 1, "one still open at the limit");
        let later = tokio::spawn({
            let drain = drain.clone();
            async move { drain.closed(Duration::from_secs(5)).await }
        });
        tokio::task::yield_now().await;
        drop(b);
        assert_eq!(later.await.unwrap(), 0, "the wait ends when the last one closes");
    }
}
