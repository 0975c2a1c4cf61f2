//! One plugin instance: its wasmtime store (limits, deadline) and the
//! exports bound from it. Failures carry types the host classifies.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::InstancePre;
use wasmtime::{Engine, Store, UpdateDeadline};

use super::budget::Ticket;
use super::exports::{Bound, Exports, NotExported};
use super::limiter::MemoryCapReached;
use super::outcome::{CallOutcome, Failure};
use super::state::{Context, PluginState};
use map_core::Active;

/// The call ran past its deadline.
#[derive(Debug)]
pub struct DeadlineExceeded;

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl std::error::Error for DeadlineExceeded {}

/// What a failed call did, for the client's error, the log and the stats.
pub fn classify(e: &wasmtime::Error, deadline_ms: u128, memory_bytes: usize) -> Failure {
    if e.downcast_ref::<DeadlineExceeded>().is_some() {
        return Failure::new(CallOutcome::TimedOut, format!("timed out after {deadline_ms} ms"));
    }
    if e.downcast_ref::<MemoryCapReached>().is_some() {
        return Failure::new(CallOutcome::OutOfMemory, format!("exceeded its memory limit of {} MiB", memory_bytes >> 20));
    }
    if let Some(n) = e.downcast_ref::<NotExported>() {
        return Failure::new(CallOutcome::Trapped, n.to_string());
    }
    let reason = match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => format!("trapped: {trap}"),
        None => format!("trapped: {}", format!("{e:#}").lines().next().unwrap_or("unknown error")),
    };
    Failure::new(CallOutcome::Trapped, reason)
}

pub struct Instance {
    pub store: Store<PluginState>,
    /// Boxed: an instance moves between pool, lease and call several times per call.
    pub bound: Box<Bound>,
    /// Its place in the engine's budget, returned when the instance is dropped.
    _ticket: Ticket,
}

impl Instance {
    /// A new instance in `ctx`; `init` has not run yet.
    pub async fn start(
        engine: &Engine,
        pre: &InstancePre<PluginState>,
        exports: &Exports,
        ctx: Arc<Context>,
        ticket: Ticket,
        memory_bytes: usize,
        deadline: Instant,
    ) -> wasmtime::Result<Instance> {
        let mut store = Store::new(engine, PluginState::new(ctx, memory_bytes));
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_callback(|ctx| {
            if Instant::now() >= ctx.data().call_deadline() {
                Err(DeadlineExceeded.into())
            } else {
                // Yield at every tick: plugin calls share their threads fairly.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.data_mut().reset(deadline, None, 0);
        store.set_epoch_deadline(1);
        let instance = pre.instantiate_async(&mut store).await?;
        let bound = Box::new(exports.load(&mut store, &instance)?);
        Ok(Instance { store, bound, _ticket: ticket })
    }

    /// Prepare for the next call: its deadline, caller and hop count.
    pub fn arm(&mut self, deadline: Instant, caller: Option<Active>, hops: u8) {
        self.store.data_mut().reset(deadline, caller, hops);
        self.store.set_epoch_deadline(1);
    }
}
