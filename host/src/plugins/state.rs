//! What a plugin instance's store holds: WASI (no ambient authority),
//! resource limits, the call deadline and the context host imports act in.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::output::Captured;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::grpc_calls::GrpcCalls;
use super::limiter::Limiter;
use super::outbound::Policy;
use super::timers::Timers;
use crate::core::outbox::Frame;
use crate::core::Active;
use crate::store::{Scope, Store};
use crate::core::Tenant;

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
    pub grace: std::time::Duration,
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
    /// When the current call must have finished.
    pub deadline: Instant,
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
        self.caller = caller;
        self.hops = hops;
        self.deferred.clear();
        self.deferred_bytes = 0;
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
