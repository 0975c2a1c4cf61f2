//! Answers in the seed's shapes: `{conversation_id, message_id, status}` on
//! success, `{error, message, status_code}` with the same HTTP status on failure.

use map_plugin_sdk::HttpResponse;
use serde_json::json;

/// A request refused with an HTTP status and a snake_case error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub error: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(status: u16, error: &'static str, message: impl Into<String>) -> Refusal {
        Refusal { status, error, message: message.into() }
    }

    pub fn response(&self) -> HttpResponse {
        HttpResponse::json(self.status, &json!({"error": self.error, "message": self.message, "status_code": self.status}))
    }
}

/// A storage or host failure while handling a request.
pub fn unavailable(what: &str, e: impl std::fmt::Display) -> Refusal {
    Refusal::new(503, "service_unavailable", format!("{what}: {e}"))
}
