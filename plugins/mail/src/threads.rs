//! Threads: `mail/thread/create`, `mail/thread/list`.

use map_plugin_sdk::store::Batch;
use map_plugin_sdk::{ids, Call, Reply, Result};
use serde::Deserialize;
use serde_json::json;

use crate::access::{self, Actor};
use crate::error;
use crate::events;
use crate::model::Thread;
use crate::params;
use crate::repo::{self, Writes};
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
pub fn create(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    actor.require_capability("canCreateThreads", "mail/thread/create")?;
    let p: CreateParams = call.params()?;
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, p.parent_thread_id.as_deref().as_slice(), &[p.root_turn_id.as_str()])?;
    let conv = &visit.conv;
    let member = visit.member(actor)?;
    access::require_open(conv)?;
    access::require_permission(member.permissions.can_create_threads, &member, "canCreateThreads", "create threads")?;
    let root = visit.visible_turn(params::id("rootTurnId", &p.root_turn_id)?, &member)?;
    let depth = match &p.parent_thread_id {
        Some(parent_id) => {
            let parent = visit.ahead.thread(parent_id)?.ok_or_else(|| error::thread_not_found(&conv.id, parent_id))?;
            parent.depth + 1
        }
        None => 1,
    };
    let max = settings::max_thread_depth();
    if depth > max {
        return Err(error::nesting_limit(depth, max));
    }
    let (id, now) = ids::new_id_at("thread");
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
    let mut batch = Batch::new();
    batch.put(&repo::THREADS, repo::thread_key(&conv.id, &id), &thread).touch(&conv.id, now);
    batch.apply()?;
    let data = json!({"conversationId": conv.id, "threadId": id, "participantId": actor.id, "thread": thread});
    events::emit(events::THREAD_CREATED, &conv.id, data, None);
    Ok(json!({ "thread": thread }).into())
}

/// Every thread of a conversation with up-to-date counts.
pub fn all_with_counts(conv: &str) -> Result<Vec<Thread>> {
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
pub fn list(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    let p: ListParams = call.params()?;
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, p.parent_thread_id.as_deref().as_slice(), &[])?;
    let conv = &visit.conv;
    visit.reader(actor)?;
    if let Some(parent) = &p.parent_thread_id {
        visit.require_thread(parent)?;
    }
    let limit = params::limit(p.limit, 50, 200);
    let prefix = format!("{}/", conv.id);
    let mut range = repo::THREADS.prefix(prefix.clone());
    if let Some(c) = &p.cursor {
        range = range.after(format!("{prefix}{}", params::cursor(c, "thread-")?));
    }
    let mut found = Vec::new();
    let mut has_more = false;
    range.each(|entry| {
        let t = entry.value;
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
    Ok(out.into())
}
