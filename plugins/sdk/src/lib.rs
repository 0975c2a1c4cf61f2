//! The Rust SDK for map-gateway plugins.
//!
//! It binds the contract in the repository's `wit/` (package
//! `map-gateway:plugin`) once, and adds what every plugin would otherwise
//! write again:
//!
//! - [`Extension`] and [`Methods`]: a table of `(method, handler)`, routed by
//!   name (unknown methods are -32601), described by [`Describe`];
//! - [`Call::params`]: params decoded into a serde type, -32602 with serde's
//!   message when they do not fit ([`params`] has the checks around it);
//! - [`Error`] and [`ErrorRange`]: codes of the extension's declared range
//!   (checked at build time), JSON-RPC codes, storage failures, `details`
//!   and `retryable`, turned into the WIT `rpc-error`;
//! - [`store`]: typed [`Collection`]s, key [`Range`](store::Range)s read page
//!   by page, [`get_many`](Collection::get_many) in one call, atomic
//!   [`Batch`]es with compare-and-swap and counters, and a [`retry`] loop;
//! - [`ids`]: time-ordered `prefix-<ULID>` ids and the clock;
//! - [`events`], [`log`], [`config`], [`router`], [`timers`], [`grpc`],
//!   [`metrics`]: the other imports, with JSON handled;
//! - [`http`]: a JSON POST to an allowed host through `wasi:http`;
//! - [`resources`]: resource types for `map/resources/list` and `get`.
//!
//! A whole extension:
//!
//! ```no_run
//! use map_plugin_sdk::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Note { id: String, text: String }
//!
//! const NOTES: Collection<Note> = Collection::new("notes");
//!
//! #[derive(Deserialize)]
//! struct Put { text: String }
//!
//! fn put(call: &Call) -> Result<Reply> {
//!     let p: Put = call.params()?;
//!     let note = Note { id: ids::new_id("note"), text: p.text };
//!     NOTES.put(&note.id, &note)?;
//!     events::emit("notes.put", &serde_json::json!({ "noteId": note.id }));
//!     Reply::json(&note)
//! }
//!
//! struct Notes;
//!
//! impl Extension for Notes {
//!     const ERRORS: ErrorRange = ErrorRange::new(20000, 20999);
//!     const METHODS: Methods = Methods::new(&[("notes/put", put)]);
//!     fn describe() -> Describe {
//!         Describe::new("notes", env!("CARGO_PKG_VERSION"))
//!     }
//! }
//!
//! map_plugin_sdk::export_extension!(Notes);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`: the crate is a
//! `cdylib`, and needs no other dependency than this one (and serde).

pub mod bindings;
pub mod config;
pub mod error;
pub mod events;
pub mod export;
pub mod http;
pub mod ids;
pub mod log;
pub mod metrics;
pub mod params;
pub mod resources;
pub mod router;
pub mod rpc;
pub mod store;

pub use bindings::map_gateway::plugin::timers;
pub use bindings::map_gateway::plugin::types::{Caller, RpcError};
pub use bindings::CONTRACT_VERSION;
pub use error::{Error, ErrorRange, Result};
pub use export::{Extension, GrpcHandler, GrpcUnary, HttpHandler, HttpRequest, HttpResponse, Lifecycle, Observer, SentMessage};
pub use rpc::{Call, Describe, EventFilter, Handler, Methods, Reply};
pub use store::{retry, Attempt, Batch, Collection, Counter};

/// gRPC: the types of `grpc-types` and the `grpc-stream` import.
pub mod grpc {
    pub use crate::bindings::map_gateway::plugin::grpc_stream::{finish, write};
    pub use crate::bindings::map_gateway::plugin::grpc_types::{CallInfo, Method, Service, Status};
}

/// What a plugin usually needs: `use map_plugin_sdk::prelude::*;`.
pub mod prelude {
    pub use crate::error::codes;
    pub use crate::store::{self, retry, Attempt, Batch, Collection, Counter, Outcome};
    pub use crate::{config, events, ids, log, metrics, params, router};
    pub use crate::{Call, Caller, Describe, Error, ErrorRange, EventFilter, Extension, Methods, Reply, Result};
}

#[cfg(test)]
mod tests {
    /// The crate is versioned with the contract it binds.
    #[test]
    fn the_sdk_version_is_the_contract_version() {
        assert_eq!(env!("CARGO_PKG_VERSION"), super::CONTRACT_VERSION);
    }
}
