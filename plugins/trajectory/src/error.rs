//! The errors the extension answers with: the trajectory codes of the MAP
//! specification (13000–13004), one code of its own for storage outages, and
//! the JSON-RPC codes for malformed requests.

use serde_json::{json, Value};

use crate::map_gateway::plugin::store::StoreError;
use crate::map_gateway::plugin::types::RpcError;

pub mod codes {
    pub const NOT_ENABLED: i64 = 13000;
    pub const CHECKPOINT_NOT_FOUND: i64 = 13001;
    pub const CONTENT_UNAVAILABLE: i64 = 13002;
    pub const STREAM_FAILED: i64 = 13003;
    pub const PERMISSION_DENIED: i64 = 13004;
    /// Not in the specification: the host's storage refused a read or write
    /// (retryable), or holds something unreadable.
    pub const STORAGE_FAILED: i64 = 13010;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const METHOD_NOT_FOUND: i64 = -32601;
}

#[derive(Debug)]
pub struct Error {
    pub code: i64,
    pub message: String,
    details: Option<Value>,
    retryable: bool,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    fn new(code: i64, message: impl Into<String>) -> Error {
        Error { code, message: message.into(), details: None, retryable: false }
    }

    pub fn with_details(mut self, details: Value) -> Error {
        self.details = Some(details);
        self
    }

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

    pub fn invalid_params(message: impl Into<String>) -> Error {
        Error::new(codes::INVALID_PARAMS, message)
    }

    /// Stored data that cannot be read back.
    pub fn damaged(message: impl Into<String>) -> Error {
        Error::new(codes::STORAGE_FAILED, message)
    }

    pub fn method_not_found(method: &str) -> Error {
        Error::new(codes::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// The wire form; the host adds `data.category`.
    pub fn into_rpc(self) -> RpcError {
        let mut data = serde_json::Map::new();
        if let Some(details) = self.details {
            data.insert("details".into(), details);
        }
        if self.retryable {
            data.insert("retryable".into(), Value::Bool(true));
        }
        RpcError { code: self.code, message: self.message, data: (!data.is_empty()).then(|| Value::Object(data).to_string()) }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        match e {
            // Only our own keys and values reach the store, so an invalid one
            // comes from identifiers or metadata too large to keep.
            StoreError::Invalid(m) => Error::invalid_params(format!("Cannot store this checkpoint: {m}")),
            StoreError::Unavailable(m) => {
                let mut e = Error::new(codes::STORAGE_FAILED, format!("Trajectory storage is unavailable: {m}"));
                e.retryable = true;
                e
            }
        }
    }
}
