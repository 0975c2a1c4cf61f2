//! Task errors, numbered as the MAP registry numbers them (14000–14003), in
//! the extension's range 14000–14999. Storage failures take 14999
//! (retryable when the store was unavailable); malformed requests are
//! JSON-RPC's -32602.

use map_plugin_sdk::{Error, ErrorRange};
use serde_json::json;

pub const ERRORS: ErrorRange = ErrorRange::new(14000, 14999).with_storage_code(STORAGE_FAILED);

pub const NOT_ENABLED: i64 = ERRORS.code(14000);
pub const TASK_NOT_FOUND: i64 = ERRORS.code(14001);
pub const ASSIGNMENT_FAILED: i64 = ERRORS.code(14002);
pub const PERMISSION_DENIED: i64 = ERRORS.code(14003);
/// Not in the specification: the host's storage failed.
pub const STORAGE_FAILED: i64 = 14999;

pub fn not_enabled() -> Error {
    Error::new(NOT_ENABLED, "Tasks are not enabled for this tenant")
}

pub fn task_not_found(id: &str) -> Error {
    Error::new(TASK_NOT_FOUND, format!("Task not found: {id}")).with_details(json!({"taskId": id}))
}

pub fn assignment_failed(task: Option<&str>, agent: &str, why: &str) -> Error {
    Error::new(ASSIGNMENT_FAILED, format!("Cannot assign to {agent}: {why}")).with_details(json!({"taskId": task, "agentId": agent}))
}

pub fn permission_denied(message: impl Into<String>, capability: &str) -> Error {
    Error::new(PERMISSION_DENIED, message).with_details(json!({"capability": capability}))
}

pub fn task_exists(id: &str) -> Error {
    Error::invalid_params(format!("Task {id} already exists")).with_details(json!({"taskId": id}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use map_plugin_sdk::store::raw::StoreError;

    #[test]
    fn wire_forms_keep_the_registry_codes() {
        let rpc = task_not_found("t-1").into_rpc(&ERRORS);
        assert_eq!((rpc.code, rpc.data.as_deref()), (14001, Some(r#"{"details":{"taskId":"t-1"}}"#)));
        assert_eq!(not_enabled().into_rpc(&ERRORS).code, 14000);
        assert_eq!(assignment_failed(Some("t"), "a", "x").into_rpc(&ERRORS).code, 14002);
        assert_eq!(permission_denied("no", "tasks.canCreate").into_rpc(&ERRORS).code, 14003);
        assert_eq!(task_exists("t").into_rpc(&ERRORS).code, -32602);
        let rpc = Error::from(StoreError::Unavailable("db down".into())).into_rpc(&ERRORS);
        assert_eq!((rpc.code, rpc.data.as_deref()), (14999, Some(r#"{"retryable":true}"#)));
    }
}
