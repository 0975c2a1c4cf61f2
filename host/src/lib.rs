//! map-gateway: a WebAssembly-extensible gateway for multi-agent protocols.
//! The layers below it are crates of their own (`map-protocol`,
//! `map-config`, `map-observe`, `map-store`, `map-core`, `map-cluster`,
//! `map-plugin-host`); this crate serves them.
//!
//! Modules, each depending only on those after it (a test in
//! `host/tests/all/layers.rs` keeps it so): `fuzzing` (every decoder of
//! untrusted bytes as a fuzz target) → `install` and `scaffold` (the
//! binary's `plugin install` and `plugin new`) → `app` (the composition
//! root) → `transport` (bytes ↔ JSON-RPC, HTTP/2 gRPC) → `federation` (MAP
//! between systems: peers, routing, their links) → `acp` (editors' ACP
//! bridged to MAP agents) → `journal` (the embedded default's durable event
//! log) → `token_client` (the credentials broker's HTTP client) →
//! `telemetry` (the logger and the trace exporter) → `framing` (reading
//! messages under a size limit) → `memory` (memory back to the system after
//! a burst).

// What an embedder uses: start a gateway (`app`), serve it (`transport`);
// the core, the configuration and the plugin host are crates of their own.
pub mod acp;
pub mod app;
mod federation;
// Every decoder of untrusted bytes as a fuzz target (`fuzz/`, tests/fuzz_smoke.rs).
mod framing;
#[doc(hidden)]
pub mod fuzzing;
mod journal;
pub mod memory;
pub mod telemetry;
mod token_client;
pub mod transport;
