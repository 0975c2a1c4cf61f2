//! One loaded component: what it exports, what it declares, its limits,
//! and how a fresh instance of it starts (instantiation, then `init`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::Engine;

use super::bindings::map_gateway::plugin::grpc_types::Method;
use super::budget::{Budget, Ticket};
use super::exports::{Described, Exports, Invocation, Returned, Service};
use super::instance::{classify, Instance};
use super::state::{Context, PluginState};
use map_config::InstanceMode;
use map_core::events::DataFilterSpec;
use map_core::ext_registry::{self, Declared};

/// Error codes a plugin may not claim: JSON-RPC's, and the MAP core's.
const RESERVED_CODES: &[(i64, i64)] = &map_protocol::rpc::RESERVED;

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
    pub mode: InstanceMode,
    /// The longest a `wasi:http` call may hold its instance (`stream_max_ms`).
    pub stream_max: Duration,
    /// The longest its response may go without a byte sent (`stream_idle_ms`).
    pub stream_idle: Duration,
    /// Its calls of one tenant open at once (`max_streams`).
    pub max_streams: usize,
}

/// Why no instance could take a call.
pub enum Refused {
    /// Over the tenant's share, the engine full, or a singleton backing off: try again later.
    Busy { retry_after: Duration, why: String },
    /// A fresh instance failed to start (instantiation or `init`).
    Failed(String),
}

/// What an `rpc` export declares, checked.
#[derive(Debug, Clone)]
pub struct Descriptor {
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The version of the extension's protocol, from its capability group's
    /// `protocolVersion` (taken out of the group).
    pub protocol_version: Option<String>,
    pub uri: String,
    pub capability_group: String,
    pub capabilities: Value,
    pub methods: Vec<String>,
    pub error_range: (i64, i64),
    /// Subscription filter keys over its events' data.
    pub event_filters: Vec<DataFilterSpec>,
}

/// Filter keys of the core, which no extension may take.
const CORE_FILTER_KEYS: &[&str] = &["eventTypes", "fromAgents", "agents", "fromRoles", "roles", "scopes", "priorities", "correlationIds", "metadataMatch"];

/// What a component declares in one tenant's context.
pub struct Declarations {
    pub descriptor: Option<Descriptor>,
    /// `meta` keys the observer wants (`None`: no `send-observer` export).
    pub interest: Option<Vec<String>>,
    /// gRPC services (`None`: no `grpc-handler` export).
    pub services: Option<Vec<Service>>,
    /// Unary methods answered in one callback (`grpc-unary`), as paths.
    pub unary: Vec<String>,
    /// Resource types (`None`: no `resources` export).
    pub kinds: Option<Vec<String>>,
}

/// A compiled component and what it serves.
pub struct Plugin {
    pub name: String,
    pub exports: Exports,
    pub limits: Limits,
    /// What it declared at load (tenants may see other answers).
    pub declared: Declarations,
    engine: Engine,
    pre: InstancePre<PluginState>,
    budget: Arc<Budget>,
}

impl Plugin {
    /// Link a component, bind what it exports and read its declarations.
    pub async fn load(
        name: &str,
        component: &Component,
        linker: &Linker<PluginState>,
        budget: Arc<Budget>,
        ctx: Arc<Context>,
        limits: Limits,
    ) -> anyhow::Result<Plugin> {
        let pre = linker.instantiate_pre(component)?;
        let exports = Exports::find(&pre).map_err(|e| anyhow::anyhow!("plugin {name}: {e:#}"))?;
        let mut plugin = Plugin {
            name: name.to_string(),
            exports,
            limits,
            declared: Declarations { descriptor: None, interest: None, services: None, unary: Vec::new(), kinds: None },
            engine: component.engine().clone(),
            pre,
            budget,
        };
        plugin.declared = plugin.declarations(ctx).await?;
        tracing::debug!(plugin = name, exports = ?plugin.exports.names(), "plugin bound");
        Ok(plugin)
    }

    /// The engine's budget of live instances.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// A ticket for one more live instance, waiting at most one deadline.
    async fn ticket(&self) -> Result<Ticket, Refused> {
        self.budget.ticket(self.limits.deadline).await.ok_or_else(|| Refused::Busy {
            retry_after: self.limits.deadline,
            why: format!("the gateway is running its most plugin instances ({}) and none came free", self.budget.capacity()),
        })
    }

    /// A fresh instance that has not run `init`, armed for one deadline.
    async fn instance(&self, ctx: Arc<Context>, ticket: Ticket) -> wasmtime::Result<Instance> {
        Instance::start(&self.engine, &self.pre, &self.exports, ctx, ticket, self.limits.memory_bytes, Instant::now() + self.limits.deadline).await
    }

    /// A fresh instance, initialised (`lifecycle.init`).
    pub async fn start(&self, ctx: Arc<Context>) -> Result<Instance, Refused> {
        let ticket = self.ticket().await?;
        self.start_with(ctx, ticket).await.map_err(Refused::Failed)
    }

    /// `Err` is the reason the instance is unusable.
    async fn start_with(&self, ctx: Arc<Context>, ticket: Ticket) -> Result<Instance, String> {
        let deadline_ms = self.limits.deadline.as_millis();
        let fail = |e: wasmtime::Error| classify(&e, deadline_ms, self.limits.memory_bytes).reason;
        let mut instance = tokio::time::timeout(self.limits.deadline + Duration::from_millis(500), self.instance(ctx, ticket))
            .await
            .map_err(|_| format!("instantiation timed out after {deadline_ms} ms"))?
            .map_err(|e| format!("could not be instantiated: {}", fail(e)))?;
        if self.exports.lifecycle() {
            instance.arm(Instant::now() + self.limits.deadline, None, 0);
            let Instance { store, bound, .. } = &mut instance;
            let ran = tokio::time::timeout(self.limits.deadline + Duration::from_millis(500), bound.invoke(store, Invocation::Init)).await;
            match ran {
                Ok(Ok(Returned::Init(Ok(())))) => {}
                Ok(Ok(Returned::Init(Err(e)))) => return Err(format!("init failed: {e}")),
                Ok(Ok(_)) => return Err("init answered something else".into()),
                Ok(Err(e)) => return Err(format!("init failed: {}", fail(e))),
                Err(_) => return Err(format!("init timed out after {deadline_ms} ms")),
            }
        }
        Ok(instance)
    }

    /// Ask a throwaway instance in `ctx` (without `init`) what it serves,
    /// observes and answers over gRPC. Run at load and for each tenant, whose
    /// config may change the answers.
    pub async fn declarations(&self, ctx: Arc<Context>) -> anyhow::Result<Declarations> {
        let name = &self.name;
        let ticket = self.ticket().await.map_err(|_| anyhow::anyhow!("plugin {name}: no instance came free to ask it what it serves"))?;
        let mut inst = self.instance(ctx, ticket).await.map_err(|e| anyhow::anyhow!("plugin {name} could not be instantiated: {e:#}"))?;
        let descriptor = match self.exports.rpc() {
            false => None,
            true => match self.ask(&mut inst, Invocation::Describe).await? {
                Returned::Described(d) => Some(check_descriptor(name, d)?),
                _ => unreachable!("describe answers a descriptor"),
            },
        };
        let interest = match self.exports.observer() {
            false => None,
            true => match self.ask(&mut inst, Invocation::Interest).await? {
                Returned::Interest(keys) => Some(keys),
                _ => unreachable!("interest answers keys"),
            },
        };
        let services = match self.exports.grpc() {
            false => None,
            true => match self.ask(&mut inst, Invocation::Services).await? {
                Returned::Services(s) => Some(check_services(name, s)?),
                _ => unreachable!("services answers services"),
            },
        };
        let unary = match self.exports.unary() {
            false => Vec::new(),
            true => match self.ask(&mut inst, Invocation::UnaryMethods).await? {
                Returned::UnaryMethods(paths) => check_unary(name, paths, services.as_deref().unwrap_or_default())?,
                _ => unreachable!("unary-methods answers paths"),
            },
        };
        let kinds = match self.exports.resources() {
            false => None,
            true => match self.ask(&mut inst, Invocation::ResourceKinds).await? {
                Returned::Kinds(kinds) => Some(check_kinds(name, kinds)?),
                _ => unreachable!("kinds answers types"),
            },
        };
        Ok(Declarations { descriptor, interest, services, unary, kinds })
    }

    async fn ask(&self, inst: &mut Instance, what: Invocation) -> anyhow::Result<Returned> {
        let name = &self.name;
        let Instance { store, bound, .. } = inst;
        match tokio::time::timeout(self.limits.deadline + Duration::from_millis(500), bound.invoke(store, what)).await {
            Ok(r) => r.map_err(|e| anyhow::anyhow!("plugin {name}: {}", classify(&e, self.limits.deadline.as_millis(), self.limits.memory_bytes).reason)),
            Err(_) => anyhow::bail!("plugin {name} timed out declaring what it serves"),
        }
    }

    pub fn version(&self) -> &str {
        self.declared.descriptor.as_ref().map(|d| d.version.as_str()).unwrap_or("")
    }
}

fn check_descriptor(name: &str, d: Described) -> anyhow::Result<Descriptor> {
    let mut capabilities: Value = serde_json::from_str(&d.capabilities).map_err(|e| anyhow::anyhow!("plugin {name}: capabilities are not JSON: {e}"))?;
    let protocol_version = take_protocol_version(name, &d.uri, &mut capabilities)?;
    let (lo, hi) = d.error_range;
    if lo > hi || RESERVED_CODES.iter().any(|&(a, b)| lo <= b && a <= hi) {
        anyhow::bail!(
            "plugin {name} declares error range {lo}..={hi}, which is empty or overlaps codes reserved for JSON-RPC and the MAP core ({RESERVED_CODES:?})"
        );
    }
    let declared = Declared { name: &d.name, uri: &d.uri, capability_group: &d.capability_group, methods: &d.methods, errors: d.error_range };
    match ext_registry::check(&declared) {
        Ok(None) => {}
        Ok(Some(note)) => tracing::warn!(plugin = name, "{note}"),
        Err(why) => anyhow::bail!("plugin {name} breaks the MAP extension registry: {why}"),
    }
    let mut event_filters = Vec::new();
    for (key, event_types, fields) in d.event_filters {
        if key.is_empty() || CORE_FILTER_KEYS.contains(&key.as_str()) || event_types.is_empty() {
            anyhow::bail!("plugin {name} declares the event filter {key:?} for {event_types:?}: the key must be new and the event types given");
        }
        let fields = fields.into_iter().map(|(field, paths)| (field, paths.iter().map(|p| p.split('.').map(String::from).collect()).collect())).collect();
        event_filters.push(DataFilterSpec { key, event_types, fields });
    }
    Ok(Descriptor {
        name: d.name,
        version: d.version,
        protocol_version,
        uri: d.uri,
        capability_group: d.capability_group,
        capabilities,
        methods: d.methods,
        error_range: d.error_range,
        event_filters,
    })
}

/// The key of a capability group that holds the extension's protocol version (wit/rpc.wit).
const PROTOCOL_VERSION: &str = "protocolVersion";

/// The capability group's `protocolVersion`, taken out of it: it is listed
/// in `capabilities.extensions`, not shown in the group.
fn take_protocol_version(name: &str, uri: &str, capabilities: &mut Value) -> anyhow::Result<Option<String>> {
    let Some(version) = capabilities.as_object_mut().and_then(|group| group.remove(PROTOCOL_VERSION)) else { return Ok(None) };
    let Value::String(version) = version else { anyhow::bail!("plugin {name} declares {PROTOCOL_VERSION} {version}, which is not a string") };
    ext_registry::check_protocol_version(uri, &version).map_err(|why| anyhow::anyhow!("plugin {name}: {why}"))?;
    Ok(Some(version))
}

/// Resource types are `<namespace>/<name>`, outside MAP's reserved `map/`.
fn check_kinds(name: &str, kinds: Vec<String>) -> anyhow::Result<Vec<String>> {
    let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    for kind in &kinds {
        let valid = kind.len() <= 128 && kind.split_once('/').is_some_and(|(ns, rest)| word(ns) && rest.split('/').all(word) && ns != "map");
        if !valid {
            anyhow::bail!("plugin {name} declares the resource type {kind:?}: a type is <namespace>/<name> (letters, digits, -, _, .), outside map/");
        }
    }
    if let Some(twice) = kinds.iter().enumerate().find(|(i, k)| kinds[..*i].contains(k)) {
        anyhow::bail!("plugin {name} declares the resource type {} twice", twice.1);
    }
    Ok(kinds)
}

fn check_services(name: &str, services: Vec<Service>) -> anyhow::Result<Vec<Service>> {
    for s in &services {
        let valid = |t: &str| !t.is_empty() && !t.contains('/') && t.chars().all(|c| c.is_ascii_graphic());
        if !valid(&s.name) || s.methods.iter().any(|m| !valid(&m.name)) {
            anyhow::bail!("plugin {name} declares a gRPC service or method with an invalid name in {}", s.name);
        }
    }
    Ok(services)
}

/// The method `/package.Service/Method` names among `services`.
pub fn grpc_method<'a>(services: &'a [Service], path: &str) -> Option<&'a Method> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    services.iter().find(|s| s.name == service)?.methods.iter().find(|m| m.name == method)
}

/// Each path `grpc-unary` answers is a method the services declare with
/// neither side streaming.
fn check_unary(name: &str, paths: Vec<String>, services: &[Service]) -> anyhow::Result<Vec<String>> {
    for path in &paths {
        match grpc_method(services, path) {
            Some(m) if !m.client_streaming && !m.server_streaming => {}
            Some(_) => anyhow::bail!("plugin {name} answers {path} in grpc-unary, but the method streams"),
            None => anyhow::bail!("plugin {name} answers {path} in grpc-unary, but its services declare no such method"),
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_unary_answers_only_declared_unary_methods() {
        let m = |name: &str, client_streaming, server_streaming| Method { name: name.into(), client_streaming, server_streaming };
        let services = [Service { name: "echo.v1.Echo".into(), methods: vec![m("Unary", false, false), m("Stream", false, true), m("Up", true, false)] }];
        let paths = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(check_unary("p", paths(&["/echo.v1.Echo/Unary"]), &services).unwrap(), paths(&["/echo.v1.Echo/Unary"]));
        for bad in ["/echo.v1.Echo/Stream", "/echo.v1.Echo/Up", "/echo.v1.Echo/Nope", "/other.v1.X/Unary", "echo.v1.Echo/Unary", "/echo.v1.Echo"] {
            let e = check_unary("p", paths(&[bad]), &services).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert!(check_unary("p", paths(&["/echo.v1.Echo/Unary"]), &[]).is_err(), "no services, nothing to answer");
    }
}
