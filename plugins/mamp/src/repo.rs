//! What the bridge keeps in the tenant's store.

use map_plugin_sdk::store::{keys, Collection, Counter};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A MAMP conversation and the mail conversation that records it.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Mapping {
    pub conversation_id: String,
    pub mail_conversation_id: String,
    /// The external agent's URI.
    pub peer: String,
    /// The MAP agent's id.
    pub agent: String,
    pub created_at: String,
    /// Whether the peer knows `conversation_id` (it does once it answered
    /// our first message, or when it started the conversation).
    #[serde(default)]
    pub peer_named: bool,
}

/// A message received from a sender: claimed while it is delivered, then
/// the answer every retry gets.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Received {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
}

/// By MAMP `conversation_id`.
pub const CONVERSATIONS: Collection<Mapping> = Collection::new("conversations");
/// Mail conversation id → MAMP `conversation_id`.
pub const BY_MAIL: Collection<String> = Collection::new("by-mail");
/// `<sender URI>/<message_id>`.
pub const RECEIVED: Collection<Received> = Collection::new("received");
/// `<sender URI>/<minute>`: messages per sender and minute.
pub const FLOOD: Counter = Counter::new("flood");

pub fn received_key(from: &str, message_id: &str) -> String {
    keys::join(&[keys::escape(from), keys::escape(message_id)])
}

pub fn flood_key(from: &str, minute: u64) -> String {
    keys::join(&[keys::escape(from), keys::number(minute)])
}
