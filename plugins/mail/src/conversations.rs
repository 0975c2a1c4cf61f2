//! Conversation lifecycle: `mail/create`, `mail/get`, `mail/list`, `mail/close`,
//! `mail/reopen`.

use std::collections::BTreeMap;

use map_plugin_sdk::store::{Batch, PAGE};
use map_plugin_sdk::{ids, Call, Error, Reply, Result};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::access::{self, Actor};
use crate::error;
use crate::events;
use crate::model::{
    Conversation, ConversationStatus, ConversationType, Participant, ParticipantType, Permissions, Role, Turn, TurnSource, TurnStatus, Visibility,
};
use crate::params::{self, OneOrMany};
use crate::participants;
use crate::repo::{self, Ahead, Writes};
use crate::threads;
use crate::turns::{self, TurnQuery, TurnSpec};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitialTurn {
    content_type: String,
    content: Value,
    visibility: Option<Visibility>,
    metadata: Option<Map<String, Value>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct CreateParams {
    #[serde(rename = "type")]
    kind: ConversationType,
    subject: Option<String>,
    parent_conversation_id: Option<String>,
    parent_turn_id: Option<String>,
    initial_participants: Vec<participants::ParticipantSpec>,
    initial_turn: Option<InitialTurn>,
    metadata: Map<String, Value>,
}

/// `mail/create`: a new conversation; the caller joins it as initiator, the
/// initial participants with their roles, and the initial turn is recorded,
/// all in one atomic write. Its events go to the participants it wrote,
/// without reading them back.
pub fn create(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    actor.require_capability("canCreate", "mail/create")?;
    let p: CreateParams = call.params()?;
    check_parent(actor, p.parent_conversation_id.as_deref(), p.parent_turn_id.as_deref())?;

    let (id, now) = ids::new_id_at("conv");
    let mut conv = Conversation {
        id: id.clone(),
        kind: p.kind,
        status: ConversationStatus::Active,
        subject: p.subject,
        participant_count: 0,
        parent_conversation_id: p.parent_conversation_id,
        parent_turn_id: p.parent_turn_id,
        created_at: now,
        updated_at: now,
        closed_at: None,
        closed_by: None,
        close_reason: None,
        created_by: actor.id.clone(),
        metadata: p.metadata,
    };
    let creator = Participant {
        id: actor.id.clone(),
        conversation_id: id.clone(),
        kind: actor.kind,
        role: Role::Initiator,
        joined_at: now,
        left_at: None,
        permissions: Permissions::for_role(Role::Initiator),
        invited_by: None,
        removed_by: None,
    };
    let members = members(&creator, actor, p.initial_participants)?;
    let initial_turn = p.initial_turn.map(|t| first_turn(&conv, &creator, t)).transpose()?;
    write(&conv, &members, initial_turn.as_ref())?;

    conv.participant_count = members.len() as u64;
    announce_created(&conv, &members, initial_turn.as_ref())?;
    let mut out = json!({"conversation": conv, "participant": creator});
    if let Some(t) = initial_turn {
        out["initialTurn"] = json!(t);
    }
    Ok(out.into())
}

/// A parent links conversations, so the caller must be able to read it
/// (and the parent turn, when one is named).
fn check_parent(actor: &Actor, parent: Option<&str>, parent_turn: Option<&str>) -> Result<()> {
    let Some(parent_id) = parent else {
        return match parent_turn {
            Some(_) => Err(Error::invalid_params("parentTurnId needs parentConversationId")),
            None => Ok(()),
        };
    };
    let parent = access::visit(parent_id, actor, &[], parent_turn.as_slice())?;
    let member = parent.member(actor)?;
    if let Some(turn) = parent_turn {
        parent.visible_turn(turn, &member)?;
    }
    Ok(())
}

/// The creator, then the initial participants (invited by the creator,
/// with their roles' permissions patched as given); a participant named
/// twice is refused as already joined.
fn members(creator: &Participant, actor: &Actor, initial: Vec<participants::ParticipantSpec>) -> Result<Vec<Participant>> {
    let id = &creator.conversation_id;
    let mut members = vec![creator.clone()];
    for ip in initial {
        let pid = params::id("initialParticipants[].id", &ip.id)?.to_string();
        if members.iter().any(|m| m.id == pid) {
            return Err(error::already_joined(id, &pid));
        }
        let role = ip.role.unwrap_or(Role::Assistant);
        members.push(Participant {
            id: pid,
            conversation_id: id.clone(),
            kind: ip.kind.unwrap_or(ParticipantType::Agent),
            role,
            joined_at: creator.joined_at,
            left_at: None,
            permissions: Permissions::for_role(role).patched(&ip.permissions),
            invited_by: Some(actor.id.clone()),
            removed_by: None,
        });
    }
    Ok(members)
}

/// The initial turn, by the creator, complete.
fn first_turn(conv: &Conversation, creator: &Participant, t: InitialTurn) -> Result<Turn> {
    let spec = TurnSpec {
        content_type: t.content_type,
        content: t.content,
        thread_id: None,
        in_reply_to: None,
        visibility: t.visibility,
        metadata: t.metadata.unwrap_or_default(),
        status: TurnStatus::Complete,
    };
    turns::build(conv, &Ahead::none(&conv.id), creator, spec, TurnSource::Explicit { method: "mail/turn".into() })
}

/// The conversation, its members and the initial turn in one batch.
fn write(conv: &Conversation, members: &[Participant], initial_turn: Option<&Turn>) -> Result<()> {
    let mut batch = Batch::new();
    batch.put(&repo::CONVERSATIONS, conv.id.as_str(), conv);
    for m in members {
        batch.participant(m);
    }
    if let Some(t) = initial_turn {
        batch.turn(t);
    }
    batch.touch(&conv.id, conv.created_at);
    batch.apply()?;
    Ok(())
}

/// `mail.created`, a join event per member and the initial
/// turn's event, to the members just written.
fn announce_created(conv: &Conversation, members: &[Participant], initial_turn: Option<&Turn>) -> Result<()> {
    let mut created = json!({"conversationId": conv.id, "type": conv.kind, "createdBy": conv.created_by, "conversation": conv});
    if let Some(s) = &conv.subject {
        created["subject"] = json!(s);
    }
    if let Some(parent) = &conv.parent_conversation_id {
        created["parentConversationId"] = json!(parent);
    }
    events::emit_to(events::CREATED, members, created, None);
    for m in members {
        participants::announce_joined_to(members, m, None);
    }
    if let Some(t) = initial_turn {
        turns::announce_to(members, t, &turns::to_json(t)?);
    }
    Ok(())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct GetInclude {
    participants: bool,
    threads: bool,
    recent_turns: Option<u64>,
    stats: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetParams {
    conversation_id: String,
    #[serde(default)]
    include: GetInclude,
}

/// `mail/get`: a conversation the caller takes part in (or observes), with
/// the parts it asks for; turns and stats as this reader may see them.
pub fn get(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    let p: GetParams = call.params()?;
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, &[], &[])?;
    let reader = visit.reader(actor)?;
    let conv = visit.counted()?;
    let mut out = json!({ "conversation": conv });
    if p.include.participants {
        out["participants"] = json!(repo::participants(&conv.id)?);
    }
    if p.include.threads {
        out["threads"] = json!(threads::all_with_counts(&conv.id)?);
    }
    if let Some(n) = p.include.recent_turns.filter(|n| *n > 0) {
        reader.require_turns()?;
        let q = TurnQuery { descending: true, ..TurnQuery::new(&conv.id) };
        out["recentTurns"] = json!(q.page(&reader, (n as usize).min(turns::MAX_LIMIT), false)?.turns);
    }
    if p.include.stats {
        reader.require_turns()?;
        // Counted over what this reader may see, so stats reveal no hidden turns.
        let visible = TurnQuery::new(&conv.id).all(&reader)?;
        let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
        for t in &visible {
            *by_type.entry(&t.content_type).or_default() += 1;
        }
        out["stats"] = json!({
            "totalTurns": visible.len(),
            "turnsByContentType": by_type,
            "activeParticipants": conv.participant_count,
            "threadCount": repo::THREADS.count(&format!("{}/", conv.id))?,
        });
    }
    Ok(out.into())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ListFilter {
    #[serde(rename = "type")]
    kind: Option<OneOrMany<ConversationType>>,
    status: Option<OneOrMany<ConversationStatus>>,
    participant_id: Option<String>,
    created_after: Option<u64>,
    created_before: Option<u64>,
    parent_conversation_id: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ListParams {
    filter: ListFilter,
    limit: Option<u64>,
    cursor: Option<String>,
}

/// `mail/list`: the conversations the caller takes part in, oldest first,
/// filtered and paged (the cursor is the last conversation id of a page).
/// An observer client lists every conversation of the tenant, or with
/// `filter.participantId` those that participant takes part in.
///
/// Candidates are read a page of keys at a time, their records (and whether
/// `participantId` takes part) in one `get-many` per page; only the
/// conversations answered are counted.
pub fn list(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    let p: ListParams = call.params()?;
    let limit = params::limit(p.limit, 50, 200);
    let f = p.filter;
    let kinds = f.kind.map(OneOrMany::into_vec).unwrap_or_default();
    let statuses = f.status.map(OneOrMany::into_vec).unwrap_or_default();

    // Keys are `<pid>/<conv>` (memberships) or `<conv>` (every conversation).
    let (memberships, prefix, other) = match (actor.is_observer(), f.participant_id) {
        (true, Some(pid)) => (true, format!("{}/", repo::esc(&pid)), None),
        (true, None) => (false, String::new(), None),
        (false, pid) => (true, format!("{}/", repo::esc(&actor.id)), pid.filter(|pid| *pid != actor.id)),
    };
    let mut after = p.cursor.as_deref().map(|c| params::cursor(c, "conv-").map(|c| format!("{prefix}{c}"))).transpose()?;
    let mut found: Vec<Conversation> = Vec::new();
    let mut has_more = false;
    // The first page holds enough keys for the answer and the one that
    // tells whether there is more, when the filter keeps every one; pages
    // after it double, up to the SDK's page.
    let mut want = 0;
    'pages: loop {
        want = (want * 2).max(limit - found.len() + 1).min(PAGE as usize);
        let (ids, next) = if memberships {
            let page = repo::MEMBERSHIPS.prefix(prefix.clone()).resume(after.take()).page(want as u32)?;
            (page.entries.into_iter().map(|e| e.key[prefix.len()..].to_string()).collect::<Vec<_>>(), page.next)
        } else {
            let page = repo::CONVERSATIONS.all().resume(after.take()).page(want as u32)?;
            (page.entries.into_iter().map(|e| e.key).collect(), page.next)
        };
        for (conv, other_member) in repo::conversations(&ids, other.as_deref())? {
            let Some(c) = conv else { continue };
            let keep = (kinds.is_empty() || kinds.contains(&c.kind))
                && (statuses.is_empty() || statuses.contains(&c.status))
                && f.created_after.is_none_or(|t| c.created_at > t)
                && f.created_before.is_none_or(|t| c.created_at < t)
                && f.parent_conversation_id.as_ref().is_none_or(|pc| c.parent_conversation_id.as_ref() == Some(pc))
                && (other.is_none() || other_member);
            if !keep {
                continue;
            }
            if found.len() == limit {
                has_more = true;
                break 'pages;
            }
            found.push(c);
        }
        match next {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    for c in &mut found {
        c.participant_count = repo::count_participants(&c.id)?;
    }
    let mut out = json!({ "conversations": found, "hasMore": has_more });
    if has_more {
        out["nextCursor"] = json!(found.last().map(|c| c.id.clone()));
    }
    Ok(out.into())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CloseParams {
    conversation_id: String,
    reason: Option<String>,
    /// The final status: `completed` (default), `failed` or `archived`.
    status: Option<ConversationStatus>,
}

/// `mail/close`: end a conversation. Only its initiator or a moderator may.
pub fn close(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    let p: CloseParams = call.params()?;
    let status = p.status.unwrap_or(ConversationStatus::Completed);
    if matches!(status, ConversationStatus::Active | ConversationStatus::Paused) {
        return Err(Error::invalid_params("status must be completed, failed or archived"));
    }
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, &[], &[])?;
    let member = visit.member(actor)?;
    access::require_open(&visit.conv)?;
    let mut conv = visit.counted()?;
    if !member.role.is_manager() {
        return Err(error::permission_denied(
            format!("{} ({:?}) may not close conversation {}: only its initiator or a moderator may", member.id, member.role, conv.id),
            "role",
        ));
    }
    let now = ids::now_ms();
    conv.status = status;
    conv.closed_at = Some(now);
    conv.closed_by = Some(actor.id.clone());
    conv.close_reason = p.reason.clone();
    conv.updated_at = now;
    let mut batch = Batch::new();
    batch.put(&repo::CONVERSATIONS, conv.id.as_str(), &conv).touch(&conv.id, now);
    batch.apply()?;
    let mut data = json!({"conversationId": conv.id, "closedBy": actor.id, "participantId": actor.id, "status": status, "conversation": conv});
    if let Some(r) = &p.reason {
        data["reason"] = json!(r);
    }
    events::emit(events::CLOSED, &conv.id, data, None);
    Ok(json!({ "conversation": conv }).into())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReopenParams {
    conversation_id: String,
}

/// `mail/reopen`: make a closed conversation active again (no `closedAt`,
/// `closedBy` or `closeReason` any more). Only its initiator or a moderator
/// may, as for `mail/close`. Reopening an active conversation changes nothing
/// and answers it as it is, without an event, so a retry is harmless.
pub fn reopen(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    let p: ReopenParams = call.params()?;
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, &[], &[])?;
    let member = visit.member(actor)?;
    let mut conv = visit.counted()?;
    if !member.role.is_manager() {
        return Err(error::permission_denied(
            format!("{} ({:?}) may not reopen conversation {}: only its initiator or a moderator may", member.id, member.role, conv.id),
            "role",
        ));
    }
    if conv.is_open() {
        return Ok(json!({ "conversation": conv }).into());
    }
    let previous = conv.status;
    let now = ids::now_ms();
    conv.status = ConversationStatus::Active;
    conv.closed_at = None;
    conv.closed_by = None;
    conv.close_reason = None;
    conv.updated_at = now;
    let mut batch = Batch::new();
    batch.put(&repo::CONVERSATIONS, conv.id.as_str(), &conv).touch(&conv.id, now);
    batch.apply()?;
    let data = json!({
        "conversationId": conv.id,
        "reopenedBy": actor.id,
        "participantId": actor.id,
        "previousStatus": previous,
        "conversation": conv,
    });
    events::emit(events::REOPENED, &conv.id, data, None);
    Ok(json!({ "conversation": conv }).into())
}
