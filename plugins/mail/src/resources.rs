//! Conversations as MAP resources of the type `x-mail/conversation`
//! (`map/resources/list` and `get`), under mail's own read rules: a listing
//! is `mail/list` for the caller (the conversations it takes part in; an
//! observer client's, every one of the tenant), with `mail/list`'s filter
//! (`type`, `status`, `participantId`, `createdAfter`, `createdBefore`,
//! `parentConversationId`) and cursor; `get` answers what `mail/get` would
//! let the caller read, and nothing (not found) otherwise.

use map_plugin_sdk::resources::{Page, Query, Resource, Resources};
use map_plugin_sdk::{Call, Caller, ErrorRange, Result};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::access::{self, Actor};
use crate::conversations;
use crate::error;
use crate::model::Conversation;
use crate::settings;

pub const KIND: &str = "x-mail/conversation";

/// A conversation as a resource: named by its subject (else its id), owned
/// by its creator; its type, participant count, parent and close record,
/// and its own metadata, in `metadata`.
pub fn resource(c: Conversation) -> Resource {
    let mut metadata = Map::new();
    metadata.insert("type".into(), json!(c.kind));
    metadata.insert("participantCount".into(), json!(c.participant_count));
    for (key, value) in
        [("parentConversationId", &c.parent_conversation_id), ("parentTurnId", &c.parent_turn_id), ("closedBy", &c.closed_by), ("closeReason", &c.close_reason)]
    {
        if let Some(v) = value {
            metadata.insert(key.into(), json!(v));
        }
    }
    if let Some(at) = c.closed_at {
        metadata.insert("closedAt".into(), json!(at));
    }
    if !c.metadata.is_empty() {
        metadata.insert("metadata".into(), Value::Object(c.metadata.clone()));
    }
    let name = c.subject.clone().unwrap_or_else(|| c.id.clone());
    Resource::new(c.id, name, c.status.as_str(), c.created_by, c.created_at).updated_at(c.updated_at).metadata(metadata)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    conversations: Vec<Conversation>,
    next_cursor: Option<String>,
}

pub struct ConversationResources;

impl Resources for ConversationResources {
    const ERRORS: ErrorRange = error::ERRORS;

    fn kinds() -> Vec<String> {
        // Off for the tenant: no kind to advertise.
        if settings::enabled() {
            vec![KIND.into()]
        } else {
            Vec::new()
        }
    }

    fn list(caller: &Caller, query: &Query) -> Result<Page> {
        let params = json!({"filter": query.filter, "limit": query.limit, "cursor": query.cursor}).to_string();
        let reply = conversations::list(&Call::new(caller, "mail/list", &params))?;
        let listed: Listed =
            serde_json::from_str(reply.as_str()).map_err(|e| map_plugin_sdk::Error::internal(format!("mail/list answered in another form: {e}")))?;
        Ok(Page { resources: listed.conversations.into_iter().map(resource).collect(), cursor: listed.next_cursor, total: None })
    }

    fn get(caller: &Caller, _kind: &str, id: &str) -> Result<Option<Resource>> {
        if id.trim().is_empty() || id.contains('/') {
            return Ok(None);
        }
        let actor = Actor::from_caller(caller);
        let readable = access::visit(id, &actor, &[], &[]).and_then(|visit| visit.reader(&actor).and_then(|_| visit.counted()));
        match readable {
            Ok(conversation) => Ok(Some(resource(conversation))),
            // Missing and unreadable look alike.
            Err(e) if matches!(e.code(), Some(error::CONVERSATION_NOT_FOUND | error::NOT_A_PARTICIPANT)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
