//! What a component exports, found and bound per interface (of the 0.2.x
//! contract or the frozen 0.1.0 one, and the standard
//! `wasi:http/incoming-handler`), and one way to call any of it.

use wasmtime::component::{Instance, InstancePre};
use wasmtime::Store;
use wasmtime_wasi_http::p2::bindings::exports::wasi::http::incoming_handler;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::WasiHttpView;

use super::bindings::{contract_0_1, guest, map_gateway::plugin::grpc_types, Caller, RpcError};
use super::state::PluginState;

pub use grpc_types::{CallInfo, Service, Status};
pub use guest::resources::{Item as ResourceItem, Page as ResourcePage};
pub use guest::send_observer::SentMessage;

/// Interfaces of the contract a component may export, by version.
const CONTRACT_0_2: &str = "@0.2.";
const CONTRACT_0_1: &str = "@0.1.";
const PACKAGE: &str = "map-gateway:plugin/";
/// The standard HTTP handler (`wasi:http/proxy`), any 0.2.x.
const WASI_HTTP_HANDLER: &str = "wasi:http/incoming-handler@0.2.";

/// Where a `wasi:http` handler's response head goes.
pub type Respond = tokio::sync::oneshot::Sender<Result<hyper::Response<HyperOutgoingBody>, ErrorCode>>;

/// What an `rpc` export declares (either version).
#[derive(Debug, Clone)]
pub struct Described {
    pub name: String,
    pub version: String,
    pub uri: String,
    pub capability_group: String,
    pub capabilities: String,
    pub methods: Vec<String>,
    pub error_range: (i64, i64),
    /// (key, event types, [(field, [dot paths])]).
    pub event_filters: Vec<(String, String, Vec<(String, Vec<String>)>)>,
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

/// One call into a component.
pub enum Invocation {
    Describe,
    Interest,
    Services,
    Init,
    Rpc { caller: Caller, method: String, params: String },
    Observe { caller: Caller, message: SentMessage },
    Http(HttpRequest),
    Timer { id: u64, tag: String },
    GrpcOpen(CallInfo),
    GrpcMessage(u64, Vec<u8>),
    GrpcHalfClose(u64),
    GrpcClosed(u64),
    UnaryMethods,
    GrpcUnary(CallInfo, Vec<u8>),
    ResourceKinds,
    ResourceList { caller: Caller, kind: String, filter: String, cursor: Option<String>, limit: u32 },
    ResourceGet { caller: Caller, kind: String, id: String },
}

impl Invocation {
    /// What kind of call this is, for its trace span.
    pub fn kind(&self) -> &'static str {
        match self {
            Invocation::Describe | Invocation::Interest | Invocation::Services | Invocation::UnaryMethods | Invocation::ResourceKinds => "describe",
            Invocation::Init => "init",
            Invocation::Rpc { .. } => "rpc",
            Invocation::Observe { .. } => "observe",
            Invocation::Http(_) => "http",
            Invocation::Timer { .. } => "timer",
            Invocation::GrpcOpen(_) | Invocation::GrpcMessage(..) | Invocation::GrpcHalfClose(_) | Invocation::GrpcClosed(_) | Invocation::GrpcUnary(..) => {
                "grpc"
            }
            Invocation::ResourceList { .. } | Invocation::ResourceGet { .. } => "resources",
        }
    }

    /// The gRPC call a callback is about.
    pub fn grpc_call(&self) -> Option<u64> {
        match self {
            Invocation::GrpcOpen(info) | Invocation::GrpcUnary(info, _) => Some(info.id),
            Invocation::GrpcMessage(id, _) | Invocation::GrpcHalfClose(id) | Invocation::GrpcClosed(id) => Some(*id),
            _ => None,
        }
    }
}

/// What the component returned.
pub enum Returned {
    Described(Described),
    Interest(Vec<String>),
    Services(Vec<Service>),
    Init(Result<(), String>),
    Rpc(Result<String, RpcError>),
    Http(HttpResponse),
    Grpc(Result<(), Status>),
    UnaryMethods(Vec<String>),
    GrpcUnary(Result<Vec<u8>, Status>),
    Kinds(Vec<String>),
    ResourcePage(Result<ResourcePage, RpcError>),
    Resource(Result<Option<ResourceItem>, RpcError>),
    Done,
}

/// An interface bound from one version of the contract or the other.
enum Versioned<A, B> {
    Contract0_2(A),
    Contract0_1(B),
}

/// The export indices of a component, looked up once at load.
pub struct Exports {
    rpc: Option<Versioned<guest::rpc::GuestIndices, contract_0_1::guest::rpc::GuestIndices>>,
    observer: Option<Versioned<guest::send_observer::GuestIndices, contract_0_1::guest::interceptor::GuestIndices>>,
    http: Option<Versioned<guest::http_handler::GuestIndices, contract_0_1::http::exports::map_gateway::plugin::http_handler::GuestIndices>>,
    grpc: Option<guest::grpc_handler::GuestIndices>,
    unary: Option<guest::grpc_unary::GuestIndices>,
    lifecycle: Option<guest::lifecycle::GuestIndices>,
    resources: Option<guest::resources::GuestIndices>,
    incoming: Option<incoming_handler::GuestIndices>,
}

/// The exports loaded from one instance.
pub struct Bound {
    rpc: Option<Versioned<guest::rpc::Guest, contract_0_1::guest::rpc::Guest>>,
    observer: Option<Versioned<guest::send_observer::Guest, contract_0_1::guest::interceptor::Guest>>,
    http: Option<Versioned<guest::http_handler::Guest, contract_0_1::http::exports::map_gateway::plugin::http_handler::Guest>>,
    grpc: Option<guest::grpc_handler::Guest>,
    unary: Option<guest::grpc_unary::Guest>,
    lifecycle: Option<guest::lifecycle::Guest>,
    resources: Option<guest::resources::Guest>,
    incoming: Option<incoming_handler::Guest>,
}

macro_rules! load {
    ($field:expr, $store:expr, $instance:expr) => {
        match &$field {
            None => None,
            Some(Versioned::Contract0_2(i)) => Some(Versioned::Contract0_2(i.load(&mut *$store, $instance)?)),
            Some(Versioned::Contract0_1(i)) => Some(Versioned::Contract0_1(i.load(&mut *$store, $instance)?)),
        }
    };
}

impl Exports {
    /// Bind every interface of the contract the component exports. An
    /// export of the package that is unknown, or that does not have the
    /// functions its interface names, is an error: nothing is ignored.
    pub fn find(pre: &InstancePre<PluginState>) -> anyhow::Result<Exports> {
        let mut exports = Exports { rpc: None, observer: None, http: None, grpc: None, unary: None, lifecycle: None, resources: None, incoming: None };
        let component = pre.component();
        let names: Vec<String> = component.component_type().exports(component.engine()).map(|(name, _)| name.to_string()).collect();
        for name in names {
            if name.starts_with(WASI_HTTP_HANDLER) {
                exports.incoming = Some(incoming_handler::GuestIndices::new(pre).map_err(|e| anyhow::anyhow!("export {name}: {e:#}"))?);
                continue;
            }
            let Some(rest) = name.strip_prefix(PACKAGE) else { continue };
            let (interface, version) = rest.split_once('@').map(|(i, v)| (i, format!("@{v}"))).unwrap_or((rest, String::new()));
            let is_0_2 = version.starts_with(CONTRACT_0_2);
            let is_0_1 = version.starts_with(CONTRACT_0_1);
            let bad = |e: wasmtime::Error| anyhow::anyhow!("export {name}: {e:#}");
            match (interface, is_0_2, is_0_1) {
                ("rpc", true, _) => exports.rpc = Some(Versioned::Contract0_2(guest::rpc::GuestIndices::new(pre).map_err(bad)?)),
                ("rpc", _, true) => exports.rpc = Some(Versioned::Contract0_1(contract_0_1::guest::rpc::GuestIndices::new(pre).map_err(bad)?)),
                ("send-observer", true, _) => exports.observer = Some(Versioned::Contract0_2(guest::send_observer::GuestIndices::new(pre).map_err(bad)?)),
                ("interceptor", _, true) => {
                    exports.observer = Some(Versioned::Contract0_1(contract_0_1::guest::interceptor::GuestIndices::new(pre).map_err(bad)?))
                }
                ("http-handler", true, _) => exports.http = Some(Versioned::Contract0_2(guest::http_handler::GuestIndices::new(pre).map_err(bad)?)),
                ("http-handler", _, true) => {
                    exports.http =
                        Some(Versioned::Contract0_1(contract_0_1::http::exports::map_gateway::plugin::http_handler::GuestIndices::new(pre).map_err(bad)?))
                }
                ("grpc-handler", true, _) => exports.grpc = Some(guest::grpc_handler::GuestIndices::new(pre).map_err(bad)?),
                ("grpc-unary", true, _) => exports.unary = Some(guest::grpc_unary::GuestIndices::new(pre).map_err(bad)?),
                ("lifecycle", true, _) => exports.lifecycle = Some(guest::lifecycle::GuestIndices::new(pre).map_err(bad)?),
                ("resources", true, _) => exports.resources = Some(guest::resources::GuestIndices::new(pre).map_err(bad)?),
                _ => anyhow::bail!("the component exports {name}, which this gateway does not know (it serves map-gateway:plugin 0.1 and 0.2)"),
            }
        }
        let serves = [exports.rpc.is_some(), exports.observer.is_some(), exports.http.is_some(), exports.grpc.is_some(), exports.resources.is_some()];
        if !serves.contains(&true) && exports.incoming.is_none() {
            anyhow::bail!(
                "the component exports none of map-gateway:plugin/rpc, send-observer, http-handler, grpc-handler or resources, nor wasi:http/incoming-handler"
            );
        }
        if exports.http.is_some() && exports.incoming.is_some() {
            anyhow::bail!("the component exports both map-gateway:plugin/http-handler and wasi:http/incoming-handler: one serves its prefix");
        }
        if exports.unary.is_some() && exports.grpc.is_none() {
            anyhow::bail!("the component exports map-gateway:plugin/grpc-unary without grpc-handler, which declares its services");
        }
        Ok(exports)
    }

    pub fn load(&self, store: &mut Store<PluginState>, instance: &Instance) -> wasmtime::Result<Bound> {
        Ok(Bound {
            rpc: load!(self.rpc, store, instance),
            observer: load!(self.observer, store, instance),
            http: load!(self.http, store, instance),
            grpc: self.grpc.as_ref().map(|i| i.load(&mut *store, instance)).transpose()?,
            unary: self.unary.as_ref().map(|i| i.load(&mut *store, instance)).transpose()?,
            lifecycle: self.lifecycle.as_ref().map(|i| i.load(&mut *store, instance)).transpose()?,
            resources: self.resources.as_ref().map(|i| i.load(&mut *store, instance)).transpose()?,
            incoming: self.incoming.as_ref().map(|i| i.load(&mut *store, instance)).transpose()?,
        })
    }

    pub fn rpc(&self) -> bool {
        self.rpc.is_some()
    }
    pub fn observer(&self) -> bool {
        self.observer.is_some()
    }
    pub fn http(&self) -> bool {
        self.http.is_some()
    }
    pub fn grpc(&self) -> bool {
        self.grpc.is_some()
    }
    pub fn unary(&self) -> bool {
        self.unary.is_some()
    }
    pub fn lifecycle(&self) -> bool {
        self.lifecycle.is_some()
    }
    pub fn resources(&self) -> bool {
        self.resources.is_some()
    }
    /// It serves HTTP through the standard `wasi:http/incoming-handler`.
    pub fn incoming(&self) -> bool {
        self.incoming.is_some()
    }

    /// The interfaces found, for logs (`rpc@0.2`, `interceptor@0.1`, …).
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        let mut push = |present: bool, is_0_1: bool, name: &'static str, old: &'static str| {
            if present {
                names.push(if is_0_1 { old } else { name });
            }
        };
        push(self.rpc.is_some(), matches!(self.rpc, Some(Versioned::Contract0_1(_))), "rpc@0.2", "rpc@0.1");
        push(self.observer.is_some(), matches!(self.observer, Some(Versioned::Contract0_1(_))), "send-observer@0.2", "interceptor@0.1");
        push(self.http.is_some(), matches!(self.http, Some(Versioned::Contract0_1(_))), "http-handler@0.2", "http-handler@0.1");
        push(self.grpc.is_some(), false, "grpc-handler@0.2", "");
        push(self.unary.is_some(), false, "grpc-unary@0.2", "");
        push(self.lifecycle.is_some(), false, "lifecycle@0.2", "");
        push(self.resources.is_some(), false, "resources@0.2", "");
        push(self.incoming.is_some(), false, "wasi:http/incoming-handler@0.2", "");
        names
    }
}

/// The component does not export what a call needs.
#[derive(Debug)]
pub struct NotExported(pub &'static str);

impl std::fmt::Display for NotExported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the plugin does not export {}", self.0)
    }
}

impl std::error::Error for NotExported {}

fn missing<T>(what: &'static str) -> wasmtime::Result<T> {
    Err(NotExported(what).into())
}

/// Each version's bindings have their own descriptor type; the fields are the same.
macro_rules! described {
    ($d:expr) => {{
        let d = $d;
        Described {
            name: d.name,
            version: d.version,
            uri: d.uri,
            capability_group: d.capability_group,
            capabilities: d.capabilities,
            methods: d.methods,
            error_range: d.error_range,
            event_filters: Vec::new(),
        }
    }};
}

impl Bound {
    /// Make one call; the store must be armed (deadline, caller) beforehand.
    pub async fn invoke(&self, store: &mut Store<PluginState>, invocation: Invocation) -> wasmtime::Result<Returned> {
        use Invocation as I;
        Ok(match invocation {
            I::Describe => Returned::Described(self.describe(store).await?),
            I::Interest => Returned::Interest(self.interest(store).await?),
            I::Services => Returned::Services(self.grpc()?.call_services(&mut *store).await?),
            I::Init => Returned::Init(match &self.lifecycle {
                Some(g) => g.call_init(&mut *store).await?,
                None => Ok(()),
            }),
            I::Rpc { caller, method, params } => Returned::Rpc(self.handle_rpc(store, caller, method, params).await?),
            I::Observe { caller, message } => {
                self.on_send(store, caller, message).await?;
                Returned::Done
            }
            I::Http(r) => Returned::Http(self.handle_http(store, r).await?),
            I::Timer { id, tag } => {
                self.lifecycle()?.call_on_timer(&mut *store, id, &tag).await?;
                Returned::Done
            }
            I::GrpcOpen(info) => Returned::Grpc(self.grpc()?.call_open(&mut *store, &info).await?),
            I::GrpcMessage(call, body) => Returned::Grpc(self.grpc()?.call_message(&mut *store, call, &body).await?),
            I::GrpcHalfClose(call) => Returned::Grpc(self.grpc()?.call_half_close(&mut *store, call).await?),
            I::GrpcClosed(call) => {
                self.grpc()?.call_closed(&mut *store, call).await?;
                Returned::Done
            }
            I::UnaryMethods => Returned::UnaryMethods(self.unary()?.call_unary_methods(&mut *store).await?),
            I::GrpcUnary(info, request) => Returned::GrpcUnary(self.unary()?.call_unary(&mut *store, &info, &request).await?),
            I::ResourceKinds => Returned::Kinds(self.resources()?.call_kinds(&mut *store).await?),
            I::ResourceList { caller, kind, filter, cursor, limit } => {
                Returned::ResourcePage(self.resources()?.call_list(&mut *store, &caller, &kind, &filter, cursor.as_deref(), limit).await?)
            }
            I::ResourceGet { caller, kind, id } => Returned::Resource(self.resources()?.call_get(&mut *store, &caller, &kind, &id).await?),
        })
    }

    /// `rpc.describe`; only the 0.2 contract declares event filters.
    async fn describe(&self, store: &mut Store<PluginState>) -> wasmtime::Result<Described> {
        Ok(match &self.rpc {
            Some(Versioned::Contract0_2(g)) => {
                let d = g.call_describe(&mut *store).await?;
                let filters = d
                    .event_filters
                    .iter()
                    .map(|f| (f.key.clone(), f.event_types.clone(), f.fields.iter().map(|x| (x.name.clone(), x.paths.clone())).collect()))
                    .collect();
                Described { event_filters: filters, ..described!(d) }
            }
            Some(Versioned::Contract0_1(g)) => described!(g.call_describe(&mut *store).await?),
            None => return missing("rpc"),
        })
    }

    /// `send-observer.interest` (`interceptor.interest` in 0.1).
    async fn interest(&self, store: &mut Store<PluginState>) -> wasmtime::Result<Vec<String>> {
        match &self.observer {
            Some(Versioned::Contract0_2(g)) => g.call_interest(&mut *store).await,
            Some(Versioned::Contract0_1(g)) => g.call_interest(&mut *store).await,
            None => missing("send-observer"),
        }
    }

    async fn handle_rpc(&self, store: &mut Store<PluginState>, caller: Caller, method: String, params: String) -> wasmtime::Result<Result<String, RpcError>> {
        match &self.rpc {
            Some(Versioned::Contract0_2(g)) => g.call_handle(&mut *store, &caller, &method, &params).await,
            Some(Versioned::Contract0_1(g)) => Ok(g.call_handle(&mut *store, &caller_0_1(caller), &method, &params).await?.map_err(error_from_0_1)),
            None => missing("rpc"),
        }
    }

    /// `send-observer.on-send` (`interceptor.on-send` in 0.1).
    async fn on_send(&self, store: &mut Store<PluginState>, caller: Caller, m: SentMessage) -> wasmtime::Result<()> {
        match &self.observer {
            Some(Versioned::Contract0_2(g)) => g.call_on_send(&mut *store, &caller, &m).await,
            Some(Versioned::Contract0_1(g)) => g.call_on_send(&mut *store, &caller_0_1(caller), &sent_message_0_1(m)).await,
            None => missing("send-observer"),
        }
    }

    async fn handle_http(&self, store: &mut Store<PluginState>, r: HttpRequest) -> wasmtime::Result<HttpResponse> {
        match &self.http {
            Some(Versioned::Contract0_2(g)) => {
                let req = guest::http_handler::Request { method: r.method, path: r.path, query: r.query, headers: r.headers, body: r.body };
                let resp = g.call_handle(&mut *store, &req).await?;
                Ok(HttpResponse { status: resp.status, headers: resp.headers, body: resp.body })
            }
            Some(Versioned::Contract0_1(g)) => {
                use contract_0_1::http::exports::map_gateway::plugin::http_handler::Request;
                let req = Request { method: r.method, path: r.path, query: r.query, headers: r.headers, body: r.body };
                let resp = g.call_handle(&mut *store, &req).await?;
                Ok(HttpResponse { status: resp.status, headers: resp.headers, body: resp.body })
            }
            None => missing("http-handler"),
        }
    }

    /// `wasi:http/incoming-handler.handle`: the request and where its
    /// response goes become resources of the instance; the call returns
    /// when the handler does (after its body, for most handlers).
    pub async fn handle_incoming<B>(&self, store: &mut Store<PluginState>, request: hyper::Request<B>, respond: Respond) -> wasmtime::Result<()>
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<wasmtime_wasi_http::Error>,
    {
        let handler = self.incoming.as_ref().ok_or(NotExported("wasi:http/incoming-handler"))?;
        let mut http = store.data_mut().http();
        let request = http.new_incoming_request(Scheme::Http, request)?;
        let out = http.new_response_outparam(respond)?;
        handler.call_handle(&mut *store, request, out).await
    }

    fn grpc(&self) -> wasmtime::Result<&guest::grpc_handler::Guest> {
        self.grpc.as_ref().ok_or_else(|| NotExported("grpc-handler").into())
    }

    fn unary(&self) -> wasmtime::Result<&guest::grpc_unary::Guest> {
        self.unary.as_ref().ok_or_else(|| NotExported("grpc-unary").into())
    }

    fn lifecycle(&self) -> wasmtime::Result<&guest::lifecycle::Guest> {
        self.lifecycle.as_ref().ok_or_else(|| NotExported("lifecycle").into())
    }

    fn resources(&self) -> wasmtime::Result<&guest::resources::Guest> {
        self.resources.as_ref().ok_or_else(|| NotExported("resources").into())
    }
}

fn caller_0_1(c: Caller) -> contract_0_1::map_gateway::plugin::types::Caller {
    contract_0_1::map_gateway::plugin::types::Caller {
        tenant: c.tenant,
        participant_id: c.participant_id,
        participant_type: c.participant_type,
        session_id: c.session_id,
        agent_ids: c.agent_ids,
        capabilities: c.capabilities,
    }
}

fn error_from_0_1(e: contract_0_1::map_gateway::plugin::types::RpcError) -> RpcError {
    RpcError { code: e.code, message: e.message, data: e.data }
}

fn sent_message_0_1(m: SentMessage) -> contract_0_1::guest::interceptor::SentMessage {
    contract_0_1::guest::interceptor::SentMessage {
        id: m.id,
        from: m.from,
        to: m.to,
        timestamp: m.timestamp,
        payload: m.payload,
        meta: m.meta,
        delivered: m.delivered,
    }
}
