//! Errors answered to the client as JSON-RPC errors.
//!
//! An [`Error`] carries a code, a message, optional `details` and a
//! `retryable` flag. On the wire its `data` is `{"details": …, "retryable":
//! true}` (each only when set; the host adds `category`).
//!
//! Codes are either JSON-RPC's (see [`codes`]) or inside the extension's own
//! [`ErrorRange`], which it declares once as `Extension::ERRORS`. Storage
//! failures have no code of their own until they are answered: they take the
//! range's storage code ([`ErrorRange::storage`]).

use std::fmt;

use serde_json::{Map, Value};

use crate::bindings::map_gateway::plugin::store::StoreError;
use crate::bindings::map_gateway::plugin::types::RpcError;

/// The JSON-RPC codes a plugin may answer with.
pub mod codes {
    pub use map_protocol::rpc::codes::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};
}

/// Codes reserved by JSON-RPC and the MAP core: no extension range may touch them.
use map_protocol::rpc::RESERVED;

/// The inclusive range of error codes an extension answers with, as its
/// descriptor declares it, and the code in it that storage failures take.
///
/// Built in `const` context, so a range the host would refuse (empty, or
/// overlapping JSON-RPC's -32768..-32000 or the MAP core's 1000..9999 and
/// 16000..16999) and a code outside it fail the build:
///
/// ```
/// use map_plugin_sdk::ErrorRange;
/// const ERRORS: ErrorRange = ErrorRange::new(20000, 20999);
/// const NOTE_NOT_FOUND: i64 = ERRORS.code(20001);
/// # assert_eq!(NOTE_NOT_FOUND, 20001);
/// # assert_eq!(ERRORS.storage(), 20999);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorRange {
    first: i64,
    last: i64,
    storage: i64,
}

impl ErrorRange {
    /// The codes `first..=last`; storage failures take `last`.
    pub const fn new(first: i64, last: i64) -> ErrorRange {
        assert!(first <= last, "an error range must not be empty");
        let mut i = 0;
        while i < RESERVED.len() {
            let (lo, hi) = RESERVED[i];
            assert!(last < lo || first > hi, "an error range must not overlap JSON-RPC's or the MAP core's codes");
            i += 1;
        }
        ErrorRange { first, last, storage: last }
    }

    /// Storage failures take `code` (inside the range) instead of the last code.
    pub const fn with_storage_code(self, code: i64) -> ErrorRange {
        ErrorRange { storage: self.code(code), ..self }
    }

    /// `code`, checked to lie in the range (in `const` context: at build time).
    pub const fn code(self, code: i64) -> i64 {
        assert!(self.contains(code), "the error code is outside the extension's error range");
        code
    }

    pub const fn contains(self, code: i64) -> bool {
        self.first <= code && code <= self.last
    }

    pub const fn first(self) -> i64 {
        self.first
    }

    pub const fn last(self) -> i64 {
        self.last
    }

    /// The code storage failures are answered with.
    pub const fn storage(self) -> i64 {
        self.storage
    }

    /// Codes a plugin may answer besides its range: JSON-RPC's -32700..-32600.
    pub const fn is_json_rpc(code: i64) -> bool {
        -32700 <= code && code <= -32600
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    Fixed(i64),
    /// The extension's storage code, known when the error is answered.
    Storage,
}

/// An error answered to the client. Build one with a constructor, add
/// [`details`](Error::with_details), and return it from a handler; the SDK
/// turns it into the WIT `rpc-error`.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    code: Code,
    message: String,
    details: Option<Value>,
    retryable: bool,
}

/// The result of a handler and of every SDK call that can fail.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with a code of the extension's range (or a JSON-RPC code).
    pub fn new(code: i64, message: impl Into<String>) -> Error {
        Error { code: Code::Fixed(code), message: message.into(), details: None, retryable: false }
    }

    /// -32602: the request's params are malformed.
    pub fn invalid_params(message: impl Into<String>) -> Error {
        Error::new(codes::INVALID_PARAMS, message)
    }

    /// -32601: no such method.
    pub fn method_not_found(method: &str) -> Error {
        Error::new(codes::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// -32603: a fault of the plugin itself.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(codes::INTERNAL_ERROR, message)
    }

    /// A storage failure, answered with the extension's storage code.
    pub fn storage(message: impl Into<String>) -> Error {
        Error { code: Code::Storage, message: message.into(), details: None, retryable: false }
    }

    /// The store could not be reached or refused the write: retrying may work.
    pub fn storage_unavailable(message: impl Into<String>) -> Error {
        Error::storage(message).retryable()
    }

    /// Stored data that cannot be read back (not retryable).
    pub fn damaged(collection: &str, key: &str, cause: impl fmt::Display) -> Error {
        Error::storage(format!("Stored value {collection}/{key} is unreadable: {cause}"))
    }

    /// Extra data for the client, sent as `data.details`.
    pub fn with_details(mut self, details: Value) -> Error {
        self.details = Some(details);
        self
    }

    /// Mark the error as worth retrying (`data.retryable: true`).
    pub fn retryable(mut self) -> Error {
        self.retryable = true;
        self
    }

    /// The code, or `None` for a storage failure (which takes the range's storage code).
    pub fn code(&self) -> Option<i64> {
        match self.code {
            Code::Fixed(c) => Some(c),
            Code::Storage => None,
        }
    }

    pub fn is_storage(&self) -> bool {
        self.code == Code::Storage
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn details(&self) -> Option<&Value> {
        self.details.as_ref()
    }

    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The JSON-RPC `data`: `{details?, retryable?}`, or none when both are absent.
    pub fn data(&self) -> Option<Value> {
        let mut data = Map::new();
        if let Some(details) = &self.details {
            data.insert("details".into(), details.clone());
        }
        if self.retryable {
            data.insert("retryable".into(), Value::Bool(true));
        }
        (!data.is_empty()).then_some(Value::Object(data))
    }

    /// The wire form for an extension with `range`. A code outside the range
    /// (JSON-RPC codes aside), which the host would answer as -32603 and
    /// discard the instance for, becomes -32603 here, naming the code.
    pub fn into_rpc(self, range: &ErrorRange) -> RpcError {
        let data = self.data().map(|d| d.to_string());
        let code = match self.code {
            Code::Storage => range.storage(),
            Code::Fixed(c) => c,
        };
        if range.contains(code) || ErrorRange::is_json_rpc(code) {
            return RpcError { code, message: self.message, data };
        }
        RpcError {
            code: codes::INTERNAL_ERROR,
            message: format!("{} (error code {code} is outside the extension's range {}..{})", self.message, range.first(), range.last()),
            data,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Code::Fixed(c) => write!(f, "{c}: {}", self.message),
            Code::Storage => write!(f, "storage: {}", self.message),
        }
    }
}

impl std::error::Error for Error {}

/// `unavailable` is retryable; `invalid` (a key, value or batch too large, a
/// counter that is not a number) is not.
impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        match e {
            StoreError::Unavailable(m) => Error::storage_unavailable(format!("Storage is unavailable: {m}")),
            StoreError::Invalid(m) => Error::storage(format!("Storage refused the request: {m}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RANGE: ErrorRange = ErrorRange::new(13000, 13999).with_storage_code(13010);

    #[test]
    fn wire_form_has_details_and_retryable() {
        let e = Error::new(13001, "Checkpoint not found: c").with_details(json!({"checkpointId": "c"}));
        let rpc = e.into_rpc(&RANGE);
        assert_eq!((rpc.code, rpc.message.as_str()), (13001, "Checkpoint not found: c"));
        assert_eq!(rpc.data.as_deref(), Some(r#"{"details":{"checkpointId":"c"}}"#));
        assert_eq!(Error::invalid_params("x").into_rpc(&RANGE).data, None);
    }

    #[test]
    fn storage_failures_take_the_storage_code() {
        let e: Error = StoreError::Unavailable("db down".into()).into();
        assert!(e.is_storage() && e.is_retryable() && e.code().is_none());
        let rpc = e.into_rpc(&RANGE);
        assert_eq!(rpc.code, 13010);
        assert_eq!(rpc.data.as_deref(), Some(r#"{"retryable":true}"#));
        assert_eq!(Error::storage("x").into_rpc(&ErrorRange::new(20000, 20999)).code, 20999);
        let invalid: Error = StoreError::Invalid("too big".into()).into();
        assert!(!invalid.is_retryable());
    }

    #[test]
    fn codes_outside_the_range_become_internal_errors() {
        let rpc = Error::new(42, "odd").into_rpc(&RANGE);
        assert_eq!(rpc.code, codes::INTERNAL_ERROR);
        assert!(rpc.message.contains("42"), "{}", rpc.message);
        assert_eq!(Error::method_not_found("x/y").into_rpc(&RANGE).code, -32601);
    }

    #[test]
    fn ranges_check_their_codes() {
        assert!(RANGE.contains(13000) && RANGE.contains(13999) && !RANGE.contains(14000));
        assert_eq!(RANGE.code(13004), 13004);
        assert!(std::panic::catch_unwind(|| ErrorRange::new(9000, 10999)).is_err(), "overlaps the MAP core");
        assert!(std::panic::catch_unwind(|| ErrorRange::new(-32100, -32050)).is_err(), "overlaps JSON-RPC");
        assert!(std::panic::catch_unwind(|| ErrorRange::new(5, 4)).is_err(), "empty");
        assert!(std::panic::catch_unwind(|| RANGE.code(12999)).is_err());
    }
}
