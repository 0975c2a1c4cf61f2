//! Events: what the core emits, what a subscription filter selects.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// A filter key an extension declares over its events' `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct DataFilterSpec {
    pub key: String,
    /// A type or `prefix.*`.
    pub event_types: String,
    /// Field name → paths in `data` (each a list of keys), tried in order.
    pub fields: Vec<(String, Vec<Vec<String>>)>,
}

/// A data filter of one subscription, resolved against its tenant's declarations.
#[derive(Debug, Clone)]
struct DataFilter {
    event_types: String,
    /// Paths, and the string the first present one must hold.
    conditions: Vec<(Vec<Vec<String>>, String)>,
}

/// A subscription filter: AND across fields, OR within a field. Absent or
/// empty fields select everything.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Filter {
    pub event_types: Vec<String>,
    /// The SDK's name for `agents`; both are accepted, `*` globs too.
    pub from_agents: Vec<String>,
    pub agents: Vec<String>,
    pub from_roles: Vec<String>,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
    pub priorities: Vec<String>,
    pub correlation_ids: Vec<String>,
    pub metadata_match: Map<String, Value>,
    /// Keys of no core field: extension filters, resolved by `resolve` (and
    /// kept, so the filter serialises as it was given).
    #[serde(flatten)]
    pub other: Map<String, Value>,
    #[serde(skip)]
    data: Vec<DataFilter>,
}

/// One byte of a normalised event type: `agent_registered` and
/// `agent.registered` are one type.
fn norm(b: u8) -> u8 {
    if b == b'_' {
        b'.'
    } else {
        b
    }
}

/// Whether two event types are equal once normalised (no allocation: this runs per event and subscription).
fn same_type(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| norm(*x) == norm(*y))
}

fn glob(pattern: &str, value: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == value,
        Some((head, rest)) => {
            if !value.starts_with(head) {
                return false;
            }
            let tail = &value[head.len()..];
            if rest.is_empty() {
                return true;
            }
            (0..=tail.len()).filter(|i| tail.is_char_boundary(*i)).any(|i| glob(rest, &tail[i..]))
        }
    }
}

fn any_in(list: &[String], value: Option<&str>) -> bool {
    list.is_empty() || value.is_some_and(|v| list.iter().any(|x| x == v))
}

fn str_at<'a>(data: &'a Value, paths: &[Vec<String>]) -> Option<&'a str> {
    paths.iter().find_map(|path| {
        let mut v = data;
        for key in path {
            v = v.get(key)?;
        }
        v.as_str()
    })
}

impl Filter {
    /// Turn extension keys into data filters with the tenant's declarations
    /// (`spec_of(key)`). A key no extension declares is ignored, as unknown
    /// keys are; a declared field given a non-string value is an error.
    pub fn resolve(mut self, spec_of: impl Fn(&str) -> Option<DataFilterSpec>) -> Result<Filter, String> {
        for (key, wanted) in self.other.clone() {
            let Some(spec) = spec_of(&key) else { continue };
            let wanted = match wanted {
                Value::Object(m) => m,
                Value::Null => Map::new(),
                _ => return Err(format!("filter.{key} must be an object")),
            };
            let mut conditions = Vec::new();
            for (name, paths) in &spec.fields {
                match wanted.get(name) {
                    None | Some(Value::Null) => {}
                    Some(Value::String(v)) => conditions.push((paths.clone(), v.clone())),
                    Some(_) => return Err(format!("filter.{key}.{name} must be a string")),
                }
            }
            self.data.push(DataFilter { event_types: spec.event_types.clone(), conditions });
        }
        Ok(self)
    }

    /// The type an event selected by this filter is delivered as: spelled
    /// as the first pattern of `eventTypes` that matches it names it (dotted
    /// or snake_case); with no `eventTypes`, as emitted.
    pub fn spelling<'a>(&'a self, kind: &'a str) -> Cow<'a, str> {
        match self.event_types.iter().find(|t| type_matches(t.as_bytes(), kind.as_bytes())) {
            Some(pattern) => spelled_as(pattern, kind),
            None => Cow::Borrowed(kind),
        }
    }

    pub fn matches(&self, event: &NewEvent) -> bool {
        self.matches_with(event, &OnceCell::new())
    }

    /// [`Filter::matches`] for one event offered to many filters: data given
    /// as text (a plugin's events) is parsed into `parsed` at most once, and
    /// only for a filter that reads it.
    pub fn matches_with(&self, event: &NewEvent, parsed: &OnceCell<Value>) -> bool {
        let f = &event.facets;
        let kind = event.kind.as_bytes();
        if !self.event_types.is_empty() && !self.event_types.iter().any(|t| type_matches(t.as_bytes(), kind)) {
            return false;
        }
        let agent_patterns = self.from_agents.iter().chain(&self.agents);
        if (!self.from_agents.is_empty() || !self.agents.is_empty())
            && !event.source.agent_id.as_deref().is_some_and(|a| agent_patterns.clone().any(|p| glob(p, a)))
        {
            return false;
        }
        if !any_in(&self.from_roles, f.source_role.as_deref()) {
            return false;
        }
        if !self.roles.is_empty() && !f.roles.iter().any(|r| self.roles.iter().any(|want| want.as_str() == &**r)) {
            return false;
        }
        if !self.scopes.is_empty() && !f.scopes.iter().any(|s| self.scopes.contains(s)) {
            return false;
        }
        if !any_in(&self.priorities, f.priority.as_deref()) || !any_in(&self.correlation_ids, f.correlation_id.as_deref()) {
            return false;
        }
        if !self.metadata_match.is_empty() {
            let Some(meta) = f.metadata.as_ref().and_then(Value::as_object) else { return false };
            if !self.metadata_match.iter().all(|(k, v)| meta.get(k) == Some(v)) {
                return false;
            }
        }
        let data = || match &event.data_text {
            Some(text) if event.data.is_null() => parsed.get_or_init(|| serde_json::from_str(text).unwrap_or(Value::Null)),
            _ => &event.data,
        };
        for d in &self.data {
            if !type_matches(d.event_types.as_bytes(), kind) || !d.conditions.iter().all(|(paths, want)| str_at(data(), paths) == Some(want.as_str())) {
                return false;
            }
        }
        true
    }
}

/// The SDK's names for core event types that differ by more than the
/// separator (`agent.registered` already equals `agent_registered`).
const ALIASES: &[(&[u8], &[u8])] = &[
    (b"session.connected", b"participant_connected"),
    (b"session.disconnected", b"participant_disconnected"),
    (b"session.*", b"participant.*"),
];

/// The core type a filter pattern stands for (an alias resolved).
fn unalias(pattern: &[u8]) -> &[u8] {
    ALIASES.iter().find(|(alias, _)| same_type(alias, pattern)).map_or(pattern, |(_, core)| *core)
}

/// A filter's type pattern (`*`, `prefix.*` or a type) against an event type; `_` and `.` are one separator.
fn type_matches(pattern: &[u8], kind: &[u8]) -> bool {
    let pattern = unalias(pattern);
    match pattern.strip_suffix(b".*").or_else(|| pattern.strip_suffix(b"_*")) {
        Some(prefix) => kind.len() > prefix.len() && same_type(prefix, &kind[..prefix.len()]) && norm(kind[prefix.len()]) == b'.',
        None => pattern == b"*" || same_type(pattern, kind),
    }
}

/// An event type as the pattern that selected it spells it: a named type
/// as the pattern names it; under `prefix.*` or `prefix_*`, the pattern's
/// prefix and the rest of the type with that separator; under `*`, as emitted.
fn spelled_as<'a>(pattern: &'a str, kind: &'a str) -> Cow<'a, str> {
    let Some(prefix) = pattern.strip_suffix('*').filter(|p| !p.is_empty()) else {
        return Cow::Borrowed(if pattern == "*" { kind } else { pattern });
    };
    // Both end with their separator: `session.` against `participant_`.
    let core_len = unalias(pattern.as_bytes()).len() - 1;
    let sep = if prefix.ends_with('_') { '_' } else { '.' };
    let rest = kind.get(core_len..).unwrap_or_default();
    let mut s = String::with_capacity(prefix.len() + rest.len());
    s.push_str(prefix);
    s.extend(rest.chars().map(|c| if c == '.' || c == '_' { sep } else { c }));
    Cow::Owned(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(kind: &'static str, agent: Option<&str>) -> NewEvent {
        NewEvent::new(kind, Source { agent_id: agent.map(String::from), ..Default::default() }, json!({}))
    }

    fn filter(v: Value) -> Filter {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn event_types_exact_prefix_and_separator() {
        let f = filter(json!({"eventTypes": ["agent.*"]}));
        assert!(f.matches(&ev("agent_registered", None)));
        assert!(f.matches(&ev("agent.registered", None)));
        assert!(!f.matches(&ev("agentx_registered", None)));
        assert!(!f.matches(&ev("agent", None)));
        let f = filter(json!({"eventTypes": ["message_sent"]}));
        assert!(f.matches(&ev("message.sent", None)));
        assert!(!f.matches(&ev("message_delivered", None)));
        let f = filter(json!({"eventTypes": ["session.connected"]}));
        assert!(f.matches(&ev("participant_connected", None)));
        assert!(!f.matches(&ev("participant_disconnected", None)));
        assert!(filter(json!({"eventTypes": ["session.*"]})).matches(&ev("participant_disconnected", None)));
        for (alias, core) in [("agent.state.changed", "agent_state_changed"), ("scope.member.joined", "scope_member_joined"), ("message.delivered", "message_delivered")] {
            assert!(filter(json!({"eventTypes": [alias]})).matches(&ev(core, None)), "{alias}");
        }
    }

    #[test]
    fn types_are_spelled_as_the_filter_names_them() {
        let spelled = |types: Value, kind: &str| filter(json!({"eventTypes": types})).spelling(kind).into_owned();
        assert_eq!(spelled(json!(["agent.registered"]), "agent_registered"), "agent.registered");
        assert_eq!(spelled(json!(["agent_registered"]), "agent_registered"), "agent_registered");
        assert_eq!(spelled(json!(["session.connected"]), "participant_connected"), "session.connected");
        assert_eq!(spelled(json!(["session_connected"]), "participant_connected"), "session_connected");
        assert_eq!(spelled(json!(["participant.connected"]), "participant_connected"), "participant.connected");
        assert_eq!(spelled(json!(["agent.*"]), "agent_state_changed"), "agent.state.changed");
        assert_eq!(spelled(json!(["agent_*"]), "agent_state_changed"), "agent_state_changed");
        assert_eq!(spelled(json!(["session.*"]), "participant_disconnected"), "session.disconnected");
        assert_eq!(spelled(json!(["mail.turn.*"]), "mail.turn.added"), "mail.turn.added");
        assert_eq!(spelled(json!(["mail_*"]), "mail.turn.added"), "mail_turn_added");
        assert_eq!(spelled(json!(["*"]), "agent_registered"), "agent_registered");
        assert_eq!(spelled(json!([]), "agent_registered"), "agent_registered");
        // The first pattern that matches decides.
        assert_eq!(spelled(json!(["scope.created", "agent_*", "agent.*"]), "agent_registered"), "agent_registered");
    }

    #[test]
    fn agents_globs_and_aliases() {
        let f = filter(json!({"agents": ["worker-*"]}));
        assert!(f.matches(&ev("x", Some("worker-1"))));
        assert!(!f.matches(&ev("x", Some("boss"))));
        assert!(!f.matches(&ev("x", None)));
        let f = filter(json!({"fromAgents": ["a"], "agents": ["b"]}));
        assert!(f.matches(&ev("x", Some("b"))));
    }

    /// A declaration like mail's.
    fn mail_spec(key: &str) -> Option<DataFilterSpec> {
        let path = |p: &str| p.split('.').map(String::from).collect::<Vec<_>>();
        (key == "mail").then(|| DataFilterSpec {
            key: "mail".into(),
            event_types: "mail.*".into(),
            fields: vec![
                ("conversationId".into(), vec![path("conversationId"), path("turn.conversationId")]),
                ("threadId".into(), vec![path("turn.threadId"), path("threadId")]),
                ("contentType".into(), vec![path("turn.contentType")]),
            ],
        })
    }

    #[test]
    fn undeclared_keys_are_ignored_and_bad_values_refused() {
        let f = filter(json!({"nobody": {"x": "y"}})).resolve(mail_spec).unwrap();
        assert!(f.matches(&ev("agent.registered", None)));
        assert!(filter(json!({"mail": {"conversationId": 7}})).resolve(mail_spec).is_err());
        assert!(filter(json!({"mail": "c1"})).resolve(mail_spec).is_err());
    }

    #[test]
    fn metadata_and_extension_data() {
        let mut e = ev("mail.turn.added", None);
        e.facets.metadata = Some(json!({"team": "red", "n": 1}));
        e.data = json!({"conversationId": "c1", "turn": {"threadId": "t1", "participant": "p", "contentType": "text"}});
        assert!(filter(json!({"metadataMatch": {"team": "red"}})).matches(&e));
        assert!(!filter(json!({"metadataMatch": {"team": "blue"}})).matches(&e));
        let data = |v: Value| filter(v).resolve(mail_spec).unwrap();
        assert!(data(json!({"mail": {"conversationId": "c1", "threadId": "t1", "contentType": "text"}})).matches(&e));
        assert!(!data(json!({"mail": {"conversationId": "c2"}})).matches(&e));
        assert!(!data(json!({"mail": {}})).matches(&ev("agent.registered", None)));
        // The same data given as text (as plugins give it) matches the same way.
        let text = NewEvent::with_text("mail.turn.added", e.source.clone(), e.data.to_string());
        assert!(data(json!({"mail": {"conversationId": "c1", "threadId": "t1"}})).matches(&text));
        assert!(!data(json!({"mail": {"conversationId": "c2"}})).matches(&text));
    }
}
