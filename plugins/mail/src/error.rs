//! Mail errors, numbered as the MAP specification numbers them (10000–10010),
//! plus the two JSON-RPC codes a method may answer with.

use serde_json::{json, Value};

pub const CONVERSATION_NOT_FOUND: i64 = 10000;
pub const CONVERSATION_CLOSED: i64 = 10001;
pub const NOT_A_PARTICIPANT: i64 = 10002;
pub const PERMISSION_DENIED: i64 = 10003;
pub const PARTICIPANT_ALREADY_JOINED: i64 = 10004;
pub const PARTICIPANT_NOT_FOUND: i64 = 10005;
pub const TURN_NOT_FOUND: i64 = 10006;
pub const THREAD_NOT_FOUND: i64 = 10007;
pub const INVALID_CONTENT_TYPE: i64 = 10008;
pub const THREAD_NESTING_LIMIT: i64 = 10009;
pub const MAIL_NOT_ENABLED: i64 = 10010;

pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// Storage failures are reported in the extension's own range so that the
/// client sees them as mail errors, with `retryable` details.
pub const STORAGE_UNAVAILABLE: i64 = 10999;

/// An error answered to the client: `data.details` carries the ids involved.
#[derive(Debug, Clone, PartialEq)]
pub struct MailError {
    pub code: i64,
    pub message: String,
    pub details: Option<Value>,
}

pub type MailResult<T> = Result<T, MailError>;

impl MailError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        MailError { code, message: message.into(), details: None }
    }

    pub fn with(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn conversation_not_found(id: &str) -> Self {
        Self::new(CONVERSATION_NOT_FOUND, format!("Conversation not found: {id}")).with(json!({"conversationId": id}))
    }

    pub fn conversation_closed(id: &str, status: &str) -> Self {
        Self::new(CONVERSATION_CLOSED, format!("Conversation {id} is closed ({status})")).with(json!({"conversationId": id, "status": status}))
    }

    pub fn not_a_participant(conversation: &str, participant: &str) -> Self {
        Self::new(NOT_A_PARTICIPANT, format!("{participant} is not a participant of conversation {conversation}"))
            .with(json!({"conversationId": conversation, "participantId": participant}))
    }

    pub fn permission_denied(message: impl Into<String>, permission: &str) -> Self {
        Self::new(PERMISSION_DENIED, message).with(json!({"permission": permission}))
    }

    pub fn already_joined(conversation: &str, participant: &str) -> Self {
        Self::new(PARTICIPANT_ALREADY_JOINED, format!("{participant} is already a participant of conversation {conversation}"))
            .with(json!({"conversationId": conversation, "participantId": participant}))
    }

    pub fn participant_not_found(conversation: &str, participant: &str) -> Self {
        Self::new(PARTICIPANT_NOT_FOUND, format!("Participant {participant} not found in conversation {conversation}"))
            .with(json!({"conversationId": conversation, "participantId": participant}))
    }

    pub fn turn_not_found(conversation: &str, turn: &str) -> Self {
        Self::new(TURN_NOT_FOUND, format!("Turn {turn} not found in conversation {conversation}"))
            .with(json!({"conversationId": conversation, "turnId": turn}))
    }

    pub fn thread_not_found(conversation: &str, thread: &str) -> Self {
        Self::new(THREAD_NOT_FOUND, format!("Thread {thread} not found in conversation {conversation}"))
            .with(json!({"conversationId": conversation, "threadId": thread}))
    }

    pub fn invalid_content_type(content_type: &str) -> Self {
        Self::new(
            INVALID_CONTENT_TYPE,
            format!("Invalid content type {content_type:?}: use text, data, event, reference or an x- prefixed type"),
        )
        .with(json!({"contentType": content_type}))
    }

    pub fn nesting_limit(depth: u32, max: u32) -> Self {
        Self::new(THREAD_NESTING_LIMIT, format!("Thread nesting depth {depth} exceeds the limit of {max}"))
            .with(json!({"depth": depth, "maxDepth": max}))
    }

    pub fn not_enabled() -> Self {
        Self::new(MAIL_NOT_ENABLED, "Mail is not enabled for this tenant")
    }

    pub fn storage(message: impl Into<String>) -> Self {
        Self::new(STORAGE_UNAVAILABLE, format!("Mail storage failed: {}", message.into()))
    }

    /// The `data` of the JSON-RPC error (the host adds `category`).
    pub fn data(&self) -> Option<Value> {
        if self.code == STORAGE_UNAVAILABLE {
            return Some(json!({ "retryable": true }));
        }
        self.details.as_ref().map(|d| json!({ "details": d }))
    }
}
