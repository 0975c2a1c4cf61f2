//! A plugin bound to one tenant (`TenantPlugin`) and every call into it:
//! JSON-RPC, HTTP, observed sends, timers and gRPC callbacks. Calls run on
//! the plugin threads, under a deadline and a memory cap; a failure is that
//! call's error, and an instance that failed or broke the contract is
//! never used again.

mod grpc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::bindings::{Caller, RpcError as WitError};
use super::exports::{HttpRequest, HttpResponse, Invocation, Outcome, SentMessage, Service};
use super::grpc::{code, status};
use super::instance::classify;
use super::plugin::{Descriptor, Plugin, Refused};
use super::pool::Pool;
use super::state::Context;
use super::stats::CallStats;
use crate::config::InstanceMode;
use crate::core::Observed;
use crate::core::outbox::Frame;
use crate::core::Active;
use crate::rpc::{codes, RpcError};

/// Observed messages waiting for an observer, per tenant plugin.
const OBSERVER_QUEUE: usize = 10_000;

/// A message sent from this many nested observer calls is not observed again.
pub const MAX_OBSERVER_HOPS: u8 = 4;

/// A log line that may repeat often: written at most once a second, with a count.
struct Throttled {
    state: parking_lot::Mutex<(Option<Instant>, u64)>,
}

impl Throttled {
    fn new() -> Throttled {
        Throttled { state: parking_lot::Mutex::new((None, 0)) }
    }

    /// Count one occurrence; `Some(n)` when a line for `n` occurrences is due.
    fn hit(&self) -> Option<u64> {
        let mut s = self.state.lock();
        s.1 += 1;
        let due = s.0.is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        due.then(|| {
            s.0 = Some(Instant::now());
            std::mem::take(&mut s.1)
        })
    }
}

/// A plugin bound to one tenant: its own instances, configuration and storage scope.
pub struct TenantPlugin {
    pub plugin: Arc<Plugin>,
    /// What the plugin declared in this tenant's context.
    pub descriptor: Option<Descriptor>,
    pub interest: Option<Vec<String>>,
    pub services: Option<Vec<Service>>,
    ctx: Arc<Context>,
    pool: Pool,
    runtime: Handle,
    observer: Option<mpsc::Sender<(Active, SentMessage, u8)>>,
    dropped: Throttled,
    /// Plugin output reaches the log at most once a second.
    output: Throttled,
    stats: CallStats,
}

impl TenantPlugin {
    /// Bind a plugin to a tenant, asking it what it serves there.
    pub async fn new(plugin: Arc<Plugin>, ctx: Arc<Context>, runtime: Handle) -> anyhow::Result<Arc<TenantPlugin>> {
        let declared = plugin.declarations(ctx.clone()).await?;
        let (tx, rx) = match declared.interest {
            Some(_) => {
                let (tx, rx) = mpsc::channel(OBSERVER_QUEUE);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let pool = Pool::new(&plugin);
        let tp = Arc::new(TenantPlugin {
            plugin,
            descriptor: declared.descriptor,
            interest: declared.interest,
            services: declared.services,
            ctx,
            pool,
            runtime: runtime.clone(),
            observer: tx,
            dropped: Throttled::new(),
            output: Throttled::new(),
            stats: CallStats::default(),
        });
        if let Some(rx) = rx {
            // One worker per tenant plugin keeps messages in send order.
            runtime.spawn(observe_loop(Arc::downgrade(&tp), rx));
        }
        if tp.plugin.exports.lifecycle() {
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
    pub fn outbound(&self) -> &super::outbound::Policy {
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
        json!({"tenant": tenant, "plugin": self.plugin.name, "version": self.plugin.version(), "mode": mode,
               "calls": calls, "instances": self.pool.instances(&self.plugin), "health": self.pool.health(), "recentFailures": recent})
    }

    /// This version was replaced by a hot swap: its gRPC calls end with
    /// UNAVAILABLE so that clients reconnect to the new one.
    pub fn retire(&self) {
        self.ctx.grpc.end_all(status(code::UNAVAILABLE, format!("plugin {} was replaced; reconnect", self.plugin.name)));
    }

    fn failure(&self, reason: String) -> RpcError {
        RpcError::new(codes::INTERNAL_ERROR, format!("Plugin {} failed: {reason}", self.plugin.name))
            .with_details(json!({"plugin": self.plugin.name, "version": self.plugin.version(), "reason": reason}))
    }

    /// Run one invocation (its first slice here, the rest on the plugin
    /// threads). `accept` turns the outcome
    /// into the answer, or names how it broke the contract (the instance is
    /// then discarded, and the call fails).
    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        caller: Option<Active>,
        hops: u8,
        invocation: Invocation,
        accept: impl FnOnce(&TenantPlugin, Outcome) -> Result<T, String> + Send + 'static,
    ) -> Result<(T, Vec<Frame>), RpcError> {
        let this = self.clone();
        // A child of the request's span (current here), carried to the plugin threads with the call.
        let span = crate::telemetry::plugin_call(&self.plugin.name, &self.ctx.scope.tenant, invocation.kind());
        let mut call = Box::pin(tracing::Instrument::instrument(async move { this.run_here(caller, hops, invocation, accept).await }, span));
        // Most calls finish within their first slice (at most one 5 ms epoch
        // tick): answer those here, without a thread hop. A call that yields
        // (still running at the tick, or waiting for storage or a turn) goes
        // on on the plugin threads, so it cannot hold a connection thread.
        if let Some(done) = futures_util::FutureExt::now_or_never(&mut call) {
            return done;
        }
        // The task runs to the end even if the caller stops waiting, so an
        // instance is never dropped in the middle of a call.
        let task = self.runtime.spawn(call);
        task.await.unwrap_or_else(|e| Err(self.failure(format!("crashed the host task: {e}"))))
    }

    async fn run_here<T>(
        &self,
        caller: Option<Active>,
        hops: u8,
        invocation: Invocation,
        accept: impl FnOnce(&TenantPlugin, Outcome) -> Result<T, String>,
    ) -> Result<(T, Vec<Frame>), RpcError> {
        let limits = &self.plugin.limits;
        let started = Instant::now();
        let mut lease = match self.pool.acquire(&self.plugin, &self.ctx).await {
            Ok(l) => l,
            Err(Refused::Busy { retry_after, why }) => {
                self.stats.record(&self.plugin.name, "busy", started.elapsed(), Some(&why));
                return Err(RpcError::new(codes::RESOURCE_EXHAUSTED, format!("Plugin {} cannot take the call now: {why}; try again later", self.plugin.name))
                    .with_data(json!({"retryAfterMs": retry_after.as_millis() as u64, "plugin": self.plugin.name})));
            }
            Err(Refused::Failed(reason)) => {
                self.stats.record(&self.plugin.name, "failed", started.elapsed(), Some(&reason));
                tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, reason, "plugin instance could not start");
                return Err(self.failure(reason));
            }
        };
        let grpc_call = invocation.grpc_call();
        let instance = lease.instance();
        instance.arm(Instant::now() + limits.deadline, caller, hops);
        let outcome = {
            let super::instance::Instance { store, bound, .. } = instance;
            // The epoch check interrupts wasm code; the outer timeout also bounds host calls.
            tokio::time::timeout(limits.deadline + Duration::from_millis(500), bound.invoke(store, invocation)).await
        };
        let (answer, outcome) = match outcome {
            Err(_) => (Err(format!("timed out after {} ms", limits.deadline.as_millis())), "timeout"),
            Ok(Err(e)) => {
                let why = classify(&e, limits.deadline.as_millis(), limits.memory_bytes);
                let outcome = if why.starts_with("timed out") {
                    "timeout"
                } else if why.starts_with("exceeded its memory limit") {
                    "out_of_memory"
                } else {
                    "trap"
                };
                (Err(why), outcome)
            }
            Ok(Ok(outcome)) => {
                let answer = accept(self, outcome);
                let outcome = if answer.is_ok() { "ok" } else { "error" };
                (answer, outcome)
            }
        };
        let last_error = self.log_output(lease.instance().store.data());
        let answer = answer.map_err(|reason| match last_error {
            Some(line) => format!("{reason}; its stderr said: {line}"),
            None => reason,
        });
        self.stats.record(&self.plugin.name, outcome, started.elapsed(), answer.as_ref().err().map(String::as_str));
        crate::telemetry::plugin_outcome(&tracing::Span::current(), outcome);
        match answer {
            Ok(value) => {
                let data = lease.instance().store.data_mut();
                let deferred = std::mem::take(&mut data.deferred);
                data.caller = None;
                self.pool.release(lease, None, &self.plugin, &self.ctx);
                Ok((value, deferred))
            }
            Err(reason) => {
                tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, reason, "plugin call failed; instance discarded");
                self.pool.release(lease, Some(&reason), &self.plugin, &self.ctx);
                if self.plugin.limits.mode == InstanceMode::Singleton {
                    // The streams lived in the failed instance's memory; the
                    // failing call itself ends with INTERNAL from its caller.
                    let why = format!("plugin {} failed and a fresh instance replaces it; reconnect", self.plugin.name);
                    self.ctx.grpc.end_all_but(grpc_call, status(code::UNAVAILABLE, why));
                }
                Err(self.failure(reason))
            }
        }
    }

    /// Log what the instance wrote to stdout and stderr during the call (at
    /// most one call's output per second per tenant plugin); the last two
    /// lines of stderr, for the call's failure.
    fn log_output(&self, state: &super::state::PluginState) -> Option<String> {
        let (out, out_dropped) = state.stdout.take();
        let (err, err_dropped) = state.stderr.take();
        if out.is_empty() && err.is_empty() {
            return None;
        }
        if let Some(calls) = self.output.hit() {
            let (plugin, tenant) = (&self.plugin.name, &self.ctx.scope.tenant);
            for line in out.iter().take(20) {
                tracing::info!(plugin, tenant, stream = "stdout", calls, "{line}");
            }
            for line in err.iter().take(20) {
                tracing::warn!(plugin, tenant, stream = "stderr", calls, "{line}");
            }
            if out_dropped || err_dropped || out.len() > 20 || err.len() > 20 {
                tracing::warn!(plugin, tenant, "more plugin output was not logged");
            }
        }
        // A Rust panic ends with where it happened, its message, and a note about backtraces.
        let telling: Vec<&String> = err.iter().filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE")).collect();
        (!telling.is_empty()).then(|| telling[telling.len().saturating_sub(2)..].iter().map(|l| l.as_str()).collect::<Vec<_>>().join(" "))
    }

    /// Call `rpc.handle`. With the result come the notifications the plugin
    /// sent to its caller, to be written after the response.
    /// `depth`: how many plugin calls (router calls, observer hops) this one is nested in.
    pub async fn call_rpc(self: &Arc<Self>, active: &Active, caller: Caller, method: &str, params: &str, depth: u8) -> Result<(Box<RawValue>, Vec<Frame>), RpcError> {
        let invocation = Invocation::Rpc { caller, method: method.to_string(), params: params.to_string() };
        let (answer, deferred) = self
            .run(Some(active.clone()), depth, invocation, |tp, outcome| match outcome {
                Outcome::Rpc(Ok(text)) => tp.check_result(text).map(Ok),
                Outcome::Rpc(Err(e)) => tp.check_error(e).map(Err),
                _ => Err("answered a call with something else".into()),
            })
            .await?;
        answer.map(|r| (r, deferred))
    }

    fn check_result(&self, text: String) -> Result<Box<RawValue>, String> {
        super::contract::check_result(text, self.plugin.limits.max_result_bytes)
    }

    fn check_error(&self, e: WitError) -> Result<RpcError, String> {
        let range = self.descriptor.as_ref().map(|d| d.error_range).unwrap_or((0, -1));
        super::contract::check_error(e.code, e.message, e.data, range, self.plugin.limits.max_result_bytes)
    }

    /// Call `http-handler.handle`. Failures are the caller's to turn into a 5xx.
    pub async fn call_http(self: &Arc<Self>, req: HttpRequest) -> Result<HttpResponse, RpcError> {
        let (response, _) = self
            .run(None, 0, Invocation::Http(req), |tp, outcome| match outcome {
                Outcome::Http(r) if r.body.len() <= tp.plugin.limits.max_result_bytes => Ok(r),
                Outcome::Http(r) => Err(format!("returned an oversized body ({} bytes)", r.body.len())),
                _ => Err("answered a request with something else".into()),
            })
            .await?;
        Ok(response)
    }

    /// Queue a delivered message for the observer; never blocks the sender.
    pub fn observe(&self, active: &Active, msg: &Observed) {
        let Some(tx) = &self.observer else { return };
        if msg.hops >= MAX_OBSERVER_HOPS {
            if let Some(n) = self.dropped.hit() {
                tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, messages = n, "messages sent from {MAX_OBSERVER_HOPS} nested observer calls are not observed (a loop?)");
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
        let caller = super::caller_of(&active);
        let invocation = Invocation::Observe { caller, message };
        // Calls the observer makes carry the hop count on to what they send.
        // Already on the plugin threads: no second hop.
        if let Err(e) = self.run_here(Some(active), hops + 1, invocation, |_, _| Ok(())).await {
            tracing::debug!(plugin = self.plugin.name, error = e.message, "observer call failed");
        }
    }

    /// Deliver a due timer to `lifecycle.on-timer` (from a task on the plugin threads).
    pub async fn fire_timer(self: &Arc<Self>, id: u64, tag: String) {
        if let Err(e) = self.run_here(None, 0, Invocation::Timer { id, tag }, |_, _| Ok(())).await {
            tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, timer = id, error = e.message, "timer callback failed");
        }
    }
}

/// Start one instance of a plugin that exports `lifecycle`, so that its
/// `init` runs when it is bound to the tenant; the instance stays ready.
async fn start_one(tp: std::sync::Weak<TenantPlugin>) {
    let Some(tp) = tp.upgrade() else { return };
    match tp.pool.acquire(&tp.plugin, &tp.ctx).await {
        Ok(lease) => tp.pool.release(lease, None, &tp.plugin, &tp.ctx),
        Err(Refused::Failed(reason)) => tracing::warn!(plugin = tp.plugin.name, tenant = tp.ctx.scope.tenant, reason, "plugin instance could not start"),
        Err(Refused::Busy { why, .. }) => tracing::debug!(plugin = tp.plugin.name, tenant = tp.ctx.scope.tenant, why, "no instance started at bind"),
    }
}

async fn observe_loop(tp: std::sync::Weak<TenantPlugin>, mut rx: mpsc::Receiver<(Active, SentMessage, u8)>) {
    while let Some((active, msg, hops)) = rx.recv().await {
        let Some(tp) = tp.upgrade() else { return };
        tp.call_observer(active, msg, hops).await;
    }
}
