//! Observed sends (`send-observer.on-send`): a bounded queue per tenant
//! plugin, drained in send order by one loop on the plugin threads; the
//! sender never waits.

use std::sync::{Arc, Weak};

use tokio::sync::mpsc;

use super::TenantPlugin;
use crate::exports::{Invocation, SentMessage};
use map_core::model::Observed;
use map_core::Active;

/// Observed messages waiting for an observer, per tenant plugin.
const OBSERVER_QUEUE: usize = 10_000;

/// A message sent from this many nested observer calls is not observed again.
pub const MAX_OBSERVER_HOPS: u8 = 4;

/// One message for the observer: the sender's session, the message, its hops.
pub type Observation = (Active, SentMessage, u8);

/// The queue of a tenant plugin that observes.
pub fn queue() -> (mpsc::Sender<Observation>, mpsc::Receiver<Observation>) {
    mpsc::channel(OBSERVER_QUEUE)
}

impl TenantPlugin {
    /// Queue a delivered message for the observer; never blocks the sender.
    pub fn observe(&self, active: &Active, msg: &Observed) {
        let Some(tx) = &self.observer else { return };
        if msg.hops >= MAX_OBSERVER_HOPS {
            if let Some(n) = self.dropped.hit() {
                tracing::warn!(
                    plugin = self.plugin.name,
                    tenant = self.ctx.scope.tenant,
                    messages = n,
                    "messages sent from {MAX_OBSERVER_HOPS} nested observer calls are not observed (a loop?)"
                );
            }
            return;
        }
        let sent = SentMessage {
            id: msg.id.clone(),
            from: msg.from.clone(),
            to: msg.to.clone(),
            timestamp: msg.timestamp,
            payload: msg.payload.clone(),
            meta: msg.meta.to_string(),
            delivered: msg.delivered.clone(),
        };
        if tx.try_send((active.clone(), sent, msg.hops)).is_err() {
            if let Some(n) = self.dropped.hit() {
                tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, messages = n, "observer queue full; messages not observed");
            }
        }
    }

    async fn call_observer(self: &Arc<Self>, active: Active, message: SentMessage, hops: u8) {
        let caller = crate::caller_of(&active);
        let invocation = Invocation::Observe { caller, message };
        // Calls the observer makes carry the hop count on to what they send.
        // Already on the plugin threads: no second hop.
        if let Err(e) = self.run_here(Some(active), hops + 1, invocation, |_, _| Ok(())).await {
            tracing::debug!(plugin = self.plugin.name, error = e.message, "observer call failed");
        }
    }
}

pub async fn observe_loop(tp: Weak<TenantPlugin>, mut rx: mpsc::Receiver<Observation>) {
    while let Some((active, msg, hops)) = rx.recv().await {
        let Some(tp) = tp.upgrade() else { return };
        tp.call_observer(active, msg, hops).await;
    }
}
