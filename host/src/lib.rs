//! map-gateway: a WebAssembly-extensible gateway for multi-agent protocols.
//!
//! Modules, each depending only on those after it (a test in
//! `host/tests/layers.rs` keeps it so): `fuzzing` (every decoder of
//! untrusted bytes as a fuzz target) → `app` (the composition root) →
//! `transport` (bytes ↔ JSON-RPC, HTTP/2 gRPC) → `federation` (MAP
//! between systems: peers, routing, their links) → `acp` (editors' ACP
//! bridged to MAP agents) → `plugins` (Wasm components
//! serving extensions) → `cluster` (several gateways as one, over NATS) →
//! `journal` (the embedded default's durable event log) → `core` (MAP: sessions, agents, scopes, routing,
//! events; the traits it needs from extensions) → `credentials` (a
//! tenant's credentials broker: grants and providers) → `tenants` (credentials
//! into tenants) → `store` (durable storage) → `rpc` (codec, errors) →
//! `ids`, `metrics`, `telemetry` (logs and traces), `config`, `memory`
//! (memory back to the system after a burst).

// What an embedder uses: start a gateway (`app`), configure it (`config`),
// serve it (`transport`), drive the core directly (`core`) and reach a
// tenant's plugins (`plugins`). The rest is internal.
pub mod acp;
pub mod app;
mod federation;
// Every decoder of untrusted bytes as a fuzz target (`fuzz/`, tests/fuzz_smoke.rs).
#[doc(hidden)]
pub mod fuzzing;
mod framing;
mod journal;
pub mod memory;
pub mod telemetry;
mod token_client;
pub mod transport;
