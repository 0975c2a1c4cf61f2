//! UAP errors on the MAP side, in the experimental extension's range
//! 91000–91999 (codes from 90000 up are for extensions outside the MAP
//! registry). Malformed requests are JSON-RPC's -32602; storage failures
//! take 91999.

use map_plugin_sdk::{Error, ErrorRange};
use serde_json::json;

pub const ERRORS: ErrorRange = ErrorRange::new(91000, 91999).with_storage_code(STORAGE_FAILED);

/// No job with that id in this tenant.
pub const JOB_NOT_FOUND: i64 = ERRORS.code(91000);
/// The job already ended (completed, failed or cancelled): it cannot be cancelled.
pub const JOB_FINISHED: i64 = ERRORS.code(91001);
/// The host's storage failed.
pub const STORAGE_FAILED: i64 = 91999;

pub fn job_not_found(id: &str) -> Error {
    Error::new(JOB_NOT_FOUND, format!("Job not found: {id}")).with_details(json!({"jobId": id}))
}

pub fn job_finished(id: &str, status: &str) -> Error {
    Error::new(JOB_FINISHED, format!("Job {id} already ended ({status})")).with_details(json!({"jobId": id, "status": status}))
}
