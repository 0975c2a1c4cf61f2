//! The UAP v1 hub as a gateway plugin (world `grpc-extension`, run as a
//! singleton): execution agents connect over gRPC (`uap.v1.AgentHub`), MAP
//! participants submit test and translation jobs with `uap/*` methods and
//! watch them as `uap.*` events, and list and read them as resources of the
//! type `x-uap/job` (`map/resources/*`, `resources`). Jobs, their history
//! and registered agents live in the tenant's store and survive restarts.

mod error;
// UAP decoding as a fuzz target (`fuzz/`), native only.
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
pub mod fuzzing;
mod grpc;
mod hub;
mod methods;
mod model;
mod proto;
mod repo;
mod resources;
mod settings;
mod values;

use map_plugin_sdk::grpc::{CallInfo, Service, Status};
use map_plugin_sdk::{log, Call, Describe, ErrorRange, EventFilter, Extension, GrpcHandler, GrpcUnary, Lifecycle, Methods, Reply, Result};

struct Uap;

impl Extension for Uap {
    const ERRORS: ErrorRange = error::ERRORS;
    const METHODS: Methods = Methods::new(&[
        ("uap/submit", methods::submit),
        ("uap/get", methods::get),
        ("uap/list", methods::list),
        ("uap/cancel", methods::cancel),
        ("uap/agents", methods::agents),
    ]);

    fn describe() -> Describe {
        // Experimental (in no MAP registry): `x-uap`, URI `x-uap:1`.
        Describe::new("x-uap", env!("CARGO_PKG_VERSION"))
            .capabilities(serde_json::json!({"enabled": true, "grpcService": grpc::SERVICE}))
            // `map/subscribe {filter: {uap: {jobId}}}`.
            .event_filter(EventFilter::new("uap", "uap.*").field("jobId", &["jobId"]))
    }

    fn handle(call: &Call) -> Result<Reply> {
        Self::METHODS.dispatch(call)
    }
}

impl Lifecycle for Uap {
    fn init() -> std::result::Result<(), String> {
        hub::recover().map_err(|e| format!("settling jobs left by an earlier instance: {}", e.message()))
    }

    fn on_timer(_timer: u64, tag: String) {
        let Some(session) = tag.strip_prefix("accept/") else { return };
        match hub::with(|h| h.lapse(session)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) | Err(e) => log::error(&format!("acceptance timeout of {session}: {}", e.message())),
        }
    }
}

impl GrpcHandler for Uap {
    fn services() -> Vec<Service> {
        grpc::services()
    }

    fn open(call: CallInfo) -> std::result::Result<(), Status> {
        grpc::open(call)
    }

    fn message(call: u64, body: Vec<u8>) -> std::result::Result<(), Status> {
        grpc::message(call, body)
    }

    fn half_close(call: u64) -> std::result::Result<(), Status> {
        grpc::half_close(call)
    }

    fn closed(call: u64) {
        grpc::closed(call)
    }
}

impl GrpcUnary for Uap {
    fn unary_methods() -> Vec<String> {
        vec![grpc::REGISTER.into()]
    }

    fn unary(_call: CallInfo, request: Vec<u8>) -> std::result::Result<Vec<u8>, Status> {
        grpc::register(&request)
    }
}

use resources::JobResources;

map_plugin_sdk::export_grpc_extension!(Uap);
map_plugin_sdk::export_grpc_unary!(Uap);
map_plugin_sdk::export_resources!(JobResources);
