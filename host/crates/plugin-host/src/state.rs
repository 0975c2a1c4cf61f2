//! What a plugin instance's store holds: WASI (no ambient authority),
//! resource limits, the call deadline and the context host imports act in.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::output::Captured;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::grpc_calls::GrpcCalls;
use super::limiter::Limiter;
use super::outbound::Policy;
use super::timers::Timers;
use map_core::outbox::Frame;
use map_core::Active;
use map_core::Tenant;
use map_store::{Scope, Store};

/// The (tenant, plugin) an instance belongs to, for its whole life.
pub struct Context {
    pub tenant: Arc<Tenant>,
    pub plugin: String,
    pub scope: Scope,
    pub db: Store,
    /// The plugin's configuration for this tenant (a JSON object).
    pub config: Arc<Value>,
    /// The (tenant, plugin)'s timers; they outlive instances and versions.
    pub timers: Arc<Timers>,
    /// Open gRPC calls of this tenant plugin (of this version).
    pub grpc: Arc<GrpcCalls>,
    /// Bytes the host may hold for one call (results of imports, queued
    /// notifications): the plugin's memory cap, so `memory_mb` bounds both sides.
    pub host_bytes: usize,
    /// Largest message the gateway sends or accepts.
    pub max_message_bytes: usize,
    /// Whether the component exports `lifecycle` (timers need `on-timer`).
    pub receives_timers: bool,
    /// Where the plugin may send HTTP requests.
    pub outbound: Policy,
    /// How long before a call's deadline a waiting import gives up, so the
    /// plugin still has time to handle the failure (a tenth of `deadline_ms`).
    pub grace: Duration,
}

pub struct PluginState {
    wasi: WasiCtx,
    /// What the plugin writes to stdout and stderr, logged after each call.
    pub stdout: Captured,
    pub stderr: Captured,
    table: ResourceTable,
    http: WasiHttpCtx,
    outbound: Policy,
    pub limiter: Limiter,
    /// When the current call must have finished, before its store waits
    /// move it (`call_deadline`).
    pub deadline: Instant,
    /// The current call's waits for the store, shared with its outer bound.
    pub store_waits: Arc<StoreWaits>,
    pub ctx: Arc<Context>,
    /// The session of the current call (none for calls not made by a participant).
    pub caller: Option<Active>,
    /// Observer calls this call descends from: messages it sends carry it.
    pub hops: u8,
    /// Notifications for the caller, written after the call's response.
    pub deferred: Vec<Frame>,
    /// Bytes of `deferred`, held against `Context::host_bytes`.
    pub deferred_bytes: usize,
}

impl PluginState {
    pub fn new(ctx: Arc<Context>, memory_bytes: usize) -> PluginState {
        // No preopened directories, environment or network; stdout and
        // stderr are captured for the log.
        let (stdout, stderr) = (Captured::default(), Captured::default());
        let wasi = WasiCtx::builder().stdout(stdout.clone()).stderr(stderr.clone()).build();
        PluginState {
            wasi,
            stdout,
            stderr,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            outbound: ctx.outbound.clone(),
            limiter: Limiter { memory_bytes },
            deadline: Instant::now(),
            store_waits: Arc::default(),
            ctx,
            caller: None,
            hops: 0,
            deferred: Vec::new(),
            deferred_bytes: 0,
        }
    }

    /// Prepare for the next call.
    pub fn reset(&mut self, deadline: Instant, caller: Option<Active>, hops: u8) {
        self.deadline = deadline;
        self.store_waits.reset();
        self.caller = caller;
        self.hops = hops;
        self.deferred.clear();
        self.deferred_bytes = 0;
    }
}

/// Most of one call's store waits excused from its deadline: a store
/// stalled for longer fails the calls that wait for it.
pub const MAX_EXCUSED: Duration = Duration::from_secs(10);

/// What one call has waited for the store. The deadline bounds the
/// plugin's own time; a disk or database that stalls for a moment is the
/// host's, so those waits (up to `MAX_EXCUSED`) move the deadline later.
#[derive(Default)]
pub struct StoreWaits {
    /// Nanoseconds of finished waits excused.
    done: AtomicU64,
    /// A wait is going on.
    waiting: AtomicBool,
    /// A store call of this call found the database unreachable: when to
    /// retry, in ms (0: none did), told to the caller with its error.
    down_retry_ms: AtomicU64,
}

impl StoreWaits {
    fn reset(&self) {
        self.done.store(0, Ordering::Relaxed);
        self.waiting.store(false, Ordering::Relaxed);
        self.down_retry_ms.store(0, Ordering::Relaxed);
    }

    /// A store call found the database unreachable; retry after `after`.
    pub fn found_down(&self, after: Duration) {
        self.down_retry_ms.store((after.as_millis() as u64).max(1), Ordering::Relaxed);
    }

    /// When to retry, if a store call of this call found the database unreachable.
    pub fn retry_after(&self) -> Option<u64> {
        Some(self.down_retry_ms.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    /// How far the call's outer bound moves: what was excused, or while a
    /// wait goes on, as much as could be.
    pub fn extension(&self) -> Duration {
        match self.waiting.load(Ordering::Relaxed) {
            true => MAX_EXCUSED,
            false => Duration::from_nanos(self.done.load(Ordering::Relaxed)),
        }
    }

    /// Await a store call as one wait.
    pub async fn wait<F: std::future::Future>(&self, fut: F) -> F::Output {
        self.waiting.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let out = fut.await;
        let before = Duration::from_nanos(self.done.load(Ordering::Relaxed));
        let granted = started.elapsed().min(MAX_EXCUSED.saturating_sub(before));
        self.done.store((before + granted).as_nanos() as u64, Ordering::Relaxed);
        self.waiting.store(false, Ordering::Relaxed);
        out
    }
}

impl PluginState {
    /// When the current call must have finished: its deadline, moved later
    /// by the store waits it has finished (wasm runs only between them).
    pub fn call_deadline(&self) -> Instant {
        self.deadline + self.store_waits.extension()
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.outbound }
    }
}
