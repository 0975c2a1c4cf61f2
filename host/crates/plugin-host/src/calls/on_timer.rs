//! Due timers (`lifecycle.on-timer`), delivered from a task on the plugin threads.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::TenantPlugin;
use crate::exports::Invocation;
use crate::timers::OnTimer;

impl TenantPlugin {
    /// Deliver a due timer to `lifecycle.on-timer` (from a task on the plugin threads).
    pub async fn fire_timer(self: &Arc<Self>, id: u64, tag: String) {
        if let Err(e) = self.run_here(None, 0, Invocation::Timer { id, tag }, |_, _| Ok(())).await {
            tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, timer = id, error = e.message, "timer callback failed");
        }
    }
}

impl OnTimer for TenantPlugin {
    fn on_timer(self: Arc<Self>, id: u64, tag: String) -> BoxFuture<'static, ()> {
        Box::pin(async move { self.fire_timer(id, tag).await })
    }
}
