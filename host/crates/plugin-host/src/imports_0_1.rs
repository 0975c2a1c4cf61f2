//! The imports of `map-gateway:plugin@0.1.0`, for components built against
//! it: each delegates to its counterpart in the current package (the same
//! functions, with the same meaning).

use super::bindings::contract_0_1::map_gateway::plugin::{config, events, log, router, store, types};
use super::bindings::map_gateway::plugin as now;
use super::state::PluginState;

type Wt<T> = wasmtime::Result<T>;

fn store_err(e: now::store::StoreError) -> store::StoreError {
    match e {
        now::store::StoreError::Invalid(m) => store::StoreError::Invalid(m),
        now::store::StoreError::Unavailable(m) => store::StoreError::Unavailable(m),
    }
}

fn rpc_err(e: now::types::RpcError) -> types::RpcError {
    types::RpcError { code: e.code, message: e.message, data: e.data }
}

impl types::Host for PluginState {}

impl store::Host for PluginState {
    async fn get(&mut self, collection: String, key: String) -> Wt<Result<Option<String>, store::StoreError>> {
        Ok(now::store::Host::get(self, collection, key).await?.map_err(store_err))
    }

    async fn put(&mut self, collection: String, key: String, value: String) -> Wt<Result<(), store::StoreError>> {
        Ok(now::store::Host::put(self, collection, key, value).await?.map_err(store_err))
    }

    async fn delete(&mut self, collection: String, key: String) -> Wt<Result<bool, store::StoreError>> {
        Ok(now::store::Host::delete(self, collection, key).await?.map_err(store_err))
    }

    async fn scan(&mut self, collection: String, o: store::ScanOptions) -> Wt<Result<Vec<store::Entry>, store::StoreError>> {
        let o = now::store::ScanOptions { prefix: o.prefix, after: o.after, before: o.before, limit: o.limit, reverse: o.reverse };
        let rows = now::store::Host::scan(self, collection, o).await?;
        Ok(rows.map(|rows| rows.into_iter().map(|e| store::Entry { key: e.key, value: e.value }).collect()).map_err(store_err))
    }

    async fn count(&mut self, collection: String, prefix: String) -> Wt<Result<u64, store::StoreError>> {
        Ok(now::store::Host::count(self, collection, prefix).await?.map_err(store_err))
    }

    async fn batch(&mut self, writes: Vec<store::Write>) -> Wt<Result<(), store::StoreError>> {
        let writes = writes.into_iter().map(|w| now::store::Write { collection: w.collection, key: w.key, value: w.value }).collect();
        Ok(now::store::Host::batch(self, writes).await?.map_err(store_err))
    }
}

impl events::Host for PluginState {
    async fn emit(&mut self, event_type: String, data: String) -> Wt<Result<(), String>> {
        now::events::Host::emit(self, event_type, data).await
    }

    async fn emit_to(&mut self, event_type: String, data: String, audience: Vec<String>) -> Wt<Result<(), String>> {
        now::events::Host::emit_to(self, event_type, data, audience).await
    }
}

impl router::Host for PluginState {
    async fn send(&mut self, to: String, payload: String, meta: Option<String>) -> Wt<Result<String, types::RpcError>> {
        Ok(now::router::Host::send(self, to, payload, meta).await?.map_err(rpc_err))
    }

    async fn notify(&mut self, participant_id: String, method: String, params: String) -> Wt<Result<(), types::RpcError>> {
        Ok(now::router::Host::notify(self, participant_id, method, params).await?.map_err(rpc_err))
    }
}

impl log::Host for PluginState {
    async fn log(&mut self, level: log::Level, message: String) -> Wt<()> {
        let level = match level {
            log::Level::Trace => now::log::Level::Trace,
            log::Level::Debug => now::log::Level::Debug,
            log::Level::Info => now::log::Level::Info,
            log::Level::Warn => now::log::Level::Warn,
            log::Level::Error => now::log::Level::Error,
        };
        now::log::Host::log(self, level, message).await
    }
}

impl config::Host for PluginState {
    async fn all(&mut self) -> Wt<String> {
        now::config::Host::all(self).await
    }

    async fn get(&mut self, key: String) -> Wt<Option<String>> {
        now::config::Host::get(self, key).await
    }
}
