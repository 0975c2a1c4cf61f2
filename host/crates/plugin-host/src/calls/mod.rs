//! A plugin bound to one tenant (`TenantPlugin`) and every call into it:
//! JSON-RPC, HTTP, observed sends, timers and gRPC callbacks. Calls run on
//! the plugin threads, under a deadline and a memory cap; a failure is that
//! call's error, and an instance that failed or broke the contract is
//! never used again.
//!
//! `driver` runs one call of any kind; `json_rpc`, `http_requests`
//! (`http-handler`), `http_streams` (`wasi:http/incoming-handler`),
//! `observer` (its queue and loop), `on_timer`, `grpc_streams` and
//! `resources` are the calls of each kind; `placement` sends a cluster singleton's calls to the
//! node that runs it.

mod driver;
mod grpc_streams;
mod http_requests;
mod http_streams;
mod json_rpc;
mod observer;
mod on_timer;
mod placement;
mod resources;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

pub use observer::MAX_OBSERVER_HOPS;
pub use placement::Placement;
pub use resources::RESOURCES_PREFIX;

use crate::exports::Service;
use crate::grpc_calls::{code, status};
use crate::log_throttle::LogThrottle;
use crate::outbound::Policy;
use crate::plugin::{Descriptor, Plugin, Refused};
use crate::pool::Pool;
use crate::state::Context;
use crate::stats::CallStats;
use map_config::InstanceMode;
use map_protocol::rpc::{codes, RpcError};
use observer::Observation;

/// A plugin bound to one tenant: its own instances, configuration and storage scope.
pub struct TenantPlugin {
    pub plugin: Arc<Plugin>,
    /// What the plugin declared in this tenant's context.
    pub descriptor: Option<Descriptor>,
    pub interest: Option<Vec<String>>,
    pub services: Option<Vec<Service>>,
    /// Unary methods answered in one callback (`grpc-unary`), as paths.
    unary: Vec<String>,
    /// Resource types it provides in this tenant (`None`: no `resources` export).
    pub kinds: Option<Vec<String>>,
    ctx: Arc<Context>,
    pool: Pool,
    /// Places for `wasi:http` calls open at once (`max_streams`).
    streams: Arc<tokio::sync::Semaphore>,
    runtime: Handle,
    observer: Option<mpsc::Sender<Observation>>,
    dropped: LogThrottle,
    /// Plugin output reaches the log at most once a second.
    output: LogThrottle,
    stats: CallStats,
    /// A cluster singleton: where it runs and the way there.
    placement: Option<Placement>,
    /// While this node runs the cluster singleton: its subscriptions for calls from other nodes.
    served: parking_lot::Mutex<Option<map_cluster::singletons::Served>>,
    /// A newer version replaced this one.
    retired: AtomicBool,
}

impl TenantPlugin {
    /// Bind a plugin to a tenant, asking it what it serves there. With a
    /// placement (a cluster singleton) it runs only while this node holds its lease.
    pub async fn new(plugin: Arc<Plugin>, ctx: Arc<Context>, runtime: Handle, placement: Option<Placement>) -> anyhow::Result<Arc<TenantPlugin>> {
        let declared = plugin.declarations(ctx.clone()).await?;
        let (tx, rx) = declared.interest.as_ref().map(|_| observer::queue()).unzip();
        let pool = Pool::new(&plugin);
        let streams = Arc::new(tokio::sync::Semaphore::new(plugin.limits.max_streams.max(1)));
        let tp = Arc::new(TenantPlugin {
            plugin,
            descriptor: declared.descriptor,
            interest: declared.interest,
            services: declared.services,
            unary: declared.unary,
            kinds: declared.kinds,
            ctx,
            pool,
            streams,
            runtime: runtime.clone(),
            observer: tx,
            dropped: LogThrottle::new(),
            output: LogThrottle::new(),
            stats: CallStats::default(),
            placement,
            served: parking_lot::Mutex::new(None),
            retired: AtomicBool::new(false),
        });
        if let Some(rx) = rx {
            // One worker per tenant plugin keeps messages in send order.
            runtime.spawn(observer::observe_loop(Arc::downgrade(&tp), rx));
        }
        if let Some(p) = &tp.placement {
            runtime.spawn(placement::follow(Arc::downgrade(&tp), p.ownership.watch()));
        } else if tp.plugin.exports.lifecycle() {
            // `init` runs now, not at the first call: it may have timers to re-arm.
            runtime.spawn(start_one(Arc::downgrade(&tp)));
        }
        Ok(tp)
    }

    pub fn name(&self) -> &str {
        &self.plugin.name
    }

    /// Time one fresh instantiation and `init` (benchmarks; the instance is dropped).
    #[doc(hidden)]
    pub async fn time_instantiation(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let instance = self.plugin.start(self.ctx.clone()).await.map_err(|r| match r {
            Refused::Busy { why, .. } | Refused::Failed(why) => anyhow::Error::msg(why),
        })?;
        let took = started.elapsed();
        drop(instance);
        Ok(took)
    }

    /// The plugin's configuration for this tenant.
    pub fn config(&self) -> &Value {
        &self.ctx.config
    }

    /// Where the plugin may send HTTP requests for this tenant.
    pub fn outbound(&self) -> &Policy {
        &self.ctx.outbound
    }

    /// The singleton's state for the operator (`None` for pooled plugins).
    pub fn health(&self) -> Option<Value> {
        self.pool.health()
    }

    /// This tenant plugin for the admin API: mode, calls by outcome,
    /// instances, singleton health and the last failures.
    pub fn inspect(&self, tenant: &str) -> Value {
        let (calls, recent) = self.stats.view();
        let mode = match self.plugin.limits.mode {
            InstanceMode::Pooled => "pooled",
            InstanceMode::Singleton => "singleton",
        };
        let mut view = json!({"tenant": tenant, "plugin": self.plugin.name, "version": self.plugin.version(), "mode": mode,
               "calls": calls, "instances": self.pool.instances(&self.plugin), "health": self.pool.health(), "recentFailures": recent});
        if let Some(lease) = self.lease_view() {
            view["lease"] = lease;
        }
        if self.plugin.exports.incoming() {
            let max = self.plugin.limits.max_streams.max(1);
            view["streams"] = json!({"open": max - self.streams.available_permits(), "max": max});
        }
        view
    }

    /// This version was replaced by a hot swap: its gRPC calls end with
    /// UNAVAILABLE so that clients reconnect to the new one.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.served.lock().take();
        self.ctx.grpc.end_all(status(code::UNAVAILABLE, format!("plugin {} was replaced; reconnect", self.plugin.name)));
    }

    fn failure(&self, reason: String) -> RpcError {
        RpcError::new(codes::INTERNAL_ERROR, format!("Plugin {} failed: {reason}", self.plugin.name))
            .with_details(json!({"plugin": self.plugin.name, "version": self.plugin.version(), "reason": reason}))
    }
}

/// Start one instance of a plugin that exports `lifecycle`, so that its
/// `init` runs when it is bound to the tenant; the instance stays ready.
async fn start_one(tp: Weak<TenantPlugin>) {
    let Some(tp) = tp.upgrade() else { return };
    match tp.pool.acquire(&tp.plugin, &tp.ctx, Instant::now()).await {
        Ok((lease, _)) => tp.pool.release(lease, None, &tp.plugin, &tp.ctx, Instant::now()),
        Err(Refused::Failed(reason)) => tracing::warn!(plugin = tp.plugin.name, tenant = tp.ctx.scope.tenant, reason, "plugin instance could not start"),
        Err(Refused::Busy { why, .. }) => tracing::debug!(plugin = tp.plugin.name, tenant = tp.ctx.scope.tenant, why, "no instance started at bind"),
    }
}
