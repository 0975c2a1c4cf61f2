//! Protocol handlers as WebAssembly components: loading, per-tenant plugin
//! sets, limits, hot swap. The contract is `wit/` (package
//! `map-gateway:plugin@0.2.6`; components built against 0.1.0 and 0.2.0 still load).
//!
//! One job per file: `engine` (wasmtime), `artifacts` (compiled components:
//! the disk cache, the cluster's shared store, the compiler), `bindings`
//! (generated from `wit/`), `exports` (binding each exported interface),
//! `plugin` (a loaded component), `instance` (one instance and failure
//! classification), `limiter` (its memory and table caps), `budget` (the
//! engine-wide cap on live instances), `pool` (pooled and singleton
//! instances), `calls` (calls into a tenant's plugin, by kind), `outcome`
//! (how a call ended), `stats` (calls by outcome, for the admin API),
//! `imports`/`imports_0_1` (the host side of the imports, of the current and
//! the 0.1 contract), `output` (the plugin's stdout and stderr, for the
//! log), `log_throttle`, `stream` (the body of a streaming HTTP response), `timers` (stored), `ownership` (a cluster
//! singleton's lease), `grpc_calls` (open gRPC calls), `outbound`
//! (outbound HTTP), `set` (a tenant's plugins), `state` (what an
//! instance's store holds), `loading` (which components a configuration
//! loads), `oci` (components from registries), `retention` (the loaded
//! components a node keeps for rollouts and rollbacks).

mod artifacts;
mod bindings;
mod budget;
mod calls;
mod contract;
mod deadline;
mod engine;
mod exports;
mod grpc_calls;
mod imports;
mod imports_0_1;
mod instance;
mod limiter;
mod loading;
mod log_throttle;
pub mod oci;
mod outbound;
mod outcome;
mod output;
mod ownership;
mod plugin;
mod pool;
mod retention;
mod set;
pub mod signing;
mod state;
mod stats;
mod stream;
mod timers;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::Context as _;
use parking_lot::Mutex;
use serde_json::Value;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::Engine;

pub use bindings::Caller;
pub use calls::TenantPlugin;
pub use contract::{check_error, check_result, json_depth, MAX_JSON_DEPTH};
pub use exports::{HttpRequest, HttpResponse};
pub use grpc_calls::{code as grpc_code, Requests as GrpcRequests, Response as GrpcResponse, Status as GrpcStatus};
pub use plugin::{Limits, Plugin};
pub use set::TenantPlugins;
pub use stream::{RequestBody, StreamBody, StreamError};

use calls::Placement;
use futures_util::future::BoxFuture;
use map_cluster::singletons::Singletons;
use map_config::InstanceMode;
use map_config::{Config, PluginConfig};
use map_core::extensions::ExtensionHost;
use map_core::Active;
use map_core::{Tenant, Tenants};
use map_store::{Fence, Scope, Store};
use ownership::Ownership;
use state::{Context, PluginState};
use timers::{OnTimer, Timers};

/// A tenant's plugin set (empty when it has none).
pub fn of(tenant: &Tenant) -> Arc<TenantPlugins> {
    tenant.extensions().into_any().downcast::<TenantPlugins>().unwrap_or_default()
}

/// The caller record a plugin receives for a session.
pub fn caller_of(active: &Active) -> Caller {
    let reg = active.tenant.registry.lock();
    let session = reg.sessions.get(&active.session_id);
    Caller {
        tenant: active.tenant.id.clone(),
        participant_id: active.participant_id.clone(),
        participant_type: active.participant_type.clone(),
        session_id: active.session_id.clone(),
        agent_ids: session.map(|s| s.agents.clone()).unwrap_or_default(),
        capabilities: session.map(|s| s.capabilities.to_string()).unwrap_or_else(|| "null".into()),
    }
}

#[derive(Clone)]
struct Loaded {
    digest: String,
    /// The key that signed it, where the configuration names signers.
    signer: Option<String>,
    settings: PluginConfig,
    plugin: Arc<Plugin>,
    origin: artifacts::Origin,
}

/// Compiles, caches and binds plugins; swaps tenant plugin sets on reload.
pub struct PluginHost {
    engine: Engine,
    budget: Arc<budget::Budget>,
    linker: Linker<PluginState>,
    db: Store,
    cache_dir: PathBuf,
    /// Compiled plugins shared with the other gateways of the database.
    shared: Option<map_store::Artifacts>,
    max_result_bytes: usize,
    /// One `apply` at a time; true once one ran (later ones are reloads,
    /// which look up OCI tags again).
    applying: tokio::sync::Mutex<bool>,
    /// What the last `apply` loaded; read by `status` while another runs.
    loaded: Mutex<Arc<HashMap<String, Loaded>>>,
    /// A tenant no one connects to, for calls made while loading (`describe`).
    scratch: Arc<Tenant>,
    last_error: Mutex<Option<String>>,
    /// Each tenant's plugins as the last reload bound them, for `status`.
    bound: Mutex<Vec<(String, Arc<TenantPlugin>)>>,
    /// What each (tenant, plugin) keeps across versions of the plugin.
    homes: Mutex<HashMap<(String, String), Home>>,
    /// In a cluster: how singleton plugins find their owner.
    cluster: Option<ClusterLink>,
    runtime: tokio::runtime::Handle,
}

/// What a (tenant, plugin) keeps across versions: its timers, and in a
/// cluster, for a singleton, its fence and the lease it follows.
struct Home {
    timers: Arc<Timers>,
    fence: Option<Arc<Fence>>,
    /// Alive while a version of the plugin runs for the tenant.
    ownership: Weak<Ownership>,
}

struct ClusterLink {
    link: Arc<Singletons>,
    node: String,
    lease: Duration,
}

/// The threads plugin code runs on, apart from the connection workers.
fn plugin_runtime(threads: usize) -> anyhow::Result<tokio::runtime::Handle> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt.handle().clone());
    }
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()).max(2),
        n => n,
    };
    // Calls arrive from the connection threads through the global queue; a
    // worker looks there every other task, so a new call waits behind at
    // most a few epoch slices of busy plugins, not dozens.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).thread_name("plugin").global_queue_interval(2).enable_all().build()?;
    Ok(RUNTIME.get_or_init(|| rt).handle().clone())
}

impl PluginHost {
    pub fn new(config: &Config, db: Store) -> anyhow::Result<PluginHost> {
        let engine = engine::build(config.server.max_instances)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        bindings::Plugin::add_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |s| s)?;
        bindings::contract_0_1::InterceptingExtension::add_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |s| s)?;
        Ok(PluginHost {
            engine,
            budget: budget::Budget::new(config.server.max_instances),
            linker,
            shared: db.artifacts(),
            db,
            cache_dir: config.server.plugin_cache(),
            max_result_bytes: config.server.max_message_bytes,
            applying: tokio::sync::Mutex::new(false),
            loaded: Mutex::new(Arc::new(HashMap::new())),
            scratch: Arc::new(Tenant::new("~loader", &map_config::LimitsConfig { replay_events: 1, ..Default::default() })),
            last_error: Mutex::new(None),
            bound: Mutex::new(Vec::new()),
            homes: Mutex::new(HashMap::new()),
            cluster: None,
            runtime: plugin_runtime(config.server.plugin_threads)?,
        })
    }

    /// Run singleton plugins cluster-wide: each on the node that holds its
    /// lease, reached from the others through `link`.
    pub fn join_cluster(&mut self, link: Arc<Singletons>, node: &str, lease: Duration) {
        self.cluster = Some(ClusterLink { link, node: node.to_string(), lease });
    }

    /// Where a (tenant, plugin) runs: `None` unless it is a singleton in a cluster.
    fn placement(&self, tenant: &str, plugin: &str, settings: &PluginConfig) -> Option<Placement> {
        let cluster = self.cluster.as_ref().filter(|_| settings.mode == InstanceMode::Singleton)?;
        let leases = self.db.leases()?;
        let mut homes = self.homes.lock();
        let home = homes.get_mut(&(tenant.to_string(), plugin.to_string()))?;
        let fence = home.fence.clone()?;
        let ownership = match home.ownership.upgrade() {
            Some(o) => o,
            None => {
                let o = Ownership::start(fence, leases, cluster.lease, self.runtime.clone());
                home.ownership = Arc::downgrade(&o);
                o
            }
        };
        Some(Placement { ownership, link: cluster.link.clone() })
    }

    /// The context of a (tenant, plugin)'s instances. A singleton in a
    /// cluster writes through its fence: only while this node holds its lease.
    fn context(
        &self,
        tenant: Arc<Tenant>,
        plugin: &str,
        config: Value,
        settings: &PluginConfig,
        receives_timers: bool,
        outbound: outbound::Policy,
    ) -> Arc<Context> {
        let scope = Scope { tenant: tenant.id.clone(), plugin: plugin.to_string() };
        let fenced = self.cluster.is_some() && settings.mode == InstanceMode::Singleton && self.db.leases().is_some() && !Arc::ptr_eq(&tenant, &self.scratch);
        let (timers, db) = {
            let mut homes = self.homes.lock();
            let home = homes.entry((tenant.id.clone(), plugin.to_string())).or_insert_with(|| {
                let fence = fenced.then(|| Arc::new(Fence::new(&tenant.id, plugin, &self.cluster.as_ref().map_or(String::new(), |c| c.node.clone()))));
                let db = fence.as_ref().map_or_else(|| self.db.clone(), |f| self.db.fenced(f.clone()));
                // A cluster singleton's timers wait until this node owns it.
                let timers = Timers::new(scope.clone(), db, self.runtime.clone(), fence.is_none());
                Home { timers, fence, ownership: Weak::new() }
            });
            let db = home.fence.as_ref().map_or_else(|| self.db.clone(), |f| self.db.fenced(f.clone()));
            (home.timers.clone(), db)
        };
        Arc::new(Context {
            scope,
            tenant,
            plugin: plugin.to_string(),
            db,
            config: Arc::new(config),
            timers,
            grpc: Default::default(),
            host_bytes: (settings.memory_mb as usize) << 20,
            max_message_bytes: self.max_result_bytes,
            receives_timers,
            outbound,
            grace: Duration::from_millis(settings.deadline_ms / 10),
        })
    }

    /// Load the configured plugins (reusing unchanged ones) and give every
    /// tenant its new set. Calls in flight finish on the set they started with.
    pub async fn apply(&self, config: &Config, tenants: &Tenants) -> anyhow::Result<()> {
        let wanted = config.plugin_settings()?;
        let mut turn = self.applying.lock().await;
        let reload = std::mem::replace(&mut *turn, true);
        let loaded = self.loaded.lock().clone();
        let next = self.load_all(config, &wanted, &loaded, reload).await?;
        let mut sets = Vec::new();
        for t in &config.tenants {
            let tenant = tenants.get(&t.id).with_context(|| format!("tenant {} is not running; adding tenants needs a restart", t.id))?;
            let names: Vec<String> = match &t.plugins {
                Some(list) => list.clone(),
                None => wanted.keys().cloned().collect(),
            };
            let mut list = Vec::new();
            for name in names {
                let key = loading::key(t, &name);
                let l = next.get(&key).with_context(|| format!("tenant {} names plugin {name}, which is not configured", t.id))?;
                let mut cfg = l.settings.config.expose().clone();
                if let (Some(Value::Object(over)), Value::Object(base)) = (t.plugin_config.get(&name).map(|s| s.expose()), &mut cfg) {
                    base.extend(over.clone());
                }
                let serves_http = l.plugin.exports.http() || l.plugin.exports.incoming();
                if serves_http && l.settings.http_prefix.is_empty() {
                    anyhow::bail!("plugin {name} serves HTTP: give it an http_prefix");
                }
                let prefix = Some(l.settings.http_prefix.clone()).filter(|p| !p.is_empty() && serves_http);
                let hosts: Vec<String> = l.settings.outbound_hosts.iter().chain(t.outbound_hosts.get(&name).into_iter().flatten()).cloned().collect();
                let s = &l.settings;
                let outbound = outbound::Policy::new(&hosts, Duration::from_millis(s.outbound_timeout_ms), s.outbound_max_bytes, &t.id, &name)?
                    .with_body_buffer(s.stream_buffer_bytes);
                // An unchanged plugin keeps its instances (a singleton its state, gRPC calls stay open).
                let current = of(&tenant).named(&name).filter(|tp| Arc::ptr_eq(&tp.plugin, &l.plugin) && *tp.config() == cfg && *tp.outbound() == outbound);
                let tp = match current {
                    Some(tp) => tp,
                    None => {
                        let ctx = self.context(tenant.clone(), &name, cfg, &l.settings, l.plugin.exports.lifecycle(), outbound);
                        let placement = self.placement(&t.id, &name, &l.settings);
                        TenantPlugin::new(l.plugin.clone(), ctx, self.runtime.clone(), placement)
                            .await
                            .with_context(|| format!("plugin {name} for tenant {}", t.id))?
                    }
                };
                list.push((tp, prefix));
            }
            sets.push((tenant, TenantPlugins::new(list).with_context(|| format!("tenant {}", t.id))?));
        }
        let mut bound = Vec::new();
        for (tenant, set) in sets {
            bound.extend(set.all().iter().map(|tp| (tenant.id.clone(), tp.clone())));
            let old = of(&tenant);
            tenant.set_extensions(Arc::new(set));
            // gRPC calls of replaced versions end; their clients reconnect to the new one.
            let now = of(&tenant);
            self.aim_timers(&tenant.id, &now);
            for tp in old.all() {
                if !now.all().iter().any(|n| Arc::ptr_eq(n, tp)) {
                    tp.retire();
                }
            }
        }
        retention::prune(config, next.values().map(|l| l.digest.clone()));
        oci::prune(config);
        *self.loaded.lock() = Arc::new(next);
        *self.bound.lock() = bound;
        *self.last_error.lock() = None;
        Ok(())
    }

    /// A tenant's due timers go to the versions of its plugins `set` runs;
    /// timers stored before (a restart) are armed where this node delivers them.
    fn aim_timers(&self, tenant: &str, set: &TenantPlugins) {
        for ((_, plugin), home) in self.homes.lock().iter().filter(|((t, _), _)| t == tenant) {
            let target = set.named(plugin);
            home.timers.aim(target.as_ref().map(|tp| Arc::downgrade(tp) as Weak<dyn OnTimer>));
            if target.is_some_and(|tp| tp.plugin.exports.lifecycle()) && home.fence.is_none() {
                let timers = home.timers.clone();
                self.runtime.spawn(async move { timers.activate(true).await });
            }
        }
    }

    pub fn note_error(&self, e: &anyhow::Error) {
        *self.last_error.lock() = Some(format!("{e:#}"));
    }

    /// Versions of the loaded plugins, for the admin API.
    pub async fn status(&self) -> Value {
        let loaded = self.loaded.lock().clone();
        let mut plugins: Vec<Value> = loaded
            .iter()
            .map(|(key, l)| {
                let name = key.split(' ').next().unwrap_or(key);
                serde_json::json!({"name": name, "version": l.plugin.version(), "digest": l.digest, "signer": l.signer, "path": l.settings.path, "source": l.settings.source, "artifact": l.origin.as_str()})
            })
            .collect();
        plugins.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        // Each plugin in each tenant: calls by outcome, instances, failures.
        let tenants: Vec<Value> = self.bound.lock().iter().map(|(tenant, tp)| tp.inspect(tenant)).collect();
        serde_json::json!({"plugins": plugins, "tenants": tenants, "lastError": *self.last_error.lock()})
    }
}

impl ExtensionHost for PluginHost {
    fn apply<'a>(&'a self, config: &'a Config, tenants: &'a Tenants) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(PluginHost::apply(self, config, tenants))
    }

    fn note_error(&self, error: &anyhow::Error) {
        PluginHost::note_error(self, error)
    }

    fn status(&self) -> BoxFuture<'_, Value> {
        Box::pin(PluginHost::status(self))
    }

    fn digests(&self) -> std::collections::BTreeMap<String, String> {
        self.loaded.lock().iter().map(|(key, l)| (key.clone(), l.digest.clone())).collect()
    }

    /// The store answers (plugins are loaded once the gateway serves).
    fn ready(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.db.ping().await.map_err(|e| format!("storage ({}): {e}", self.db.backend_name())) })
    }
}
