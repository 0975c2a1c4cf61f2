//! The records mail keeps, in the JSON shapes the SDK client reads.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ConversationType {
    UserSession,
    AgentTask,
    #[default]
    MultiAgent,
    Mixed,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum ConversationStatus {
    Active,
    Paused,
    Completed,
    Failed,
    Archived,
}

impl ConversationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Paused => "paused",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Archived => "archived",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: ConversationType,
    pub status: ConversationStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Derived on every read from the active-member index (never trusted from storage).
    #[serde(default)]
    pub participant_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_turn_id: Option<String>,
    pub created_at: u64,
    pub updated_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_reason: Option<String>,
    pub created_by: String,
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

impl Conversation {
    /// Only an active conversation takes turns, participants and threads.
    pub fn is_open(&self) -> bool {
        self.status == ConversationStatus::Active
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum ParticipantType {
    User,
    Agent,
    System,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Initiator,
    Assistant,
    Worker,
    Observer,
    Moderator,
}

impl Role {
    /// Roles that manage a conversation (close it, hold every permission).
    pub fn is_manager(self) -> bool {
        matches!(self, Role::Initiator | Role::Moderator)
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
#[serde(rename_all = "kebab-case")]
pub enum HistoryAccess {
    None,
    FromJoin,
    Full,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Permissions {
    pub can_send: bool,
    pub can_observe: bool,
    pub can_invite: bool,
    pub can_remove: bool,
    pub can_create_threads: bool,
    pub history_access: HistoryAccess,
    pub can_see_internal: bool,
}

/// Permissions as a request gives them: any subset.
#[derive(Deserialize, Clone, Copy, Default, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PermissionsPatch {
    pub can_send: Option<bool>,
    pub can_observe: Option<bool>,
    pub can_invite: Option<bool>,
    pub can_remove: Option<bool>,
    pub can_create_threads: Option<bool>,
    pub history_access: Option<HistoryAccess>,
    pub can_see_internal: Option<bool>,
}

impl Permissions {
    /// What a role gets unless the request says otherwise.
    pub fn for_role(role: Role) -> Permissions {
        let manager = role.is_manager();
        Permissions {
            can_send: role != Role::Observer,
            can_observe: true,
            can_invite: manager,
            can_remove: manager,
            can_create_threads: role != Role::Observer,
            history_access: HistoryAccess::Full,
            can_see_internal: manager,
        }
    }

    pub fn patched(mut self, p: &PermissionsPatch) -> Permissions {
        self.can_send = p.can_send.unwrap_or(self.can_send);
        self.can_observe = p.can_observe.unwrap_or(self.can_observe);
        self.can_invite = p.can_invite.unwrap_or(self.can_invite);
        self.can_remove = p.can_remove.unwrap_or(self.can_remove);
        self.can_create_threads = p.can_create_threads.unwrap_or(self.can_create_threads);
        self.history_access = p.history_access.unwrap_or(self.history_access);
        self.can_see_internal = p.can_see_internal.unwrap_or(self.can_see_internal);
        self
    }

    /// The first permission `self` holds that `granter` does not, if any.
    pub fn exceeds(&self, granter: &Permissions) -> Option<&'static str> {
        let flags = [
            ("canSend", self.can_send, granter.can_send),
            ("canObserve", self.can_observe, granter.can_observe),
            ("canInvite", self.can_invite, granter.can_invite),
            ("canRemove", self.can_remove, granter.can_remove),
            ("canCreateThreads", self.can_create_threads, granter.can_create_threads),
            ("canSeeInternal", self.can_see_internal, granter.can_see_internal),
        ];
        if let Some((name, ..)) = flags.iter().find(|(_, want, have)| *want && !*have) {
            return Some(name);
        }
        (self.history_access > granter.history_access).then_some("historyAccess")
    }
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Participant {
    pub id: String,
    pub conversation_id: String,
    #[serde(rename = "type")]
    pub kind: ParticipantType,
    pub role: Role,
    pub joined_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_at: Option<u64>,
    pub permissions: Permissions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invited_by: Option<String>,
    /// Who removed this participant; a removed participant needs a new invitation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_by: Option<String>,
}

impl Participant {
    pub fn is_active(&self) -> bool {
        self.left_at.is_none()
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum TurnSource {
    Explicit {
        method: String,
    },
    Intercepted {
        #[serde(rename = "messageId")]
        message_id: String,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Visibility {
    All,
    Participants { ids: Vec<String> },
    Role { roles: Vec<Role> },
    Private,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
#[serde(rename_all = "lowercase")]
pub enum TurnStatus {
    Pending,
    Streaming,
    #[default]
    Complete,
    Failed,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    pub id: String,
    pub conversation_id: String,
    pub participant: String,
    pub timestamp: u64,
    pub content_type: String,
    pub content: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    pub source: TurnSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<Visibility>,
    #[serde(default)]
    pub status: TurnStatus,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<u64>,
}

impl Turn {
    /// Visible to every participant (no audience restriction, not internal).
    pub fn is_public(&self) -> bool {
        matches!(self.visibility, None | Some(Visibility::All)) && !self.is_internal()
    }

    /// Internal turns (`metadata.internal: true`) need `canSeeInternal`.
    pub fn is_internal(&self) -> bool {
        self.metadata.get("internal").and_then(Value::as_bool).unwrap_or(false)
    }
}

/// Well-known content types; anything else must start with `x-`.
pub fn valid_content_type(ct: &str) -> bool {
    matches!(ct, "text" | "data" | "event" | "reference") || (ct.len() > 2 && ct.starts_with("x-"))
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    pub id: String,
    pub conversation_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub root_turn_id: String,
    /// Derived on read from the thread's turn index.
    #[serde(default)]
    pub turn_count: u64,
    /// Derived on read: distinct authors of the thread's turns.
    #[serde(default)]
    pub participant_count: u64,
    pub created_at: u64,
    pub updated_at: u64,
    pub created_by: String,
    /// 1 for a thread at the top of a conversation.
    pub depth: u32,
}

/// How often one participant spoke in the turns a digest covers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    pub id: String,
    pub turn_count: u64,
}

/// An extractive summary of turns (made by `digest`).
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct Digest {
    pub summary: String,
    pub key_points: Vec<String>,
    pub key_decisions: Vec<String>,
    pub open_questions: Vec<String>,
    pub participants: Vec<Activity>,
    pub turn_count: u64,
}

/// A digest as `summaries` keeps it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cached {
    pub digest: Digest,
    pub cached_at: u64,
    /// The conversation's state when the digest was made.
    pub version: String,
}

#[cfg(test)]
impl Participant {
    /// An active agent of `conv-1` in `role`, with the role's permissions, for tests to adjust.
    pub fn sample(id: &str, role: Role) -> Participant {
        Participant {
            id: id.into(),
            conversation_id: "conv-1".into(),
            kind: ParticipantType::Agent,
            role,
            joined_at: 0,
            left_at: None,
            permissions: Permissions::for_role(role),
            invited_by: None,
            removed_by: None,
        }
    }
}

#[cfg(test)]
impl Turn {
    /// A complete, explicit text turn of `conv-1` by `by`, for tests to adjust.
    pub fn sample(id: &str, by: &str) -> Turn {
        Turn {
            id: id.into(),
            conversation_id: "conv-1".into(),
            participant: by.into(),
            timestamp: 1,
            content_type: "text".into(),
            content: Value::Null,
            thread_id: None,
            in_reply_to: None,
            source: TurnSource::Explicit { method: "mail/turn".into() },
            visibility: None,
            status: TurnStatus::Complete,
            metadata: Map::new(),
            updated_at: None,
        }
    }
}
