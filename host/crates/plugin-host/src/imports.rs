//! The host side of the imports every plugin gets: store, events, router,
//! log, config, timers, grpc-stream, metrics. Each acts only inside
//! the instance's (tenant, plugin).

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::bindings::map_gateway::plugin::{config, events, grpc_stream, grpc_types, log, metrics, router, store, timers, types};
use super::state::PluginState;
use map_core::events::{NewEvent, Source};
use map_core::outbox::Frame;
use map_core::send::{Outgoing, Sent};
use map_core::Active;
use map_protocol::rpc::RpcError;
use map_store::{Item, Op, Outcome, ScanOptions, StoreError, Write};

type Wt<T> = wasmtime::Result<T>;

impl types::Host for PluginState {}

impl PluginState {
    /// A store failure as the plugin sees it. One that found the database
    /// unreachable is noted: the call's error then says when to retry.
    fn store_err(&self, e: StoreError) -> store::StoreError {
        if let StoreError::Down { retry_after, .. } = &e {
            self.store_waits.found_down(*retry_after);
        }
        match e {
            StoreError::Invalid(m) => store::StoreError::Invalid(m),
            StoreError::Unavailable(m) | StoreError::Contended(m) => store::StoreError::Unavailable(m),
            StoreError::Down { why, retry_after } => store::StoreError::Unavailable(format!("{why}; retry in {} ms", retry_after.as_millis())),
        }
    }
}

/// A collection the plugin may use: names starting with `$` are the host's
/// (timers are kept in `$timers`).
fn own(collection: &str) -> Result<(), store::StoreError> {
    match collection.starts_with('$') {
        true => Err(store::StoreError::Invalid(format!("collection {collection:?}: names starting with $ are the host's"))),
        false => Ok(()),
    }
}

fn item(i: Item) -> store::Item {
    store::Item { value: i.value, version: i.version }
}

fn op(o: store::Op) -> Op {
    match o {
        store::Op::Put(p) => Op::Put { collection: p.collection, key: p.key, value: p.value },
        store::Op::Delete(k) => Op::Delete { collection: k.collection, key: k.key },
        store::Op::Add(a) => Op::Add { collection: a.collection, key: a.key, delta: a.delta },
        store::Op::ExpectVersion(c) => Op::ExpectVersion { collection: c.collection, key: c.key, version: c.version },
        store::Op::ExpectValue(c) => Op::ExpectValue { collection: c.collection, key: c.key, value: c.value },
    }
}

impl PluginState {
    /// What the host may still buffer for the plugin: it counts against its memory cap.
    fn read_budget(&self) -> usize {
        self.ctx.host_bytes.saturating_sub(self.deferred_bytes)
    }
}

impl store::Host for PluginState {
    async fn get(&mut self, collection: String, key: String) -> Wt<Result<Option<String>, store::StoreError>> {
        if let Err(e) = own(&collection) {
            return Ok(Err(e));
        }
        Ok(self.store_waits.wait(self.ctx.db.get(&self.ctx.scope, &collection, &key)).await.map_err(|e| self.store_err(e)))
    }

    async fn put(&mut self, collection: String, key: String, value: String) -> Wt<Result<(), store::StoreError>> {
        if let Err(e) = own(&collection) {
            return Ok(Err(e));
        }
        Ok(self.store_waits.wait(self.ctx.db.put(&self.ctx.scope, &collection, &key, &value)).await.map_err(|e| self.store_err(e)))
    }

    async fn delete(&mut self, collection: String, key: String) -> Wt<Result<bool, store::StoreError>> {
        if let Err(e) = own(&collection) {
            return Ok(Err(e));
        }
        Ok(self.store_waits.wait(self.ctx.db.delete(&self.ctx.scope, &collection, &key)).await.map_err(|e| self.store_err(e)))
    }

    async fn scan(&mut self, collection: String, o: store::ScanOptions) -> Wt<Result<Vec<store::Entry>, store::StoreError>> {
        if let Err(e) = own(&collection) {
            return Ok(Err(e));
        }
        let opts = ScanOptions { prefix: o.prefix, after: o.after, before: o.before, limit: o.limit, reverse: o.reverse };
        let rows = self.store_waits.wait(self.ctx.db.scan(&self.ctx.scope, &collection, &opts, self.read_budget())).await.map_err(|e| self.store_err(e));
        Ok(rows.map(|rows| rows.into_iter().map(|(key, value)| store::Entry { key, value }).collect()))
    }

    async fn count(&mut self, collection: String, prefix: String) -> Wt<Result<u64, store::StoreError>> {
        if let Err(e) = own(&collection) {
            return Ok(Err(e));
        }
        Ok(self.store_waits.wait(self.ctx.db.count(&self.ctx.scope, &collection, &prefix)).await.map_err(|e| self.store_err(e)))
    }

    async fn batch(&mut self, writes: Vec<store::Write>) -> Wt<Result<(), store::StoreError>> {
        if let Some(e) = writes.iter().find_map(|w| own(&w.collection).err()) {
            return Ok(Err(e));
        }
        let writes = writes.into_iter().map(|w| Write { collection: w.collection, key: w.key, value: w.value }).collect();
        Ok(self.store_waits.wait(self.ctx.db.batch(&self.ctx.scope, writes)).await.map_err(|e| self.store_err(e)))
    }

    async fn get_many(&mut self, keys: Vec<store::KeyRef>) -> Wt<Result<Vec<Option<store::Item>>, store::StoreError>> {
        if let Some(e) = keys.iter().find_map(|k| own(&k.collection).err()) {
            return Ok(Err(e));
        }
        let keys: Vec<(String, String)> = keys.into_iter().map(|k| (k.collection, k.key)).collect();
        let found = self.store_waits.wait(self.ctx.db.get_many(&self.ctx.scope, &keys, self.read_budget())).await;
        Ok(found.map(|items| items.into_iter().map(|i| i.map(item)).collect()).map_err(|e| self.store_err(e)))
    }

    async fn scan_page(&mut self, collection: String, o: store::PageOptions) -> Wt<Result<store::Page, store::StoreError>> {
        if let Err(e) = own(&collection) {
            return Ok(Err(e));
        }
        let opts = ScanOptions { prefix: o.prefix, after: o.after, before: o.before, limit: o.limit, reverse: o.reverse };
        let hard = self.read_budget();
        let soft = if o.max_bytes == 0 { hard } else { (o.max_bytes as usize).min(hard) };
        let page = self.store_waits.wait(self.ctx.db.scan_page(&self.ctx.scope, &collection, &opts, soft, hard)).await.map_err(|e| self.store_err(e));
        Ok(page.map(|p| store::Page { entries: p.entries.into_iter().map(|(key, i)| store::KeyedItem { key, item: item(i) }).collect(), next: p.next }))
    }

    async fn commit(&mut self, ops: Vec<store::Op>) -> Wt<Result<store::Outcome, store::StoreError>> {
        let ops: Vec<Op> = ops.into_iter().map(op).collect();
        if let Some(e) = ops.iter().find_map(|o| own(o.collection()).err()) {
            return Ok(Err(e));
        }
        let outcome = self.store_waits.wait(self.ctx.db.commit(&self.ctx.scope, ops)).await.map_err(|e| self.store_err(e));
        Ok(outcome.map(|o| match o {
            Outcome::Committed { version, counters, .. } => store::Outcome::Committed(store::Committed { version, counters }),
            Outcome::Conflict(i) => store::Outcome::Conflict(i),
        }))
    }
}

impl PluginState {
    /// Who the plugin acts as: the caller's session, else `plugin:<name>`.
    fn acting(&self) -> Active {
        self.caller.clone().unwrap_or_else(|| self.ctx.tenant.system_actor(&format!("plugin:{}", self.ctx.plugin)))
    }

    fn caller_agent(&self) -> Option<String> {
        self.ctx.tenant.first_agent(&self.caller.as_ref()?.session_id)
    }
}

fn to_wit(e: RpcError) -> types::RpcError {
    types::RpcError { code: e.code, message: e.message, data: e.data.map(|d| d.to_string()) }
}

impl PluginState {
    fn event(&self, event_type: String, data: String) -> Result<NewEvent, String> {
        if event_type.is_empty() {
            return Err("event-type must not be empty".into());
        }
        // Checked, not parsed: the text is what subscribers receive, and
        // filters that read the data parse it when they need to.
        let is_object = data.trim_start().starts_with('{') && serde_json::from_str::<&RawValue>(&data).is_ok();
        if !is_object {
            return Err("data must be a JSON object".into());
        }
        let source = Source { agent_id: self.caller_agent(), participant_id: Some(self.acting().participant_id), scope_id: None };
        Ok(NewEvent::with_text(event_type, source, data))
    }

    /// A frame for the caller's own session waits for the response to its
    /// request: `Some(taken)` when `session` is the caller's, `None` otherwise.
    fn defer_to_caller(&mut self, session: &str, frame: &Frame) -> Option<bool> {
        let caller = self.caller.as_ref().filter(|c| c.session_id == session)?;
        let bytes = frame.len();
        if self.deferred.len() >= caller.outbox.capacity() || self.deferred_bytes + bytes > self.ctx.host_bytes {
            return Some(false);
        }
        self.deferred_bytes += bytes;
        self.deferred.push(frame.clone());
        Some(true)
    }
}

impl events::Host for PluginState {
    async fn emit(&mut self, event_type: String, data: String) -> Wt<Result<(), String>> {
        Ok(self.event(event_type, data).map(|e| self.ctx.tenant.emit(e)))
    }

    async fn emit_to(&mut self, event_type: String, data: String, audience: Vec<String>) -> Wt<Result<(), String>> {
        let mut event = match self.event(event_type, data) {
            Ok(e) => e,
            Err(e) => return Ok(Err(e)),
        };
        event.audience = Some(self.ctx.tenant.sessions_of(&audience));
        self.ctx.tenant.emit(event);
        Ok(Ok(()))
    }

    async fn emit_for(&mut self, event_type: String, data: String, audience: events::Audience) -> Wt<Result<(), String>> {
        if let Some(path) = audience.capability.as_deref().filter(|p| p.split('.').any(str::is_empty)) {
            return Ok(Err(format!("capability {path:?} is not a dotted path")));
        }
        let mut event = match self.event(event_type, data) {
            Ok(e) => e,
            Err(e) => return Ok(Err(e)),
        };
        event.audience = Some(self.ctx.tenant.sessions_for(&audience.ids, audience.capability.as_deref()));
        self.ctx.tenant.emit(event);
        Ok(Ok(()))
    }
}

impl router::Host for PluginState {
    async fn send(&mut self, to: String, payload: String, meta: Option<String>) -> Wt<Result<String, types::RpcError>> {
        let parsed = (|| -> Result<_, RpcError> {
            let to: &RawValue = serde_json::from_str(&to).map_err(|e| RpcError::invalid_params(format!("`to` is not JSON: {e}")))?;
            let payload: &RawValue = serde_json::from_str(&payload).map_err(|e| RpcError::invalid_params(format!("`payload` is not JSON: {e}")))?;
            let meta: Option<Map<String, Value>> = match &meta {
                Some(m) => Some(serde_json::from_str(m).map_err(|e| RpcError::invalid_params(format!("`meta` is not a JSON object: {e}")))?),
                None => None,
            };
            Ok(Outgoing { to, payload: Some(payload), meta, from: None, hops: self.hops, remote: None })
        })();
        let result = match parsed.and_then(|msg| self.ctx.tenant.send(&self.acting(), msg)) {
            Ok(Sent::Now(result)) => Ok(result),
            Ok(Sent::Later(result)) => result.await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(to_wit))
    }

    async fn notify(&mut self, participant_id: String, method: String, params: String) -> Wt<Result<(), types::RpcError>> {
        let params: Box<RawValue> = match RawValue::from_string(params) {
            Ok(p) if p.get().starts_with('{') => p,
            _ => return Ok(Err(to_wit(RpcError::invalid_params("params must be a JSON object")))),
        };
        let Some(session) = self.ctx.tenant.session_of_participant(&participant_id) else {
            return Ok(Err(to_wit(RpcError::new(map_protocol::rpc::codes::ADDRESS_NOT_FOUND, format!("Participant {participant_id} has no session")))));
        };
        let frame: Frame = map_protocol::rpc::encode_notification(&method, &params).into();
        let full =
            || to_wit(RpcError::new(map_protocol::rpc::codes::DELIVERY_FAILED, format!("Participant {participant_id} cannot take more notifications now")));
        match self.defer_to_caller(&session, &frame) {
            Some(true) => Ok(Ok(())),
            Some(false) => Ok(Err(full())),
            None => Ok(if self.ctx.tenant.notify(&session, frame) { Ok(()) } else { Err(full()) }),
        }
    }

    async fn notify_for(&mut self, method: String, params: String, to: router::Recipients) -> Wt<Result<u32, types::RpcError>> {
        let params: Box<RawValue> = match RawValue::from_string(params) {
            Ok(p) if p.get().starts_with('{') => p,
            _ => return Ok(Err(to_wit(RpcError::invalid_params("params must be a JSON object")))),
        };
        if method.is_empty() {
            return Ok(Err(to_wit(RpcError::invalid_params("method must not be empty"))));
        }
        if let Some(path) = to.capability.as_deref().filter(|p| p.split('.').any(str::is_empty)) {
            return Ok(Err(to_wit(RpcError::invalid_params(format!("capability {path:?} is not a dotted path")))));
        }
        let skip = self.caller.as_ref().filter(|_| to.skip_caller).map(|c| c.session_id.as_str());
        let sessions = self.ctx.tenant.sessions_declaring(&to.ids, to.capability.as_deref(), skip);
        if sessions.is_empty() {
            return Ok(Ok(0));
        }
        let frame: Frame = map_protocol::rpc::encode_notification(&method, &params).into();
        let mut taken = 0;
        for session in &sessions {
            let ok = match self.defer_to_caller(session, &frame) {
                Some(deferred) => deferred,
                None => self.ctx.tenant.notify(session, frame.clone()),
            };
            taken += u32::from(ok);
        }
        Ok(Ok(taken))
    }

    async fn connected_since(&mut self, ids: Vec<String>) -> Wt<Vec<Option<u64>>> {
        Ok(self.ctx.tenant.connected_since(&ids))
    }

    async fn agent(&mut self, id: String) -> Wt<Option<String>> {
        Ok(self.ctx.tenant.agent_as_seen_by(&self.acting(), &id))
    }

    async fn call(&mut self, method: String, params: String) -> Wt<Result<String, types::RpcError>> {
        use map_protocol::rpc::codes;
        if method.starts_with("map/") {
            let why = format!("{method} is a core method, which plugins cannot call; send messages with router.send");
            return Ok(Err(to_wit(RpcError::new(codes::METHOD_NOT_FOUND, why))));
        }
        if self.hops >= super::calls::MAX_OBSERVER_HOPS {
            let why = format!("{method} not called: calls between plugins nest at most {} deep", super::calls::MAX_OBSERVER_HOPS);
            return Ok(Err(to_wit(RpcError::new(codes::INTERNAL_ERROR, why))));
        }
        if !params.trim_start().starts_with('{') || serde_json::from_str::<&RawValue>(&params).is_err() {
            return Ok(Err(to_wit(RpcError::invalid_params("params must be a JSON object"))));
        }
        let (active, extensions) = (self.acting(), self.ctx.tenant.extensions());
        match extensions.call_from(&self.ctx.plugin, &active, &method, params, self.hops + 1).await {
            Ok((result, deferred)) => {
                // The callee's notifications to the caller follow this call's response.
                if let Some(session) = self.caller.as_ref().map(|c| c.session_id.clone()) {
                    for frame in deferred {
                        if self.defer_to_caller(&session, &frame) != Some(true) {
                            tracing::warn!(
                                plugin = self.ctx.plugin,
                                tenant = self.ctx.scope.tenant,
                                method,
                                "the caller's queue is full: notifications from a router call dropped"
                            );
                            break;
                        }
                    }
                }
                Ok(Ok(result.get().to_string()))
            }
            Err(e) => Ok(Err(to_wit(e))),
        }
    }
}

impl log::Host for PluginState {
    async fn log(&mut self, level: log::Level, message: String) -> Wt<()> {
        let (tenant, plugin) = (&self.ctx.scope.tenant, &self.ctx.plugin);
        match level {
            log::Level::Trace => tracing::trace!(tenant, plugin, "{message}"),
            log::Level::Debug => tracing::debug!(tenant, plugin, "{message}"),
            log::Level::Info => tracing::info!(tenant, plugin, "{message}"),
            log::Level::Warn => tracing::warn!(tenant, plugin, "{message}"),
            log::Level::Error => tracing::error!(tenant, plugin, "{message}"),
        }
        Ok(())
    }
}

impl metrics::Host for PluginState {
    async fn counter_add(&mut self, name: String, labels: Vec<(String, String)>, delta: u64) -> Wt<Result<(), String>> {
        Ok(map_observe::metrics::plugin_sample(&self.ctx.scope.tenant, &self.ctx.plugin, &name, &labels, map_observe::metrics::PluginSample::Counter(delta)))
    }

    async fn gauge_set(&mut self, name: String, labels: Vec<(String, String)>, value: f64) -> Wt<Result<(), String>> {
        Ok(map_observe::metrics::plugin_sample(&self.ctx.scope.tenant, &self.ctx.plugin, &name, &labels, map_observe::metrics::PluginSample::Gauge(value)))
    }
}

impl config::Host for PluginState {
    async fn all(&mut self) -> Wt<String> {
        Ok(self.ctx.config.to_string())
    }

    async fn get(&mut self, key: String) -> Wt<Option<String>> {
        Ok(self.ctx.config.get(&key).map(Value::to_string))
    }
}

impl timers::Host for PluginState {
    async fn schedule(&mut self, delay_ms: u64, tag: String) -> Wt<Result<u64, String>> {
        if !self.ctx.receives_timers {
            return Ok(Err("the plugin does not export map-gateway:plugin/lifecycle, so it cannot receive timers".into()));
        }
        Ok(self.ctx.timers.schedule(delay_ms, tag).await)
    }

    async fn cancel(&mut self, timer: u64) -> Wt<bool> {
        Ok(self.ctx.timers.cancel(timer).await)
    }
}

impl grpc_types::Host for PluginState {}

impl grpc_stream::Host for PluginState {
    async fn write(&mut self, call: u64, body: Vec<u8>) -> Wt<Result<(), String>> {
        if body.len() > self.ctx.max_message_bytes {
            return Ok(Err(format!("the message has {} bytes; the limit is {}", body.len(), self.ctx.max_message_bytes)));
        }
        let deadline = self.call_deadline();
        Ok(self.ctx.grpc.write(call, body, deadline.checked_sub(self.ctx.grace).unwrap_or(deadline)).await)
    }

    async fn finish(&mut self, call: u64, status: grpc_types::Status) -> Wt<Result<(), String>> {
        if status.code > 16 {
            return Ok(Err(format!("{} is not a gRPC status code", status.code)));
        }
        Ok(match self.ctx.grpc.end(call, status) {
            true => Ok(()),
            false => Err(format!("gRPC call {call} is not open")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::own;

    /// The host keeps timers in `$timers`: a plugin may name no `$` collection.
    #[test]
    fn collections_starting_with_a_dollar_are_the_hosts() {
        for name in ["$timers", "$", "$anything"] {
            assert!(own(name).is_err(), "{name}");
        }
        for name in ["timers", "notes", "a$b"] {
            assert!(own(name).is_ok(), "{name}");
        }
    }
}
