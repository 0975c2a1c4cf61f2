//! The errors the extension answers with: the trajectory codes of the MAP
//! specification (13000–13004) and one code of its own for storage failures
//! (retryable when the store was unavailable, or data that cannot be read
//! back). Malformed requests are JSON-RPC's -32602.

use map_plugin_sdk::{Error, ErrorRange};
use serde_json::json;

pub mod codes {
    pub const NOT_ENABLED: i64 = 13000;
    pub const CHECKPOINT_NOT_FOUND: i64 = 13001;
    pub const CONTENT_UNAVAILABLE: i64 = 13002;
    pub const STREAM_FAILED: i64 = 13003;
    pub const PERMISSION_DENIED: i64 = 13004;
    /// Not in the specification: the host's storage refused a read or write
    /// (retryable), or holds something unreadable.
    pub const STORAGE_FAILED: i64 = 13010;
}

pub const ERRORS: ErrorRange = ErrorRange::new(13000, 13999).with_storage_code(codes::STORAGE_FAILED);

pub fn not_enabled() -> Error {
    Error::new(codes::NOT_ENABLED, "Trajectory is not enabled for this tenant")
}

pub fn checkpoint_not_found(id: &str) -> Error {
    Error::new(codes::CHECKPOINT_NOT_FOUND, format!("Checkpoint not found: {id}")).with_details(json!({ "checkpointId": id }))
}

pub fn content_unavailable(message: impl Into<String>) -> Error {
    Error::new(codes::CONTENT_UNAVAILABLE, message)
}

pub fn stream_failed(message: impl Into<String>) -> Error {
    Error::new(codes::STREAM_FAILED, message)
}

pub fn permission_denied(message: impl Into<String>) -> Error {
    Error::new(codes::PERMISSION_DENIED, message)
}
