//! What the core needs from extensions (the plugins, or anything else that
//! serves methods of its own): defined here, implemented outside, so the
//! core knows no extension by name.

use std::any::Any;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::events::DataFilterSpec;
use super::model::Observed;
use super::outbox::Frame;
use super::{Active, Tenants};
use map_config::Config;
use map_protocol::rpc::RpcError;

/// A result, and notifications for the caller to write right after it.
pub type Answer = (Box<RawValue>, Vec<Frame>);

/// A call of the resources extension for the extension that provides the type.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ResourceCall {
    /// `filter` is a JSON object's text; `limit` 1..=500.
    List {
        kind: String,
        filter: String,
        cursor: Option<String>,
        limit: u32,
    },
    Get {
        kind: String,
        id: String,
    },
}

impl ResourceCall {
    pub fn kind(&self) -> &str {
        match self {
            ResourceCall::List { kind, .. } | ResourceCall::Get { kind, .. } => kind,
        }
    }
}

/// One tenant's extensions.
pub trait Extensions: Send + Sync + 'static {
    /// Whether an extension serves this (non-`map/`) method.
    fn serves(&self, method: &str) -> bool;

    /// Call a method for a session; `params` is a JSON object's text
    /// (owned: the call takes it to the plugin without a copy).
    fn call<'a>(&'a self, active: &'a Active, method: &'a str, params: String) -> BoxFuture<'a, Result<Answer, RpcError>>;

    /// A call made by the extension `from` while it handles a call `hops`
    /// deep: as `call`, refusing `from`'s own methods.
    fn call_from<'a>(&'a self, from: &'a str, active: &'a Active, method: &'a str, params: String, hops: u8) -> BoxFuture<'a, Result<Answer, RpcError>>;

    /// Whether any observer could want a send with (or without) `meta`.
    fn observes_any(&self, has_meta: bool) -> bool;

    /// Whether any observer wants a send with this `meta`.
    fn observes(&self, meta: &Map<String, Value>) -> bool;

    /// Hand a delivered message to the observers that want it; never blocks.
    fn observe(&self, active: &Active, message: &Observed);

    /// Add the extensions' capabilities, as they apply to a participant of
    /// this type, to a `map/connect` result.
    fn advertise(&self, capabilities: &mut Value, participant_type: &str);

    /// The subscription filter key an extension declared over its events' data.
    fn data_filter(&self, key: &str) -> Option<DataFilterSpec>;

    /// The resource types the extensions provide, in order.
    fn resource_kinds(&self) -> Vec<String> {
        Vec::new()
    }

    /// A resources call for `active`, answered by the extension providing its
    /// type: the page `{resources, cursor, total?}`, or the resource or `null`.
    fn resources<'a>(&'a self, _active: &'a Active, call: &'a ResourceCall) -> BoxFuture<'a, Result<Box<RawValue>, RpcError>> {
        Box::pin(async move { Err(RpcError::new(-32001, format!("Unknown resource type: {}", call.kind()))) })
    }

    /// The concrete set, for the layer that built it.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// No extensions at all.
pub struct NoExtensions;

impl Extensions for NoExtensions {
    fn serves(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, _: &'a Active, method: &'a str, _: String) -> BoxFuture<'a, Result<Answer, RpcError>> {
        Box::pin(async move { Err(RpcError::method_not_found(method)) })
    }
    fn call_from<'a>(&'a self, _: &'a str, _: &'a Active, method: &'a str, _: String, _: u8) -> BoxFuture<'a, Result<Answer, RpcError>> {
        Box::pin(async move { Err(RpcError::method_not_found(method)) })
    }
    fn observes_any(&self, _: bool) -> bool {
        false
    }
    fn observes(&self, _: &Map<String, Value>) -> bool {
        false
    }
    fn observe(&self, _: &Active, _: &Observed) {}
    fn advertise(&self, _: &mut Value, _: &str) {}
    fn data_filter(&self, _: &str) -> Option<DataFilterSpec> {
        None
    }
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// What loads extensions and binds them to tenants (the plugin host).
pub trait ExtensionHost: Send + Sync + 'static {
    /// Load what `config` names and give every tenant its new set.
    fn apply<'a>(&'a self, config: &'a Config, tenants: &'a Tenants) -> BoxFuture<'a, anyhow::Result<()>>;

    /// Remember a failed reload, for `status`.
    fn note_error(&self, error: &anyhow::Error);

    /// What is loaded, for the admin API.
    fn status(&self) -> BoxFuture<'_, Value>;

    /// The digest of each loaded component, by plugin (see `reloads::Pins`).
    fn digests(&self) -> std::collections::BTreeMap<String, String>;

    /// Whether it can serve: `Err` says what is not ready (for `/readyz`).
    fn ready(&self) -> BoxFuture<'_, Result<(), String>>;
}
