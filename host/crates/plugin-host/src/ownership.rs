//! Which node runs a singleton plugin of a tenant in a cluster: the one
//! holding its lease in PostgreSQL (`store::Leases`). Every node that runs
//! the plugin takes part: a holder renews every quarter of the lease, the
//! others try to take it as often. A holder that cannot renew gives the
//! plugin up before its lease can have expired in the database, and its
//! writes are fenced from the moment another node holds the lease.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::time::Instant;

use map_store::{Fence, Leases};

pub struct Ownership {
    pub fence: Arc<Fence>,
    leases: Leases,
    ttl: Duration,
    held: watch::Sender<bool>,
    runtime: Handle,
}

impl Ownership {
    pub fn start(fence: Arc<Fence>, leases: Leases, ttl: Duration, runtime: Handle) -> Arc<Ownership> {
        let (held, _) = watch::channel(false);
        let o = Arc::new(Ownership { fence, leases, ttl, held, runtime });
        o.runtime.spawn(keep(Arc::downgrade(&o)));
        o
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// This node holds the lease now.
    pub fn held(&self) -> bool {
        *self.held.borrow()
    }

    /// Changes of `held`.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.held.subscribe()
    }

    /// The lease for the operator: `{held, token}`.
    pub fn view(&self) -> serde_json::Value {
        serde_json::json!({"held": self.held(), "token": self.fence.token()})
    }

    fn lose(&self, why: &str) {
        self.fence.drop_lease();
        if self.held.send_replace(false) {
            tracing::warn!(tenant = self.fence.tenant, plugin = self.fence.plugin, why, "gave up the singleton's lease; another node runs it");
        }
    }
}

impl Drop for Ownership {
    /// No version of the plugin runs here any more: let another node take it at once.
    fn drop(&mut self) {
        if let Some(token) = self.fence.token() {
            let (leases, fence) = (self.leases.clone(), self.fence.clone());
            self.runtime.spawn(async move {
                let _ = leases.release(&fence, token).await;
            });
        }
    }
}

/// Take the lease when it is free, keep it while it can be renewed.
async fn keep(weak: Weak<Ownership>) {
    // Until when this node may act as the holder (by its own clock, counted
    // from before the request that took or renewed the lease).
    let mut valid_until = Instant::now();
    loop {
        let Some(o) = weak.upgrade() else { return };
        let every = o.ttl / 4;
        let asked = Instant::now();
        match o.fence.token() {
            // A database that hangs counts as failing once the next turn is due.
            None => match flatten(tokio::time::timeout(every, o.leases.acquire(&o.fence, o.ttl)).await) {
                Ok(Some(token)) => {
                    valid_until = asked + o.ttl;
                    o.fence.hold(token);
                    o.held.send_replace(true);
                    tracing::info!(tenant = o.fence.tenant, plugin = o.fence.plugin, token, "took the singleton's lease; this node runs it");
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(tenant = o.fence.tenant, plugin = o.fence.plugin, error = %e, "could not ask for the singleton's lease"),
            },
            Some(token) => match flatten(tokio::time::timeout(every, o.leases.renew(&o.fence, token, o.ttl)).await) {
                Ok(true) => valid_until = asked + o.ttl,
                Ok(false) => o.lose("another node took the lease"),
                // Given up while the lease surely still holds: the next
                // renewal could come too late.
                Err(e) if Instant::now() + every >= valid_until => o.lose(&format!("the lease could not be renewed: {e}")),
                Err(_) => {}
            },
        }
        drop(o);
        tokio::time::sleep(every).await;
    }
}

fn flatten<T>(r: Result<Result<T, map_store::StoreError>, tokio::time::error::Elapsed>) -> Result<T, String> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the database did not answer in time".into()),
    }
}
