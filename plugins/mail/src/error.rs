//! Mail errors, numbered as the MAP specification numbers them (10000–10010),
//! in the extension's range 10000–10999. Storage failures take 10999
//! (retryable when the store was unavailable); malformed requests are
//! JSON-RPC's -32602.

use map_plugin_sdk::{Error, ErrorRange};
use serde_json::json;

pub const ERRORS: ErrorRange = ErrorRange::new(10000, 10999).with_storage_code(STORAGE_FAILED);

pub const CONVERSATION_NOT_FOUND: i64 = ERRORS.code(10000);
pub const CONVERSATION_CLOSED: i64 = ERRORS.code(10001);
pub const NOT_A_PARTICIPANT: i64 = ERRORS.code(10002);
pub const PERMISSION_DENIED: i64 = ERRORS.code(10003);
pub const PARTICIPANT_ALREADY_JOINED: i64 = ERRORS.code(10004);
pub const PARTICIPANT_NOT_FOUND: i64 = ERRORS.code(10005);
pub const TURN_NOT_FOUND: i64 = ERRORS.code(10006);
pub const THREAD_NOT_FOUND: i64 = ERRORS.code(10007);
pub const INVALID_CONTENT_TYPE: i64 = ERRORS.code(10008);
pub const THREAD_NESTING_LIMIT: i64 = ERRORS.code(10009);
pub const MAIL_NOT_ENABLED: i64 = ERRORS.code(10010);
/// Not in the specification: the host's storage failed, so the client sees
/// it as a mail error.
pub const STORAGE_FAILED: i64 = 10999;

pub fn conversation_not_found(id: &str) -> Error {
    Error::new(CONVERSATION_NOT_FOUND, format!("Conversation not found: {id}")).with_details(json!({"conversationId": id}))
}

pub fn conversation_closed(id: &str, status: &str) -> Error {
    Error::new(CONVERSATION_CLOSED, format!("Conversation {id} is closed ({status})")).with_details(json!({"conversationId": id, "status": status}))
}

pub fn not_a_participant(conversation: &str, participant: &str) -> Error {
    Error::new(NOT_A_PARTICIPANT, format!("{participant} is not a participant of conversation {conversation}"))
        .with_details(json!({"conversationId": conversation, "participantId": participant}))
}

pub fn permission_denied(message: impl Into<String>, permission: &str) -> Error {
    Error::new(PERMISSION_DENIED, message).with_details(json!({"permission": permission}))
}

pub fn already_joined(conversation: &str, participant: &str) -> Error {
    Error::new(PARTICIPANT_ALREADY_JOINED, format!("{participant} is already a participant of conversation {conversation}"))
        .with_details(json!({"conversationId": conversation, "participantId": participant}))
}

pub fn participant_not_found(conversation: &str, participant: &str) -> Error {
    Error::new(PARTICIPANT_NOT_FOUND, format!("Participant {participant} not found in conversation {conversation}"))
        .with_details(json!({"conversationId": conversation, "participantId": participant}))
}

pub fn turn_not_found(conversation: &str, turn: &str) -> Error {
    Error::new(TURN_NOT_FOUND, format!("Turn {turn} not found in conversation {conversation}"))
        .with_details(json!({"conversationId": conversation, "turnId": turn}))
}

pub fn thread_not_found(conversation: &str, thread: &str) -> Error {
    Error::new(THREAD_NOT_FOUND, format!("Thread {thread} not found in conversation {conversation}"))
        .with_details(json!({"conversationId": conversation, "threadId": thread}))
}

pub fn invalid_content_type(content_type: &str) -> Error {
    Error::new(INVALID_CONTENT_TYPE, format!("Invalid content type {content_type:?}: use text, data, event, reference or an x- prefixed type"))
        .with_details(json!({"contentType": content_type}))
}

pub fn nesting_limit(depth: u32, max: u32) -> Error {
    Error::new(THREAD_NESTING_LIMIT, format!("Thread nesting depth {depth} exceeds the limit of {max}")).with_details(json!({"depth": depth, "maxDepth": max}))
}

pub fn not_enabled() -> Error {
    Error::new(MAIL_NOT_ENABLED, "Mail is not enabled for this tenant")
}

#[cfg(test)]
mod tests {
    use super::*;
    use map_plugin_sdk::store::raw::StoreError;

    #[test]
    fn wire_forms_keep_the_mail_codes_and_details() {
        let rpc = turn_not_found("conv-1", "turn-9").into_rpc(&ERRORS);
        assert_eq!((rpc.code, rpc.message.as_str()), (10006, "Turn turn-9 not found in conversation conv-1"));
        assert_eq!(rpc.data.as_deref(), Some(r#"{"details":{"conversationId":"conv-1","turnId":"turn-9"}}"#));
        let rpc = not_enabled().into_rpc(&ERRORS);
        assert_eq!((rpc.code, rpc.data), (10010, None));
        let rpc = Error::from(StoreError::Unavailable("db down".into())).into_rpc(&ERRORS);
        assert_eq!((rpc.code, rpc.data.as_deref()), (10999, Some(r#"{"retryable":true}"#)));
    }
}
