//! Participants: `mail/join`, `mail/leave`, `mail/invite`, `mail/presence`.

use map_plugin_sdk::store::Batch;
use map_plugin_sdk::{ids, router, Call, Reply, Result};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::access::{self, Actor};
use crate::error;
use crate::events;
use crate::model::{Participant, ParticipantType, Permissions, PermissionsPatch, Role};
use crate::params;
use crate::repo::{self, Writes};
use crate::summary;
use crate::turns::{self, TurnQuery};

/// Announce a participant who joined or was added.
pub fn announce_joined(p: &Participant, invitation: Option<(&str, Option<&str>)>) {
    announce_joined_to(&events::audience(&p.conversation_id), p, invitation);
}

/// [`announce_joined`] to participants already known to be the current ones.
pub fn announce_joined_to(current: &[Participant], p: &Participant, invitation: Option<(&str, Option<&str>)>) {
    let mut data = json!({"conversationId": p.conversation_id, "participant": p});
    if let Some((by, message)) = invitation {
        data["invitedBy"] = json!(by);
        if let Some(m) = message {
            data["message"] = json!(m);
        }
    }
    events::emit_to(events::PARTICIPANT_JOINED, current, data, None);
}

/// Where a joining participant's catch-up history starts.
#[derive(Deserialize)]
#[serde(untagged)]
enum CatchUpFrom {
    Timestamp(u64),
    TurnId(String),
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct CatchUp {
    from: Option<CatchUpFrom>,
    limit: Option<u64>,
    include_summary: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JoinParams {
    conversation_id: String,
    role: Option<Role>,
    catch_up: Option<CatchUp>,
}

/// `mail/join`: the caller joins an active conversation. Joining on one's own
/// cannot make one initiator or moderator; someone who left and comes back
/// keeps the role and permissions they had.
pub fn join(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    actor.require_capability("canJoin", "mail/join")?;
    let p: JoinParams = call.params()?;
    let catch_up_turn = match p.catch_up.as_ref().and_then(|c| c.from.as_ref()) {
        Some(CatchUpFrom::TurnId(id)) => Some(id.as_str()),
        _ => None,
    };
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, &[], catch_up_turn.as_slice())?;
    access::require_open(&visit.conv)?;
    let mut conv = visit.counted()?;
    let previous = visit.record().cloned();
    if previous.as_ref().is_some_and(Participant::is_active) {
        return Err(error::already_joined(&conv.id, &actor.id));
    }
    if let Some(by) = previous.as_ref().and_then(|old| old.removed_by.as_deref()) {
        return Err(error::permission_denied(format!("{} was removed by {by} and needs a new invitation", actor.id), "invitation"));
    }
    if let Some(role) = p.role.filter(|r| r.is_manager()) {
        return Err(error::permission_denied(format!("joining as {role:?} needs an invitation"), "role"));
    }
    let now = ids::now_ms();
    let participant = match previous {
        Some(old) => Participant { joined_at: now, left_at: None, ..old },
        None => {
            let role = p.role.unwrap_or(Role::Assistant);
            Participant {
                id: actor.id.clone(),
                conversation_id: conv.id.clone(),
                kind: actor.kind,
                role,
                joined_at: now,
                left_at: None,
                permissions: Permissions::for_role(role),
                invited_by: None,
                removed_by: None,
            }
        }
    };
    // Check the catch-up point before anything is written.
    let mut history = None;
    if let Some(c) = p.catch_up {
        let mut q = TurnQuery::new(&conv.id);
        match &c.from {
            Some(CatchUpFrom::Timestamp(ts)) => q.after_ts = Some(ts.saturating_sub(1)),
            Some(CatchUpFrom::TurnId(id)) => q.after_id = Some(visit.visible_turn(id, &participant)?.id),
            None => {}
        }
        history = Some((q, c));
    }
    let mut batch = Batch::new();
    batch.participant(&participant).touch(&conv.id, now);
    batch.apply()?;
    announce_joined(&participant, None);
    conv.participant_count += 1;
    conv.updated_at = now;

    let mut out = json!({"conversation": conv, "participant": participant});
    if let Some((q, c)) = history {
        let page = q.page(&participant, params::limit(c.limit, turns::DEFAULT_LIMIT, turns::MAX_LIMIT), false)?;
        if page.has_more {
            out["historyCursor"] = json!(page.turns.last().map(|t| t.id.clone()));
        }
        out["history"] = json!(page.turns);
        if c.include_summary {
            let s = summary::for_reader(&conv, &visit.ahead, &participant, &summary::Scope::default(), false)?;
            out["summary"] = json!(s.digest.summary);
        }
    }
    Ok(out.into())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaveParams {
    conversation_id: String,
    reason: Option<String>,
    /// Another participant to remove (needs `canRemove`); absent: the caller leaves.
    participant_id: Option<String>,
}

/// `mail/leave`: the caller leaves, or removes another participant.
pub fn leave(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    let p: LeaveParams = call.params()?;
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, &[], &[])?;
    let conv = &visit.conv;
    let me = visit.member(actor)?;
    let target = match p.participant_id.as_deref().filter(|id| *id != actor.id) {
        None => me,
        Some(other) => {
            access::require_permission(me.permissions.can_remove, &me, "canRemove", "remove participants")?;
            match repo::participant(&conv.id, other)? {
                Some(t) if t.is_active() => t,
                _ => return Err(error::participant_not_found(&conv.id, other)),
            }
        }
    };
    let now = ids::now_ms();
    let removed_by = (target.id != actor.id).then(|| actor.id.clone());
    let left = Participant { left_at: Some(now), removed_by, ..target };
    let mut batch = Batch::new();
    batch.participant(&left).touch(&conv.id, now);
    batch.apply()?;
    let mut data = json!({"conversationId": conv.id, "participantId": left.id, "participant": left});
    if let Some(r) = &p.reason {
        data["reason"] = json!(r);
    }
    if left.id != actor.id {
        data["removedBy"] = json!(actor.id);
    }
    events::emit(events::PARTICIPANT_LEFT, &conv.id, data, Some(&left.id));
    Ok(json!({"success": true, "leftAt": now, "participantId": left.id}).into())
}

/// A participant named by `mail/create` (`initialParticipants`) or `mail/invite`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParticipantSpec {
    pub id: String,
    pub role: Option<Role>,
    #[serde(rename = "type")]
    pub kind: Option<ParticipantType>,
    #[serde(default)]
    pub permissions: PermissionsPatch,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InviteParams {
    conversation_id: String,
    participant: ParticipantSpec,
    message: Option<String>,
}

/// `mail/invite`: a participant with `canInvite` adds someone. Nobody can
/// grant a permission they do not hold, nor the initiator role.
pub fn invite(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    actor.require_capability("canInvite", "mail/invite")?;
    let p: InviteParams = call.params()?;
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, &[], &[])?;
    let conv = &visit.conv;
    let inviter = visit.member(actor)?;
    access::require_open(conv)?;
    access::require_permission(inviter.permissions.can_invite, &inviter, "canInvite", "invite participants")?;
    let invitee_id = params::id("participant.id", &p.participant.id)?.to_string();
    let role = p.participant.role.unwrap_or(Role::Assistant);
    if role == Role::Initiator {
        return Err(error::permission_denied("the initiator role cannot be given by invitation", "role"));
    }
    let permissions = Permissions::for_role(role).patched(&p.participant.permissions);
    if let Some(perm) = permissions.exceeds(&inviter.permissions) {
        return Err(error::permission_denied(format!("{} cannot grant {perm}, which it does not hold", inviter.id), perm));
    }
    if repo::participant(&conv.id, &invitee_id)?.is_some_and(|x| x.is_active()) {
        return Err(error::already_joined(&conv.id, &invitee_id));
    }
    let now = ids::now_ms();
    let participant = Participant {
        id: invitee_id,
        conversation_id: conv.id.clone(),
        kind: p.participant.kind.unwrap_or(ParticipantType::Agent),
        role,
        joined_at: now,
        left_at: None,
        permissions,
        invited_by: Some(actor.id.clone()),
        removed_by: None,
    };
    let mut batch = Batch::new();
    batch.participant(&participant).touch(&conv.id, now);
    batch.apply()?;
    announce_joined(&participant, Some((&actor.id, p.message.as_deref())));
    Ok(json!({"invited": true, "participant": participant}).into())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PresenceParams {
    conversation_id: String,
}

/// `mail/presence`: which of the conversation's current participants are
/// connected to the gateway now (`presence` "online" or "offline", as mail
/// v1.1 names it, and the `online` flag), and since when (Unix ms: when the
/// session of a participant connected or last resumed, when an agent
/// registered), with each one's `role` and `joinedAt`. A participant whose
/// session dropped and awaits a resume is offline. For participants and
/// observer clients.
pub fn presence(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    let p: PresenceParams = call.params()?;
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, &[], &[])?;
    let conv = &visit.conv;
    visit.reader(actor)?;
    let current: Vec<Participant> = repo::participants(&conv.id)?.into_iter().filter(Participant::is_active).collect();
    let ids: Vec<String> = current.iter().map(|p| p.id.clone()).collect();
    let since = router::connected_since(&ids);
    let participants: Vec<Value> = current
        .into_iter()
        .zip(since.into_iter().chain(std::iter::repeat(None)))
        .map(|(p, since)| {
            let presence = if since.is_some() { "online" } else { "offline" };
            let mut entry = json!({"participantId": p.id, "role": p.role, "joinedAt": p.joined_at, "presence": presence, "online": since.is_some()});
            if let Some(at) = since {
                entry["since"] = json!(at);
            }
            entry
        })
        .collect();
    Ok(json!({"conversationId": conv.id, "participants": participants}).into())
}
