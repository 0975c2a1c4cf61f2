//! Subscription filters: which events a filter selects, extension data
//! filters resolved against a tenant's declarations.

use std::borrow::Cow;
use std::cell::OnceCell;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::spelling::{spelled_as, type_matches};
use super::NewEvent;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Source;
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
        for (alias, core) in
            [("agent.state.changed", "agent_state_changed"), ("scope.member.joined", "scope_member_joined"), ("message.delivered", "message_delivered")]
        {
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
