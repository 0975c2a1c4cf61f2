//! What a plugin implements, one trait per exported interface, and the
//! macros that export a type as a component of one of the contract's worlds.
//!
//! | trait | interface | what the host calls |
//! |---|---|---|
//! | [`Extension`] | `rpc` | `describe`, then `handle` for every call of a declared method |
//! | [`Observer`] | `send-observer` | `interest`, then `on-send` for each delivered `map/send` |
//! | [`Lifecycle`] | `lifecycle` | `init` in every new instance, `on-timer` for due timers |
//! | [`HttpHandler`] | `http-handler` | `handle` for each request under the plugin's prefix |
//! | [`GrpcHandler`] | `grpc-handler` | `services`, then `open`/`message`/`half-close`/`closed` per call |
//! | [`GrpcUnary`] | `grpc-unary` | `unary-methods`, then `unary` once per call of one of them |
//! | [`Resources`](crate::resources::Resources) | `resources` | `kinds`, then `list` and `get` for `map/resources/*` |
//!
//! | macro | world | traits the type implements |
//! |---|---|---|
//! | [`export_extension!`](crate::export_extension) | `extension` | `Extension` |
//! | [`export_stateful_extension!`](crate::export_stateful_extension) | `stateful-extension` | `Extension`, `Lifecycle` |
//! | [`export_observer!`](crate::export_observer) | `observer` | `Observer` |
//! | [`export_intercepting_extension!`](crate::export_intercepting_extension) | `intercepting-extension` | `Extension`, `Observer` |
//! | [`export_http_extension!`](crate::export_http_extension) | `http-extension` | `HttpHandler` |
//! | [`export_http_service!`](crate::export_http_service) | `http-service` | `HttpHandler`, `Extension`, `Lifecycle` |
//! | [`export_grpc_extension!`](crate::export_grpc_extension) | `grpc-extension` | `GrpcHandler`, `Extension`, `Lifecycle` |
//! | [`export_resources!`](crate::export_resources) | `resources-provider` | `Resources`, beside one of the others |
//! | [`export_grpc_unary!`](crate::export_grpc_unary) | `grpc-unary-provider` | `GrpcUnary`, beside `export_grpc_extension!` |

use crate::bindings::map_gateway::plugin::grpc_types::{CallInfo, Service, Status};
use crate::bindings::map_gateway::plugin::types::{Caller, RpcError};
use crate::error::{ErrorRange, Result};
use crate::rpc::{Call, Describe, Methods, Reply};

/// A JSON-RPC extension: methods of its own namespace.
///
/// Guarantees of the glue: `describe` declares `ERRORS` as the error range
/// and, unless [`Describe::methods`] set a list, the names of `METHODS`;
/// an [`Error`](crate::Error) returned by `handle` is answered with its code
/// (storage failures with `ERRORS.storage()`), `data.details` and
/// `data.retryable`, and a code outside the range becomes -32603.
pub trait Extension {
    /// The error codes the extension answers with.
    const ERRORS: ErrorRange;
    /// The methods served.
    const METHODS: Methods;

    /// What the extension serves; runs at load and once per tenant, with that
    /// tenant's configuration (no caller).
    fn describe() -> Describe;

    /// One call of a declared method. The default routes it through
    /// `METHODS`; override it to check something first (a tenant switch,
    /// say) and then call `Self::METHODS.dispatch(call)`.
    fn handle(call: &Call<'_>) -> Result<Reply> {
        Self::METHODS.dispatch(call)
    }
}

/// A delivered `map/send` message, as an observer sees it (the contract's
/// `sent-message` record).
pub use crate::bindings::exports::map_gateway::plugin::send_observer::SentMessage;

/// Observes `map/send` traffic: after delivery, at most once, in send order.
pub trait Observer {
    /// Top-level `meta` keys of interest (e.g. `["mail"]`); empty: every message.
    fn interest() -> Vec<String> {
        Vec::new()
    }

    /// One delivered message; `caller` is the sender's session.
    fn on_send(caller: &Caller, message: SentMessage);
}

/// Instance start and timers (see `timers` for scheduling).
pub trait Lifecycle {
    /// Runs once in every new instance before anything else; `Err` means the
    /// instance is not used (and the call that needed it gets -32603).
    fn init() -> Result<(), String> {
        Ok(())
    }

    /// A timer this (tenant, plugin) scheduled is due.
    fn on_timer(timer: u64, tag: String) {
        crate::log::warn(&format!("timer {timer} ({tag}) fired, but the plugin does not handle timers"));
    }
}

/// One HTTP request under the plugin's prefix, with its whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    /// Below the plugin's prefix, starting with `/`.
    pub path: String,
    /// Without `?` ("" when none).
    pub query: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The answer to an [`HttpRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// `status` with a JSON body (`content-type: application/json`).
    pub fn json(status: u16, body: &serde_json::Value) -> HttpResponse {
        HttpResponse { status, headers: vec![("content-type".into(), "application/json".into())], body: body.to_string().into_bytes() }
    }

    /// `status` with a plain-text body.
    pub fn text(status: u16, body: &str) -> HttpResponse {
        HttpResponse { status, headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())], body: body.as_bytes().to_vec() }
    }
}

/// Plain HTTP endpoints under the prefix the deployment assigns.
pub trait HttpHandler {
    fn handle(request: HttpRequest) -> HttpResponse;
}

/// gRPC services on the gateway's listener; answers go out through
/// [`crate::grpc`] (`write`, `finish`).
pub trait GrpcHandler {
    fn services() -> Vec<Service>;
    fn open(call: CallInfo) -> Result<(), Status>;
    fn message(call: u64, body: Vec<u8>) -> Result<(), Status>;
    fn half_close(call: u64) -> Result<(), Status>;
    fn closed(call: u64);
}

/// Unary gRPC methods answered in one callback, without `open`, `message`,
/// `half-close` and `closed` (and without `grpc::write`/`finish`): the
/// request message in, the response message or an error status out. The
/// methods must be declared, unary, by the type's [`GrpcHandler::services`],
/// which still serves every other method.
pub trait GrpcUnary {
    /// The methods answered here, as `/package.Service/Method`.
    fn unary_methods() -> Vec<String>;
    fn unary(call: CallInfo, request: Vec<u8>) -> Result<Vec<u8>, Status>;
}

/// `Extension::handle` on the wire types.
#[doc(hidden)]
pub fn handle<T: Extension>(caller: &Caller, method: &str, params: &str) -> Result<String, RpcError> {
    T::handle(&Call::new(caller, method, params)).map(Reply::into_string).map_err(|e| e.into_rpc(&T::ERRORS))
}

mod glue {
    //! The generated `Guest` traits, implemented for every type that
    //! implements the SDK's trait of the same interface.

    use super::*;
    use crate::bindings::exports::map_gateway::plugin::{grpc_handler, grpc_unary, http_handler, lifecycle, rpc, send_observer};

    impl<T: Extension> rpc::Guest for T {
        fn describe() -> rpc::Descriptor {
            let mut d = T::describe();
            if let (Some(version), Some(group)) = (d.protocol_version.take(), d.capabilities.as_object_mut()) {
                group.insert("protocolVersion".into(), version.into());
            }
            rpc::Descriptor {
                name: d.name,
                version: d.version,
                uri: d.uri,
                capability_group: d.capability_group,
                capabilities: d.capabilities.to_string(),
                methods: if d.methods.is_empty() { T::METHODS.names() } else { d.methods },
                error_range: (T::ERRORS.first(), T::ERRORS.last()),
                event_filters: d
                    .event_filters
                    .into_iter()
                    .map(|f| rpc::EventFilter {
                        key: f.key,
                        event_types: f.event_types,
                        fields: f.fields.into_iter().map(|(name, paths)| rpc::FilterField { name, paths }).collect(),
                    })
                    .collect(),
            }
        }

        fn handle(caller: Caller, method: String, params: String) -> Result<String, RpcError> {
            handle::<T>(&caller, &method, &params)
        }
    }

    impl<T: Observer> send_observer::Guest for T {
        fn interest() -> Vec<String> {
            T::interest()
        }

        fn on_send(caller: Caller, message: SentMessage) {
            T::on_send(&caller, message)
        }
    }

    impl<T: Lifecycle> lifecycle::Guest for T {
        fn init() -> Result<(), String> {
            T::init()
        }

        fn on_timer(timer: u64, tag: String) {
            T::on_timer(timer, tag)
        }
    }

    impl<T: HttpHandler> http_handler::Guest for T {
        fn handle(r: http_handler::Request) -> http_handler::Response {
            let response = T::handle(HttpRequest { method: r.method, path: r.path, query: r.query, headers: r.headers, body: r.body });
            http_handler::Response { status: response.status, headers: response.headers, body: response.body }
        }
    }

    impl<T: GrpcHandler> grpc_handler::Guest for T {
        fn services() -> Vec<Service> {
            T::services()
        }

        fn open(call: CallInfo) -> Result<(), Status> {
            T::open(call)
        }

        fn message(call: u64, body: Vec<u8>) -> Result<(), Status> {
            T::message(call, body)
        }

        fn half_close(call: u64) -> Result<(), Status> {
            T::half_close(call)
        }

        fn closed(call: u64) {
            T::closed(call)
        }
    }

    impl<T: GrpcUnary> grpc_unary::Guest for T {
        fn unary_methods() -> Vec<String> {
            T::unary_methods()
        }

        fn unary(call: CallInfo, request: Vec<u8>) -> Result<Vec<u8>, Status> {
            T::unary(call, request)
        }
    }
}

// The export macros. Each exports the interfaces of its world (through the
// per-interface macros wit-bindgen made public) and embeds the world's
// component type, which tells `wit-component` what the component exports.

#[doc(hidden)]
#[macro_export]
macro_rules! __export_interface {
    ($interface:ident, $ty:ident) => {
        // Only a component has exports: natively (tests, fuzz targets) a
        // plugin crate links as a library, and its cdylib would fail to
        // link with the component's export names.
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export_cabi::$interface!(
            $ty with_types_in $crate::bindings::exports::map_gateway::plugin::$interface
        );
    };
}

/// Natively, what the exports would call, named so that it is not dead code.
#[doc(hidden)]
#[macro_export]
macro_rules! __native_exports {
    (rpc, $ty:ident) => {
        let _ = (<$ty as $crate::Extension>::describe, <$ty as $crate::Extension>::handle);
    };
    (send_observer, $ty:ident) => {
        let _ = (<$ty as $crate::Observer>::interest, <$ty as $crate::Observer>::on_send);
    };
    (lifecycle, $ty:ident) => {
        let _ = (<$ty as $crate::Lifecycle>::init, <$ty as $crate::Lifecycle>::on_timer);
    };
    (http_handler, $ty:ident) => {
        let _ = <$ty as $crate::HttpHandler>::handle;
    };
    (grpc_handler, $ty:ident) => {
        let _ = (<$ty as $crate::GrpcHandler>::services, <$ty as $crate::GrpcHandler>::open, <$ty as $crate::GrpcHandler>::message);
        let _ = (<$ty as $crate::GrpcHandler>::half_close, <$ty as $crate::GrpcHandler>::closed);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_world {
    ($ty:ident, $section:literal, $world:ident, [$($interface:ident),+]) => {
        $( $crate::__export_interface!($interface, $ty); )+
        #[cfg(not(target_arch = "wasm32"))]
        #[doc(hidden)]
        pub fn __map_plugin_sdk_native_exports() {
            $( $crate::__native_exports!($interface, $ty); )+
        }
        const _: () = {
            #[cfg(target_arch = "wasm32")]
            #[unsafe(link_section = $section)]
            #[doc(hidden)]
            pub static __MAP_PLUGIN_SDK_COMPONENT_TYPE: [u8; $crate::bindings::worlds::$world.len()] = $crate::bindings::worlds::$world;
        };
    };
}

/// Export a type implementing [`Extension`] as a component of the world
/// `extension`: `map_plugin_sdk::export_extension!(Notes);`
#[macro_export]
macro_rules! export_extension {
    ($ty:ident) => {
        $crate::__export_world!($ty, "component-type:map-plugin-sdk:extension", EXTENSION, [rpc]);
    };
}

/// Export a type implementing [`Extension`] and [`Lifecycle`] (world
/// `stateful-extension`; run it as a `singleton` to keep memory between calls).
#[macro_export]
macro_rules! export_stateful_extension {
    ($ty:ident) => {
        $crate::__export_world!($ty, "component-type:map-plugin-sdk:stateful-extension", STATEFUL_EXTENSION, [rpc, lifecycle]);
    };
}

/// Export a type implementing [`Observer`] (world `observer`).
#[macro_export]
macro_rules! export_observer {
    ($ty:ident) => {
        $crate::__export_world!($ty, "component-type:map-plugin-sdk:observer", OBSERVER, [send_observer]);
    };
}

/// Export a type implementing [`Extension`] and [`Observer`] (world
/// `intercepting-extension`).
#[macro_export]
macro_rules! export_intercepting_extension {
    ($ty:ident) => {
        $crate::__export_world!($ty, "component-type:map-plugin-sdk:intercepting-extension", INTERCEPTING_EXTENSION, [rpc, send_observer]);
    };
}

/// Export a type implementing [`HttpHandler`] (world `http-extension`).
#[macro_export]
macro_rules! export_http_extension {
    ($ty:ident) => {
        $crate::__export_world!($ty, "component-type:map-plugin-sdk:http-extension", HTTP_EXTENSION, [http_handler]);
    };
}

/// Export a type implementing [`HttpHandler`], [`Extension`] and
/// [`Lifecycle`] (world `http-service`).
#[macro_export]
macro_rules! export_http_service {
    ($ty:ident) => {
        $crate::__export_world!($ty, "component-type:map-plugin-sdk:http-service", HTTP_SERVICE, [http_handler, rpc, lifecycle]);
    };
}

/// Export a type implementing [`GrpcHandler`], [`Extension`] and
/// [`Lifecycle`] (world `grpc-extension`).
#[macro_export]
macro_rules! export_grpc_extension {
    ($ty:ident) => {
        $crate::__export_world!($ty, "component-type:map-plugin-sdk:grpc-extension", GRPC_EXTENSION, [grpc_handler, rpc, lifecycle]);
    };
}

/// One interface exported beside another world's, with its own world's
/// component type in a section of its own (which the component's linker
/// merges with the other world's), and natively a function naming what the
/// export would call.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_beside {
    ($ty:ident, $interface:ident, $section:literal, $world:ident, $native:ident, [$($called:expr),+]) => {
        $crate::__export_interface!($interface, $ty);
        #[cfg(not(target_arch = "wasm32"))]
        #[doc(hidden)]
        pub fn $native() {
            let _ = ($($called),+);
        }
        const _: () = {
            #[cfg(target_arch = "wasm32")]
            #[unsafe(link_section = $section)]
            #[doc(hidden)]
            pub static __MAP_PLUGIN_SDK_COMPONENT_TYPE: [u8; $crate::bindings::worlds::$world.len()] = $crate::bindings::worlds::$world;
        };
    };
}

/// Export a type implementing [`Resources`](crate::resources::Resources)
/// (world `resources-provider`), beside the export of another world:
/// `export_extension!(Tasks); export_resources!(Tasks);`. Its component
/// type goes in a section of its own.
#[macro_export]
macro_rules! export_resources {
    ($ty:ident) => {
        $crate::__export_beside!(
            $ty,
            resources,
            "component-type:map-plugin-sdk:resources-provider",
            RESOURCES_PROVIDER,
            __map_plugin_sdk_native_resources,
            [<$ty as $crate::resources::Resources>::kinds, <$ty as $crate::resources::Resources>::list, <$ty as $crate::resources::Resources>::get]
        );
    };
}

/// Export a type implementing [`GrpcUnary`] (world `grpc-unary-provider`)
/// beside its [`export_grpc_extension!`](crate::export_grpc_extension):
/// `export_grpc_extension!(Hub); export_grpc_unary!(Hub);`. Like
/// [`export_resources!`](crate::export_resources), its component type goes
/// in a section of its own.
#[macro_export]
macro_rules! export_grpc_unary {
    ($ty:ident) => {
        $crate::__export_beside!(
            $ty,
            grpc_unary,
            "component-type:map-plugin-sdk:grpc-unary-provider",
            GRPC_UNARY_PROVIDER,
            __map_plugin_sdk_native_grpc_unary,
            [<$ty as $crate::GrpcUnary>::unary_methods, <$ty as $crate::GrpcUnary>::unary]
        );
    };
}
