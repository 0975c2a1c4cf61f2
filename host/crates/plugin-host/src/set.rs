//! A tenant's plugin set: which plugin serves which method, HTTP prefix and
//! gRPC service, who observes `map/send`, and what the tenant's
//! `map/connect` advertises.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use futures_util::future::BoxFuture;
use map_core::events::DataFilterSpec;
use map_core::ext_registry::{self, Declared};
use map_core::extensions::{Answer, Extensions, ResourceCall};
use map_protocol::rpc::RpcError;

use super::calls::TenantPlugin;
use super::plugin::Descriptor;
use map_core::model::Observed;
use map_core::Active;

#[derive(Default)]
pub struct TenantPlugins {
    plugins: Vec<Arc<TenantPlugin>>,
    methods: HashMap<String, Arc<TenantPlugin>>,
    observers: Vec<Arc<TenantPlugin>>,
    /// HTTP plugins by path prefix, longest first.
    http: Vec<(String, Arc<TenantPlugin>)>,
    /// gRPC plugins (each path is served by one).
    grpc: Vec<Arc<TenantPlugin>>,
    /// Resource types and the plugin providing each, in declaration order.
    kinds: Vec<(String, Arc<TenantPlugin>)>,
    /// Some observer wants every message.
    observe_all: bool,
    observe_keys: Vec<String>,
}

impl TenantPlugins {
    /// The tenant's plugins, each with its HTTP prefix if it serves HTTP.
    pub fn new(entries: Vec<(Arc<TenantPlugin>, Option<String>)>) -> anyhow::Result<TenantPlugins> {
        let mut set = TenantPlugins::default();
        let mut plugins = Vec::new();
        for (tp, prefix) in entries {
            if let Some(prefix) = prefix {
                if set.http.iter().any(|(p, _)| *p == prefix) {
                    anyhow::bail!("two plugins share the HTTP prefix {prefix}");
                }
                set.http.push((prefix, tp.clone()));
            }
            plugins.push(tp);
        }
        set.http.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        for tp in &plugins {
            if let Some(d) = &tp.descriptor {
                for f in &d.event_filters {
                    let taken = plugins
                        .iter()
                        .filter(|o| !Arc::ptr_eq(o, tp))
                        .filter_map(|o| o.descriptor.as_ref())
                        .any(|o| o.event_filters.iter().any(|x| x.key == f.key));
                    if taken {
                        anyhow::bail!("the event filter {} is declared by {} and another plugin", f.key, tp.name());
                    }
                }
                for m in &d.methods {
                    if let Some(other) = set.methods.insert(m.clone(), tp.clone()) {
                        anyhow::bail!("method {m} is served by both {} and {}", other.name(), tp.name());
                    }
                }
                let before = plugins.iter().take_while(|o| !Arc::ptr_eq(o, tp));
                for (other, o) in before.filter_map(|o| Some((o, o.descriptor.as_ref()?))) {
                    if let Some(why) = ext_registry::collide(&declared(d), &declared(o)) {
                        anyhow::bail!("plugins {} and {}: {why}", other.name(), tp.name());
                    }
                }
            }
            if let Some(services) = &tp.services {
                for s in services {
                    if let Some(other) = set.grpc.iter().find(|o| o.services.iter().flatten().any(|x| x.name == s.name)) {
                        anyhow::bail!("gRPC service {} is served by both {} and {}", s.name, other.name(), tp.name());
                    }
                }
                set.grpc.push(tp.clone());
            }
            for kind in tp.kinds.iter().flatten() {
                if let Some((_, other)) = set.kinds.iter().find(|(k, _)| k == kind) {
                    anyhow::bail!("resource type {kind} is provided by both {} and {}", other.name(), tp.name());
                }
                set.kinds.push((kind.clone(), tp.clone()));
            }
            if let Some(interest) = &tp.interest {
                set.observers.push(tp.clone());
                set.observe_all |= interest.is_empty();
                set.observe_keys.extend(interest.iter().cloned());
            }
        }
        set.plugins = plugins;
        Ok(set)
    }

    pub fn method(&self, name: &str) -> Option<Arc<TenantPlugin>> {
        self.methods.get(name).cloned()
    }

    /// The plugin of this name, if the tenant runs it.
    pub fn named(&self, name: &str) -> Option<Arc<TenantPlugin>> {
        self.plugins.iter().find(|tp| tp.name() == name).cloned()
    }

    /// The gRPC plugin serving `/package.Service/Method`.
    pub fn grpc_route(&self, path: &str) -> Option<Arc<TenantPlugin>> {
        self.grpc.iter().find(|tp| tp.grpc_method(path).is_some()).cloned()
    }

    /// Every plugin of the set.
    pub fn all(&self) -> &[Arc<TenantPlugin>] {
        &self.plugins
    }

    /// The HTTP plugin whose prefix covers `path`, with the path below the prefix.
    pub fn http_route<'p>(&self, path: &'p str) -> Option<(Arc<TenantPlugin>, &'p str)> {
        self.http.iter().find_map(|(prefix, tp)| {
            let rest = path.strip_prefix(prefix.as_str())?;
            (rest.is_empty() || rest.starts_with('/')).then(|| (tp.clone(), if rest.is_empty() { "/" } else { rest }))
        })
    }

    /// Whether any observer could want a message: with `meta` (some keys) or without.
    pub fn observes_any(&self, has_meta: bool) -> bool {
        !self.observers.is_empty() && (self.observe_all || has_meta)
    }

    /// Whether any observer wants a message with this `meta`.
    pub fn observes(&self, meta: &Map<String, Value>) -> bool {
        !self.observers.is_empty() && (self.observe_all || self.observe_keys.iter().any(|k| meta.contains_key(k)))
    }

    pub fn observe(&self, active: &Active, msg: &Observed) {
        let meta = msg.meta.as_object();
        for tp in &self.observers {
            let interest = tp.interest.as_deref().unwrap_or_default();
            if interest.is_empty() || meta.is_some_and(|m| interest.iter().any(|k| m.contains_key(k))) {
                tp.observe(active, msg);
            }
        }
    }

    /// Add each extension's capability group and URI to `map/connect`
    /// capabilities, with the group's overrides for `participant_type`. An
    /// extension's `version` is its protocol's (the plugin's own when it
    /// declares none), `pluginVersion` the plugin's.
    pub fn advertise(&self, capabilities: &mut Value, participant_type: &str) {
        for tp in &self.plugins {
            let Some(d) = &tp.descriptor else { continue };
            if !d.capability_group.is_empty() {
                capabilities[&d.capability_group] = for_participant(&d.capabilities, participant_type);
            }
            if let Some(list) = capabilities.get_mut("extensions").and_then(Value::as_array_mut) {
                let version = d.protocol_version.as_ref().unwrap_or(&d.version);
                list.push(json!({"uri": d.uri, "name": d.name, "version": version, "pluginVersion": d.version, "methods": d.methods}));
            }
        }
    }
}

/// What the registry checks of a descriptor.
fn declared(d: &Descriptor) -> Declared<'_> {
    Declared { name: &d.name, uri: &d.uri, capability_group: &d.capability_group, methods: &d.methods, errors: d.error_range }
}

/// A capability group as a participant of this type sees it: the group's
/// `byParticipantType.<type>` entries over the rest (the key itself is not shown).
fn for_participant(group: &Value, participant_type: &str) -> Value {
    let Some(object) = group.as_object() else { return group.clone() };
    let mut shown = object.clone();
    if let Some(Value::Object(by_type)) = shown.remove(BY_PARTICIPANT_TYPE) {
        if let Some(Value::Object(overrides)) = by_type.get(participant_type) {
            shown.extend(overrides.clone());
        }
    }
    Value::Object(shown)
}

/// The key of a capability group's per-participant-type overrides (wit/rpc.wit).
const BY_PARTICIPANT_TYPE: &str = "byParticipantType";

impl Extensions for TenantPlugins {
    fn serves(&self, method: &str) -> bool {
        self.methods.contains_key(method)
    }

    fn call<'a>(&'a self, active: &'a Active, method: &'a str, params: String) -> BoxFuture<'a, Result<Answer, RpcError>> {
        Box::pin(async move {
            let plugin = self.method(method).ok_or_else(|| RpcError::method_not_found(method))?;
            plugin.call_rpc(active, super::caller_of(active), method, params, 0).await
        })
    }

    fn call_from<'a>(&'a self, from: &'a str, active: &'a Active, method: &'a str, params: String, hops: u8) -> BoxFuture<'a, Result<Answer, RpcError>> {
        Box::pin(async move {
            let plugin = self.method(method).ok_or_else(|| RpcError::method_not_found(method))?;
            if plugin.name() == from {
                return Err(RpcError::new(
                    map_protocol::rpc::codes::METHOD_NOT_FOUND,
                    format!("Plugin {from} cannot call its own method {method} through the router"),
                ));
            }
            plugin.call_rpc(active, super::caller_of(active), method, params, hops).await
        })
    }

    fn observes_any(&self, has_meta: bool) -> bool {
        TenantPlugins::observes_any(self, has_meta)
    }

    fn observes(&self, meta: &Map<String, Value>) -> bool {
        TenantPlugins::observes(self, meta)
    }

    fn observe(&self, active: &Active, message: &Observed) {
        TenantPlugins::observe(self, active, message)
    }

    fn advertise(&self, capabilities: &mut Value, participant_type: &str) {
        TenantPlugins::advertise(self, capabilities, participant_type)
    }

    fn data_filter(&self, key: &str) -> Option<DataFilterSpec> {
        self.plugins.iter().filter_map(|tp| tp.descriptor.as_ref()).flat_map(|d| &d.event_filters).find(|f| f.key == key).cloned()
    }

    fn resource_kinds(&self) -> Vec<String> {
        self.kinds.iter().map(|(kind, _)| kind.clone()).collect()
    }

    fn resources<'a>(&'a self, active: &'a Active, call: &'a ResourceCall) -> BoxFuture<'a, Result<Box<serde_json::value::RawValue>, RpcError>> {
        Box::pin(async move {
            let Some((_, plugin)) = self.kinds.iter().find(|(kind, _)| kind == call.kind()) else {
                return Err(RpcError::new(-32001, format!("Unknown resource type: {}", call.kind())));
            };
            plugin.call_resources(active, call).await
        })
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}
