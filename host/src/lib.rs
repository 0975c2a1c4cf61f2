//! map-gateway: a WebAssembly-extensible gateway for multi-agent protocols.
//!
//! Rooms, in the direction requests flow: `transport` (bytes ↔ JSON-RPC) →
//! `rpc` (codec, errors) → `core` (MAP sessions, agents, scopes, routing,
//! events) with `tenants` (walls and credentials), all configured by `config`.

pub mod config;
pub mod core;
pub mod plugins;
pub mod rpc;
pub mod store;
pub mod tenants;
pub mod transport;
