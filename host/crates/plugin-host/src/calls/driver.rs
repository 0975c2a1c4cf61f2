//! One call of any kind into a tenant plugin: an instance from the pool,
//! the call under its deadline, how it ended (counted, traced), and the
//! instance kept or discarded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::TenantPlugin;
use crate::exports::{Invocation, Returned};
use crate::grpc_calls::{code, status};
use crate::instance::{classify, Instance};
use crate::outcome::{CallOutcome, Failure};
use crate::output::log_call_output;
use crate::plugin::Refused;
use crate::pool::Lease;
use crate::{contract, deadline};
use map_config::InstanceMode;
use map_core::outbox::Frame;
use map_core::Active;
use map_protocol::rpc::{codes, RpcError};

impl TenantPlugin {
    /// Run one invocation (its first slice here, the rest on the plugin
    /// threads). `accept` turns what the component returned into the
    /// answer, or names how it broke the contract (the instance is then
    /// discarded, and the call fails).
    pub(super) async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        caller: Option<Active>,
        hops: u8,
        invocation: Invocation,
        accept: impl FnOnce(&TenantPlugin, Returned) -> Result<T, String> + Send + 'static,
    ) -> Result<(T, Vec<Frame>), RpcError> {
        let this = self.clone();
        // A child of the request's span (current here), carried to the plugin threads with the call.
        let span = map_observe::telemetry::plugin_call(&self.plugin.name, &self.ctx.scope.tenant, invocation.kind());
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

    pub(super) async fn run_here<T>(
        &self,
        caller: Option<Active>,
        hops: u8,
        invocation: Invocation,
        accept: impl FnOnce(&TenantPlugin, Returned) -> Result<T, String>,
    ) -> Result<(T, Vec<Frame>), RpcError> {
        // The clock is read here and when the call is over (and in between
        // only if the call had to wait for an instance).
        let started = Instant::now();
        let (mut lease, ready_at) = self.lease(started).await?;
        let grpc_call = invocation.grpc_call();
        let answer = self.invoke(&mut lease, ready_at, caller, hops, invocation, accept).await;
        self.conclude(lease, answer, started, grpc_call)
    }

    /// The end of a call that began at `started`: the plugin's output
    /// logged, the outcome counted and traced, the instance kept (with the
    /// notifications it queued) or dropped (with the call's error).
    pub(super) fn conclude<T>(
        &self,
        mut lease: Lease,
        answer: Result<T, Failure>,
        started: Instant,
        grpc_call: Option<u64>,
    ) -> Result<(T, Vec<Frame>), RpcError> {
        let state = lease.instance().store.data();
        let last_error = log_call_output(&state.stdout, &state.stderr, &self.output, &self.plugin.name, &self.ctx.scope.tenant);
        let answer = answer.map_err(|failure| match last_error {
            Some(line) => Failure { reason: format!("{}; its stderr said: {line}", failure.reason), ..failure },
            None => failure,
        });
        let outcome = answer.as_ref().map_or_else(|f| f.outcome, |_| CallOutcome::Ok);
        let ended = Instant::now();
        self.stats.record(&self.plugin.name, outcome, ended - started, answer.as_ref().err().map(|f| f.reason.as_str()));
        map_observe::telemetry::plugin_outcome(&tracing::Span::current(), outcome.label());
        match answer {
            Ok(value) => Ok((value, self.keep(lease, ended))),
            Err(failure) => Err(self.discard(lease, failure.reason, grpc_call, ended)),
        }
    }

    /// An instance for one call; a refusal is the call's error.
    pub(super) async fn lease(&self, started: Instant) -> Result<(Lease, Instant), RpcError> {
        // A cluster singleton runs only on its owner (its calls are forwarded
        // there); what reaches it here anyway (an observed send) is refused.
        if self.elsewhere().is_some() {
            let why = "another node of the cluster runs it".to_string();
            self.stats.record(&self.plugin.name, CallOutcome::Busy, started.elapsed(), Some(&why));
            return Err(RpcError::new(codes::RESOURCE_EXHAUSTED, format!("Plugin {} cannot take the call here: {why}", self.plugin.name)));
        }
        match self.pool.acquire(&self.plugin, &self.ctx, started).await {
            Ok(leased) => Ok(leased),
            Err(Refused::Busy { retry_after, why }) => {
                self.stats.record(&self.plugin.name, CallOutcome::Busy, started.elapsed(), Some(&why));
                Err(RpcError::new(codes::RESOURCE_EXHAUSTED, format!("Plugin {} cannot take the call now: {why}; try again later", self.plugin.name))
                    .with_data(json!({"retryAfterMs": retry_after.as_millis() as u64, "plugin": self.plugin.name})))
            }
            Err(Refused::Failed(reason)) => {
                self.stats.record(&self.plugin.name, CallOutcome::StartFailed, started.elapsed(), Some(&reason));
                tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, reason, "plugin instance could not start");
                Err(self.failure(reason))
            }
        }
    }

    /// Arm the leased instance (ready at `ready_at`, when its deadline
    /// starts) and make the call; `accept` judges what it returned.
    async fn invoke<T>(
        &self,
        lease: &mut Lease,
        ready_at: Instant,
        caller: Option<Active>,
        hops: u8,
        invocation: Invocation,
        accept: impl FnOnce(&TenantPlugin, Returned) -> Result<T, String>,
    ) -> Result<T, Failure> {
        let limits = &self.plugin.limits;
        let instance = lease.instance();
        instance.arm(ready_at + limits.deadline, caller, hops);
        let Instance { store, bound, .. } = instance;
        let waits = store.data().store_waits.clone();
        // The epoch check interrupts wasm code; the outer bound also covers
        // host calls. Both move later by the time spent waiting for the store.
        // Boxed once here: the call's future is large, and unboxed it would be
        // copied again into each future that awaits it, up to the caller's.
        let call = Box::pin(bound.invoke(store, invocation));
        match deadline::by_extended(ready_at + limits.deadline + Duration::from_millis(500), || waits.extension(), call).await {
            None => Err(Failure::new(CallOutcome::TimedOut, format!("timed out after {} ms", limits.deadline.as_millis()))),
            Some(Err(e)) => Err(classify(&e, limits.deadline.as_millis(), limits.memory_bytes)),
            Some(Ok(mut returned)) => {
                // A plugin's error after the store was found unreachable says when to retry.
                if let (Some(ms), Returned::Rpc(Err(e))) = (waits.retry_after(), &mut returned) {
                    e.data = contract::with_retry_after(e.data.take(), ms);
                }
                accept(self, returned).map_err(|reason| Failure::new(CallOutcome::Error, reason))
            }
        }
    }

    /// Return the instance of a call that went well; the notifications it
    /// queued for its caller.
    fn keep(&self, mut lease: Lease, ended: Instant) -> Vec<Frame> {
        let data = lease.instance().store.data_mut();
        let deferred = std::mem::take(&mut data.deferred);
        data.caller = None;
        self.pool.release(lease, None, &self.plugin, &self.ctx, ended);
        deferred
    }

    /// Drop the instance of a failed call; the call's error.
    fn discard(&self, lease: Lease, reason: String, grpc_call: Option<u64>, ended: Instant) -> RpcError {
        tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, reason, "plugin call failed; instance discarded");
        self.pool.release(lease, Some(&reason), &self.plugin, &self.ctx, ended);
        if self.plugin.limits.mode == InstanceMode::Singleton {
            // The streams lived in the failed instance's memory; the
            // failing call itself ends with INTERNAL from its caller.
            let why = format!("plugin {} failed and a fresh instance replaces it; reconnect", self.plugin.name);
            self.ctx.grpc.end_all_but(grpc_call, status(code::UNAVAILABLE, why));
        }
        self.failure(reason)
    }
}
