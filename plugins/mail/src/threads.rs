//! Threads: `mail/thread/create`, `mail/thread/list`.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::access::{self, Actor};
use crate::error::{MailError, MailResult};
use crate::events;
use crate::ids;
use crate::model::Thread;
use crate::params;
use crate::repo::{self, Batch, Range};
use crate::settings;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateParams {
    conversation_id: String,
    root_turn_id: String,
    subject: Option<String>,
    parent_thread_id: Option<String>,
}

/// `mail/thread/create`: a thread rooted at a turn the caller can see,
/// optionally nested in another thread, up to `max_thread_depth` levels.
pub fn create(actor: &Actor, params: &str) -> MailResult<Value> {
    actor.require_capability("canCreateThreads", "mail/thread/create")?;
    let p: CreateParams = params::parse(params)?;
    let conv = access::require_conversation(params::id("conversationId", &p.conversation_id)?)?;
    let member = access::require_member(&conv, actor)?;
    access::require_open(&conv)?;
    access::require_permission(member.permissions.can_create_threads, &member, "canCreateThreads", "create threads")?;
    let root = access::visible_turn(&conv.id, params::id("rootTurnId", &p.root_turn_id)?, &member)?;
    let depth = match &p.parent_thread_id {
        Some(parent_id) => {
            let parent: Thread = repo::get(repo::THREADS, &repo::thread_key(&conv.id, parent_id))?
                .ok_or_else(|| MailError::thread_not_found(&conv.id, parent_id))?;
            parent.depth + 1
        }
        None => 1,
    };
    let max = settings::max_thread_depth();
    if depth > max {
        return Err(MailError::nesting_limit(depth, max));
    }
    let (id, now) = ids::new_id("thread");
    let thread = Thread {
        id: id.clone(),
        conversation_id: conv.id.clone(),
        parent_thread_id: p.parent_thread_id,
        subject: p.subject,
        root_turn_id: root.id,
        turn_count: 0,
        participant_count: 0,
        created_at: now,
        updated_at: now,
        created_by: actor.id.clone(),
        depth,
    };
    let mut batch = Batch::default();
    batch.put(repo::THREADS, repo::thread_key(&conv.id, &id), &thread).touch(&conv.id, now);
    batch.commit()?;
    let data = json!({"conversationId": conv.id, "threadId": id, "participantId": actor.id, "thread": thread});
    events::emit(events::THREAD_CREATED, &conv.id, data, None);
    Ok(json!({ "thread": thread }))
}

/// Every thread of a conversation with up-to-date counts.
pub fn all_with_counts(conv: &str) -> MailResult<Vec<Thread>> {
    repo::threads(conv)?.into_iter().map(repo::with_counts).collect()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListParams {
    conversation_id: String,
    parent_thread_id: Option<String>,
    limit: Option<u64>,
    cursor: Option<String>,
}

/// `mail/thread/list`: threads in creation order; with `parentThreadId`,
/// only the threads directly below it. For participants and observer clients.
pub fn list(actor: &Actor, params: &str) -> MailResult<Value> {
    let p: ListParams = params::parse(params)?;
    let conv = access::require_conversation(params::id("conversationId", &p.conversation_id)?)?;
    access::require_reader(&conv, actor)?;
    if let Some(parent) = &p.parent_thread_id {
        if !repo::exists(repo::THREADS, &repo::thread_key(&conv.id, parent))? {
            return Err(MailError::thread_not_found(&conv.id, parent));
        }
    }
    let limit = params::limit(p.limit, 50, 200);
    let prefix = format!("{}/", conv.id);
    let mut range = Range::prefix(repo::THREADS, prefix.clone());
    if let Some(c) = &p.cursor {
        range.after = Some(format!("{prefix}{}", params::cursor(c, "thread-")?));
    }
    let mut found = Vec::new();
    let mut has_more = false;
    range.each(|entry| {
        let t: Thread = repo::decode_entry(repo::THREADS, &entry)?;
        if p.parent_thread_id.as_ref().is_some_and(|parent| t.parent_thread_id.as_ref() != Some(parent)) {
            return Ok(true);
        }
        if found.len() == limit {
            has_more = true;
            return Ok(false);
        }
        found.push(repo::with_counts(t)?);
        Ok(true)
    })?;
    let mut out = json!({ "threads": found, "hasMore": has_more });
    if has_more {
        out["nextCursor"] = json!(found.last().map(|t: &Thread| t.id.clone()));
    }
    Ok(out)
}
