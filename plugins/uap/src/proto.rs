//! The `uap.v1` messages, generated from `proto/` by `build.rs`: prost types
//! for the wire, and their proto3 JSON mapping (camelCase, enums by name,
//! bytes as base64) for the MAP side.

#![allow(clippy::all, missing_docs)]

include!(concat!(env!("OUT_DIR"), "/uap.v1.rs"));
include!(concat!(env!("OUT_DIR"), "/uap.v1.serde.rs"));
