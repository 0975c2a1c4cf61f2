//! The MAP wire's shared vocabulary: JSON-RPC 2.0 framing and errors with
//! the MAP code ranges (`rpc`), and time-ordered ids (`ids`). The gateway and
//! the Rust plugin SDK both build on it, so a code or an id format is
//! defined once.

pub mod ids;
pub mod rpc;
