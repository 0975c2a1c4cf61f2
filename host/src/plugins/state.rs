//! What a plugin instance's store holds: WASI (no ambient authority),
//! resource limits, the call deadline and the context host imports act in.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime::StoreLimits;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::core::outbox::Frame;
use crate::core::Active;
use crate::store::{Scope, Store};
use crate::tenants::Tenant;

/// The (tenant, plugin) an instance belongs to, for its whole life.
pub struct Context {
    pub tenant: Arc<Tenant>,
    pub plugin: String,
    pub scope: Scope,
    pub db: Store,
    /// The plugin's configuration for this tenant (a JSON object).
    pub config: Arc<Value>,
}

pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limits: StoreLimits,
    /// When the current call must have finished.
    pub deadline: Instant,
    pub ctx: Arc<Context>,
    /// The session of the current call (none for calls not made by a participant).
    pub caller: Option<Active>,
    /// Notifications for the caller, written after the call's response.
    pub deferred: Vec<Frame>,
}

impl PluginState {
    pub fn new(ctx: Arc<Context>, memory_bytes: usize) -> PluginState {
        // No preopened directories, environment, network or inherited stdio.
        let wasi = WasiCtx::builder().build();
        let limits = wasmtime::StoreLimitsBuilder::new().memory_size(memory_bytes).instances(64).trap_on_grow_failure(true).build();
        PluginState { wasi, table: ResourceTable::new(), limits, deadline: Instant::now(), ctx, caller: None, deferred: Vec::new() }
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}
