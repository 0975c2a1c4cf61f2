//! Events: what the core emits (this file) and what a subscription filter
//! selects (`filter`, with event type matching and spelling in `spelling`).

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod filter;
mod spelling;

pub use self::filter::{DataFilterSpec, Filter};

/// The event telling a participant its permissions changed: a session
/// that may not observe still gets it (see `Fabric::observing`).
pub const PERMISSIONS_UPDATED: &str = "permissions_client_updated";

/// Who caused an event. On the wire `event.source` is one id, as the
/// schema's `ParticipantId` says: the agent, else the participant (null
/// when neither); the scope is a filter facet only.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub agent_id: Option<String>,
    pub participant_id: Option<String>,
    pub scope_id: Option<String>,
}

impl Serialize for Source {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.agent_id.as_ref().or(self.participant_id.as_ref()).serialize(s)
    }
}

/// Facts about an event that filters match on, captured when it is emitted
/// (an agent's role or scopes may change later; the event keeps what was true).
#[derive(Debug, Clone, Default)]
pub struct Facets {
    /// Role of the agent the event comes from (`source.agentId`).
    pub source_role: Option<Arc<str>>,
    /// Roles of every agent the event concerns.
    pub roles: Vec<Arc<str>>,
    /// Scopes the event concerns.
    pub scopes: Vec<String>,
    pub priority: Option<Cow<'static, str>>,
    pub correlation_id: Option<String>,
    pub metadata: Option<Value>,
}

/// An event before the fabric numbers it.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The type as emitted (core types are static; plugins name their own).
    pub kind: Cow<'static, str>,
    pub source: Source,
    pub data: Value,
    /// `data` already serialised (hot paths build it as text); `data` is then null.
    pub data_text: Option<String>,
    pub caused_by: Option<String>,
    pub facets: Facets,
    /// Sessions allowed to see the event (`None`: every session of the tenant).
    pub audience: Option<Vec<String>>,
    /// Kept for `map/replay` (false: only pushed to current subscribers).
    pub recorded: bool,
    /// The agent the event is about, when its visibility hides it from some:
    /// its audience is then set from the registry before publishing.
    pub hidden_agent: Option<Box<super::model::Agent>>,
}

impl NewEvent {
    /// Whether a session may see this event.
    pub fn visible_to(&self, session: &str) -> bool {
        self.audience.as_ref().is_none_or(|a| a.iter().any(|s| s == session))
    }

    pub fn new(kind: impl Into<Cow<'static, str>>, source: Source, data: Value) -> NewEvent {
        let facets = Facets { scopes: source.scope_id.iter().cloned().collect(), ..Facets::default() };
        NewEvent { kind: kind.into(), source, data, data_text: None, caused_by: None, facets, audience: None, recorded: true, hidden_agent: None }
    }

    /// An event whose `data` is given as JSON text.
    pub fn with_text(kind: impl Into<Cow<'static, str>>, source: Source, data: String) -> NewEvent {
        NewEvent { data_text: Some(data), ..NewEvent::new(kind, source, Value::Null) }
    }
}

/// A recorded event as the durable log and the cluster carry it: what
/// fan-out, filters and replay need, with `data` as JSON text.
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredEvent {
    pub id: String,
    pub ts: u64,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    pub data: Box<serde_json::value::RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caused_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_role: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Arc<str>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<String>>,
}

impl StoredEvent {
    pub fn of(id: &str, ts: u64, e: &NewEvent) -> StoredEvent {
        let data = match &e.data_text {
            Some(text) => text.clone(),
            None => serde_json::to_string(&e.data).expect("data serialises"),
        };
        StoredEvent {
            id: id.to_string(),
            ts,
            kind: e.kind.to_string(),
            agent: e.source.agent_id.clone(),
            participant: e.source.participant_id.clone(),
            scope: e.source.scope_id.clone(),
            data: serde_json::value::RawValue::from_string(data).unwrap_or_else(|_| serde_json::value::RawValue::from_string("null".into()).expect("null")),
            caused_by: e.caused_by.clone(),
            source_role: e.facets.source_role.clone(),
            roles: e.facets.roles.clone(),
            scopes: e.facets.scopes.clone(),
            priority: e.facets.priority.as_ref().map(|p| p.to_string()),
            correlation_id: e.facets.correlation_id.clone(),
            metadata: e.facets.metadata.clone(),
            audience: e.audience.clone(),
        }
    }

    /// The event back, with its id and timestamp.
    pub fn into_event(self) -> (String, u64, NewEvent) {
        let source = Source { agent_id: self.agent, participant_id: self.participant, scope_id: self.scope };
        let facets = Facets {
            source_role: self.source_role,
            roles: self.roles,
            scopes: self.scopes,
            priority: self.priority.map(Cow::Owned),
            correlation_id: self.correlation_id,
            metadata: self.metadata,
        };
        let event = NewEvent {
            kind: Cow::Owned(self.kind),
            source,
            data: Value::Null,
            data_text: Some(String::from(self.data.get())),
            caused_by: self.caused_by,
            facets,
            audience: self.audience,
            recorded: true,
            hidden_agent: None,
        };
        (self.id, self.ts, event)
    }
}
