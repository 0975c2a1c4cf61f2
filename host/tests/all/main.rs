//! The gateway's integration tests, one binary (linking the gateway once):
//! each module starts the real binary or drives a crate's public API.
//! Shared helpers are in `common`. Run one module with
//! `cargo test -p map-gateway --test all federation::`.

mod common;

mod acp;
mod admin;
mod cluster;
mod contract_version;
mod credentials;
mod deploy;
mod digests;
mod durable;
mod ext_registry;
mod federation;
mod fuzz_smoke;
mod grpc;
mod http_sse;
mod http_streams;
mod jsonrpc;
mod jwks;
mod layers;
mod mamp;
mod map_resources;
mod oci;
mod plugin_limits;
mod plugins;
mod registry_scale;
mod reload;
mod resources;
mod resume;
mod rollout;
mod scaffold;
mod sdk_wire;
mod security;
mod shared_artifacts;
mod signing;
mod singletons;
mod stdio;
mod telemetry;
mod tenants;
mod tls;
