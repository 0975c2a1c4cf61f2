//! One loaded component (`Plugin`) and its binding to a tenant
//! (`TenantPlugin`): a pool of ready instances, and calls made under a
//! deadline and a memory cap, whose failures become JSON-RPC errors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::{Engine, Store, UpdateDeadline};

use super::bindings::{extension, http, observer, Caller, InterceptingExtension, InterceptingExtensionPre};
use super::state::{Context, PluginState};
use crate::core::methods::messaging::SentMessage;
use crate::core::outbox::Frame;
use crate::core::Active;
use crate::rpc::{codes, RpcError};

/// Deepest JSON nesting a plugin may answer with: many clients cannot parse more.
const MAX_JSON_DEPTH: usize = 128;

/// The deepest nesting of arrays and objects in JSON text (strings skipped).
fn json_depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Error codes a plugin may not claim: JSON-RPC's, and the MAP core's.
const RESERVED_CODES: &[(i64, i64)] = &[(-32768, -32000), (1000, 9999), (16000, 16999)];

/// Per-call limits of a plugin.
#[derive(Debug, Clone)]
pub struct Limits {
    pub deadline: Duration,
    pub memory_bytes: usize,
    /// Ready instances kept per tenant.
    pub idle_instances: usize,
    /// Largest result accepted, in bytes.
    pub max_result_bytes: usize,
    /// Calls of one tenant running at once; more wait up to the deadline.
    pub max_concurrency: usize,
}

/// What an `rpc` export declares.
#[derive(Debug, Clone)]
pub struct Descriptor {
    pub name: String,
    pub version: String,
    pub uri: String,
    pub capability_group: String,
    pub capabilities: Value,
    pub methods: Vec<String>,
    pub error_range: (i64, i64),
}

enum Pre {
    Extension(extension::ExtensionPre<PluginState>),
    Intercepting(InterceptingExtensionPre<PluginState>),
    Observer(observer::SendObserverPre<PluginState>),
    Http(http::HttpExtensionPre<PluginState>),
}

enum Bound {
    Extension(extension::Extension),
    Intercepting(InterceptingExtension),
    Observer(observer::SendObserver),
    Http(http::HttpExtension),
}

/// One HTTP request for an `http-handler` export (path below the plugin's prefix).
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The plugin's answer.
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A compiled component and what it serves.
pub struct Plugin {
    pub name: String,
    pub descriptor: Option<Descriptor>,
    /// `meta` keys the interceptor export wants (`None`: no interceptor).
    pub interest: Option<Vec<String>>,
    pub limits: Limits,
    pre: Pre,
}

/// Marker error: the call ran past its deadline.
#[derive(Debug)]
struct DeadlineExceeded;

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl std::error::Error for DeadlineExceeded {}

struct Instance {
    store: Store<PluginState>,
    bound: Bound,
}

fn new_store(engine: &Engine, ctx: Arc<Context>, limits: &Limits) -> Store<PluginState> {
    let mut store = Store::new(engine, PluginState::new(ctx, limits.memory_bytes));
    store.limiter(|s| &mut s.limits);
    store.epoch_deadline_callback(|ctx| {
        if Instant::now() >= ctx.data().deadline {
            Err(DeadlineExceeded.into())
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
    store
}

fn arm(store: &mut Store<PluginState>, limits: &Limits, caller: Option<Active>) {
    let data = store.data_mut();
    data.deadline = Instant::now() + limits.deadline;
    data.caller = caller;
    store.set_epoch_deadline(1);
}

impl Plugin {
    /// Link a component, find which worlds it implements and read its declarations.
    pub async fn load(name: &str, component: &Component, linker: &Linker<PluginState>, ctx: Arc<Context>, limits: Limits) -> anyhow::Result<Plugin> {
        let engine = component.engine().clone();
        let instance_pre: InstancePre<PluginState> = linker.instantiate_pre(component)?;
        let pre = if let Ok(p) = InterceptingExtensionPre::new(instance_pre.clone()) {
            Pre::Intercepting(p)
        } else if let Ok(p) = extension::ExtensionPre::new(instance_pre.clone()) {
            Pre::Extension(p)
        } else if let Ok(p) = observer::SendObserverPre::new(instance_pre.clone()) {
            Pre::Observer(p)
        } else if let Ok(p) = http::HttpExtensionPre::new(instance_pre) {
            Pre::Http(p)
        } else {
            anyhow::bail!("plugin {name} exports none of map-gateway:plugin/rpc, interceptor or http-handler (version 0.1)");
        };
        let mut plugin = Plugin { name: name.to_string(), descriptor: None, interest: None, limits, pre };
        let (descriptor, interest) = plugin.declarations(&engine, ctx).await?;
        plugin.descriptor = descriptor;
        plugin.interest = interest;
        Ok(plugin)
    }

    /// Ask an instance in `ctx` what it serves (`describe`) and observes
    /// (`interest`). Run at load and again for each tenant, whose config may
    /// change the answer.
    async fn declarations(&self, engine: &Engine, ctx: Arc<Context>) -> anyhow::Result<(Option<Descriptor>, Option<Vec<String>>)> {
        let name = &self.name;
        let mut inst = self.instantiate(engine, ctx).await?;
        arm(&mut inst.store, &self.limits, None);
        let store = &mut inst.store;
        // Each world's bindings have their own record type; the fields are the same.
        macro_rules! descriptor {
            ($d:expr) => {{
                let d = $d;
                (d.name, d.version, d.uri, d.capability_group, d.capabilities, d.methods, d.error_range)
            }};
        }
        let described = match &inst.bound {
            Bound::Extension(b) => Some(descriptor!(b.map_gateway_plugin_rpc().call_describe(&mut *store).await?)),
            Bound::Intercepting(b) => Some(descriptor!(b.map_gateway_plugin_rpc().call_describe(&mut *store).await?)),
            Bound::Observer(_) | Bound::Http(_) => None,
        };
        let interest = match &inst.bound {
            Bound::Intercepting(b) => Some(b.map_gateway_plugin_interceptor().call_interest(&mut *store).await?),
            Bound::Observer(b) => Some(b.map_gateway_plugin_interceptor().call_interest(&mut *store).await?),
            Bound::Extension(_) | Bound::Http(_) => None,
        };
        let descriptor = match described {
            None => None,
            Some((d_name, version, uri, capability_group, caps, methods, error_range)) => {
                let capabilities: Value = serde_json::from_str(&caps).map_err(|e| anyhow::anyhow!("plugin {name}: capabilities are not JSON: {e}"))?;
                if let Some(bad) = methods.iter().find(|m| m.starts_with("map/") || m.is_empty()) {
                    anyhow::bail!("plugin {name} may not serve {bad:?}: map/ belongs to the core");
                }
                let (lo, hi) = error_range;
                if lo > hi || RESERVED_CODES.iter().any(|&(a, b)| lo <= b && a <= hi) {
                    anyhow::bail!("plugin {name} declares error range {lo}..={hi}, which is empty or overlaps codes reserved for JSON-RPC and the MAP core ({RESERVED_CODES:?})");
                }
                Some(Descriptor { name: d_name, version, uri, capability_group, capabilities, methods, error_range })
            }
        };
        Ok((descriptor, interest))
    }

    async fn instantiate(&self, engine: &Engine, ctx: Arc<Context>) -> anyhow::Result<Instance> {
        let mut store = new_store(engine, ctx, &self.limits);
        arm(&mut store, &self.limits, None);
        let bound = match &self.pre {
            Pre::Extension(p) => Bound::Extension(p.instantiate_async(&mut store).await?),
            Pre::Intercepting(p) => Bound::Intercepting(p.instantiate_async(&mut store).await?),
            Pre::Observer(p) => Bound::Observer(p.instantiate_async(&mut store).await?),
            Pre::Http(p) => Bound::Http(p.instantiate_async(&mut store).await?),
        };
        Ok(Instance { store, bound })
    }

    /// Whether the component serves HTTP (`http-handler`).
    pub fn serves_http(&self) -> bool {
        matches!(self.pre, Pre::Http(_))
    }

    pub fn version(&self) -> &str {
        self.descriptor.as_ref().map(|d| d.version.as_str()).unwrap_or("")
    }
}

/// A plugin bound to one tenant: its own instances, configuration and storage scope.
pub struct TenantPlugin {
    pub plugin: Arc<Plugin>,
    /// What the plugin declared in this tenant's context.
    pub descriptor: Option<Descriptor>,
    pub interest: Option<Vec<String>>,
    engine: Engine,
    ctx: Arc<Context>,
    idle: Mutex<Vec<Instance>>,
    /// This tenant's share of the engine: calls running at once.
    slots: Arc<tokio::sync::Semaphore>,
    observer: Option<mpsc::Sender<(Active, SentMessage)>>,
}

/// Observed messages waiting for an interceptor, per tenant plugin.
const OBSERVER_QUEUE: usize = 10_000;

impl TenantPlugin {
    /// Bind a plugin to a tenant, asking it what it serves there.
    pub async fn new(plugin: Arc<Plugin>, engine: Engine, ctx: Arc<Context>) -> anyhow::Result<Arc<TenantPlugin>> {
        let (descriptor, interest) = plugin.declarations(&engine, ctx.clone()).await?;
        let (tx, rx) = if interest.is_some() {
            let (tx, rx) = mpsc::channel(OBSERVER_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let slots = Arc::new(tokio::sync::Semaphore::new(plugin.limits.max_concurrency.max(1)));
        let tp = Arc::new(TenantPlugin { plugin, descriptor, interest, engine, ctx, idle: Mutex::new(Vec::new()), slots, observer: tx });
        if let Some(rx) = rx {
            // One worker per tenant plugin keeps messages in send order.
            tokio::spawn(observe_loop(Arc::downgrade(&tp), rx));
        }
        Ok(tp)
    }

    pub fn name(&self) -> &str {
        &self.plugin.name
    }

    fn failure(&self, reason: String) -> RpcError {
        RpcError::new(codes::INTERNAL_ERROR, format!("Plugin {} failed: {reason}", self.plugin.name))
            .with_details(json!({"plugin": self.plugin.name, "version": self.plugin.version(), "reason": reason}))
    }

    fn classify(&self, e: &wasmtime::Error) -> String {
        if e.downcast_ref::<DeadlineExceeded>().is_some() {
            return format!("timed out after {} ms", self.plugin.limits.deadline.as_millis());
        }
        let text = format!("{e:#}");
        if text.contains("growing memory") || text.contains("memory limit") {
            return format!("exceeded its memory limit of {} MiB", self.plugin.limits.memory_bytes >> 20);
        }
        match e.downcast_ref::<wasmtime::Trap>() {
            Some(trap) => format!("trapped: {trap}"),
            None => format!("trapped: {}", text.lines().next().unwrap_or("unknown error")),
        }
    }

    /// Time one fresh instantiation (benchmarks; the instance is dropped).
    #[doc(hidden)]
    pub async fn time_instantiation(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let inst = self.plugin.instantiate(&self.engine, self.ctx.clone()).await?;
        let took = started.elapsed();
        drop(inst);
        Ok(took)
    }

    /// A place among this tenant's running calls, waiting at most one
    /// deadline: one tenant cannot take every instance of the engine.
    async fn slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, RpcError> {
        let wait = self.plugin.limits.deadline;
        let started = Instant::now();
        // The elapsed check holds the bound even when timers fire late.
        match tokio::time::timeout(wait, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) if started.elapsed() <= wait => Ok(permit),
            _ => Err(RpcError::new(
                codes::RESOURCE_EXHAUSTED,
                format!("Plugin {} is running {} calls of this tenant already; try again later", self.plugin.name, self.plugin.limits.max_concurrency),
            )
            .with_data(json!({"retryAfterMs": wait.as_millis() as u64, "plugin": self.plugin.name}))),
        }
    }

    async fn take(&self) -> Result<Instance, RpcError> {
        if let Some(i) = self.idle.lock().pop() {
            return Ok(i);
        }
        self.plugin.instantiate(&self.engine, self.ctx.clone()).await.map_err(|e| {
            tracing::warn!(plugin = self.plugin.name, error = %e, "instantiation failed");
            RpcError::new(codes::RESOURCE_EXHAUSTED, format!("Plugin {} could not be instantiated: {e}", self.plugin.name))
        })
    }

    fn give_back(&self, mut inst: Instance) {
        inst.store.data_mut().caller = None;
        inst.store.data_mut().deferred.clear();
        let mut idle = self.idle.lock();
        if idle.len() < self.plugin.limits.idle_instances {
            idle.push(inst);
        }
    }

    /// Call `handle` of the rpc export. A trap, timeout, memory exhaustion or
    /// malformed result is this call's -32603; the instance is then discarded.
    /// With the result come the notifications the plugin sent to its caller,
    /// to be written after the response.
    pub async fn call_rpc(&self, active: &Active, caller: Caller, method: &str, params: &str) -> Result<(Box<RawValue>, Vec<Frame>), RpcError> {
        let (method_s, params_s) = (method.to_string(), params.to_string());
        let _slot = self.slot().await?;
        let mut inst = self.take().await?;
        let limits = &self.plugin.limits;
        arm(&mut inst.store, limits, Some(active.clone()));
        let outcome = {
            let Instance { store, bound } = &mut inst;
            let call = async {
                match bound {
                    Bound::Extension(b) => b.map_gateway_plugin_rpc().call_handle(&mut *store, &caller, &method_s, &params_s).await,
                    Bound::Intercepting(b) => b.map_gateway_plugin_rpc().call_handle(&mut *store, &caller, &method_s, &params_s).await,
                    Bound::Observer(_) | Bound::Http(_) => Ok(Err(super::bindings::RpcError { code: codes::METHOD_NOT_FOUND, message: format!("Method not found: {method}"), data: None })),
                }
            };
            // The epoch check interrupts wasm code; the outer timeout also bounds host calls.
            tokio::time::timeout(limits.deadline + Duration::from_millis(500), call).await
        };
        let result = match outcome {
            Err(_) => Err(self.failure(format!("timed out after {} ms", limits.deadline.as_millis()))),
            Ok(Err(trap)) => Err(self.failure(self.classify(&trap))),
            // An instance that broke the contract is not trusted with another call.
            Ok(Ok(Ok(text))) => match self.check_result(text) {
                Ok(r) => {
                    let deferred = std::mem::take(&mut inst.store.data_mut().deferred);
                    self.give_back(inst);
                    return Ok((r, deferred));
                }
                Err(e) => Err(e),
            },
            Ok(Ok(Err(e))) => match self.check_error(e) {
                Ok(e) => {
                    self.give_back(inst);
                    return Err(e);
                }
                Err(e) => Err(e),
            },
        };
        tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, method, error = ?result.as_ref().err().map(|e| &e.message), "plugin call failed; instance discarded");
        result
    }

    fn check_result(&self, text: String) -> Result<Box<RawValue>, RpcError> {
        if text.len() > self.plugin.limits.max_result_bytes {
            return Err(self.failure(format!("returned an oversized result ({} bytes; the limit is {})", text.len(), self.plugin.limits.max_result_bytes)));
        }
        if json_depth(&text) > MAX_JSON_DEPTH {
            return Err(self.failure(format!("returned JSON nested deeper than {MAX_JSON_DEPTH} levels")));
        }
        RawValue::from_string(text).map_err(|e| self.failure(format!("returned malformed JSON ({e})")))
    }

    /// Keep a plugin's error only if its code is its own (or a JSON-RPC
    /// one) and it fits the message limit; `Err` is the failure it becomes.
    fn check_error(&self, e: super::bindings::RpcError) -> Result<RpcError, RpcError> {
        let (lo, hi) = self.descriptor.as_ref().map(|d| d.error_range).unwrap_or((0, -1));
        let standard = (-32700..=-32600).contains(&e.code) && e.code != codes::INTERNAL_ERROR;
        if !standard && !(lo..=hi).contains(&e.code) {
            let head: String = e.message.chars().take(200).collect();
            return Err(self.failure(format!("returned error code {} outside its range {lo}..={hi}: {head}", e.code)));
        }
        let size = e.message.len() + e.data.as_ref().map_or(0, String::len);
        if size > self.plugin.limits.max_result_bytes {
            return Err(self.failure(format!("returned an oversized error ({size} bytes; the limit is {})", self.plugin.limits.max_result_bytes)));
        }
        if e.data.as_deref().is_some_and(|d| json_depth(d) > MAX_JSON_DEPTH) {
            return Err(self.failure(format!("returned error data nested deeper than {MAX_JSON_DEPTH} levels")));
        }
        let mut err = RpcError::new(e.code, e.message);
        if let Some(data) = e.data.and_then(|d| serde_json::from_str::<Value>(&d).ok()) {
            err.data = Some(data);
        }
        Ok(err)
    }

    /// Call `http-handler.handle`. Failures are the caller's to turn into a 5xx.
    pub async fn call_http(&self, req: HttpRequest) -> Result<HttpResponse, RpcError> {
        let _slot = self.slot().await?;
        let mut inst = self.take().await?;
        let limits = &self.plugin.limits;
        arm(&mut inst.store, limits, None);
        let request = http::exports::map_gateway::plugin::http_handler::Request {
            method: req.method,
            path: req.path,
            query: req.query,
            headers: req.headers,
            body: req.body,
        };
        let outcome = {
            let Instance { store, bound } = &mut inst;
            let Bound::Http(b) = bound else {
                return Err(self.failure("does not serve HTTP".into()));
            };
            let call = b.map_gateway_plugin_http_handler().call_handle(&mut *store, &request);
            tokio::time::timeout(limits.deadline + Duration::from_millis(500), call).await
        };
        match outcome {
            Ok(Ok(r)) if r.body.len() <= limits.max_result_bytes => {
                self.give_back(inst);
                Ok(HttpResponse { status: r.status, headers: r.headers, body: r.body })
            }
            Ok(Ok(r)) => Err(self.failure(format!("returned an oversized body ({} bytes)", r.body.len()))),
            Ok(Err(trap)) => Err(self.failure(self.classify(&trap))),
            Err(_) => Err(self.failure(format!("timed out after {} ms", limits.deadline.as_millis()))),
        }
    }

    /// Queue a delivered message for the interceptor; never blocks the sender.
    pub fn observe(&self, active: &Active, msg: SentMessage) {
        if let Some(tx) = &self.observer {
            if tx.try_send((active.clone(), msg)).is_err() {
                tracing::warn!(plugin = self.plugin.name, tenant = self.ctx.scope.tenant, "interceptor queue full; message not observed");
            }
        }
    }

    async fn call_observer(&self, active: Active, caller: Caller, msg: SentMessage) {
        let Ok(_slot) = self.slot().await else { return };
        let Ok(mut inst) = self.take().await else { return };
        arm(&mut inst.store, &self.plugin.limits, Some(active));
        let sent = super::bindings::exports::map_gateway::plugin::interceptor::SentMessage {
            id: msg.id,
            from: msg.from,
            to: msg.to.to_string(),
            timestamp: msg.timestamp,
            payload: msg.payload,
            meta: msg.meta.to_string(),
            delivered: msg.delivered,
        };
        let outcome = {
            let Instance { store, bound } = &mut inst;
            let call = async {
                match bound {
                    Bound::Intercepting(b) => b.map_gateway_plugin_interceptor().call_on_send(&mut *store, &caller, &sent).await,
                    Bound::Observer(b) => {
                        let sent = observer::exports::map_gateway::plugin::interceptor::SentMessage {
                            id: sent.id.clone(),
                            from: sent.from.clone(),
                            to: sent.to.clone(),
                            timestamp: sent.timestamp,
                            payload: sent.payload.clone(),
                            meta: sent.meta.clone(),
                            delivered: sent.delivered.clone(),
                        };
                        b.map_gateway_plugin_interceptor().call_on_send(&mut *store, &caller, &sent).await
                    }
                    Bound::Extension(_) | Bound::Http(_) => Ok(()),
                }
            };
            tokio::time::timeout(self.plugin.limits.deadline + Duration::from_millis(500), call).await
        };
        match outcome {
            Ok(Ok(())) => self.give_back(inst),
            Ok(Err(e)) => tracing::warn!(plugin = self.plugin.name, reason = self.classify(&e), "interceptor failed"),
            Err(_) => tracing::warn!(plugin = self.plugin.name, "interceptor timed out"),
        }
    }
}

async fn observe_loop(tp: std::sync::Weak<TenantPlugin>, mut rx: mpsc::Receiver<(Active, SentMessage)>) {
    while let Some((active, msg)) = rx.recv().await {
        let Some(tp) = tp.upgrade() else { return };
        let caller = super::caller_of(&active);
        tp.call_observer(active, caller, msg).await;
    }
}
