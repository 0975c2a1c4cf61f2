//! JSON-RPC methods: one call in ([`Call`]), its result out ([`Reply`]), a
//! table routing method names to handlers ([`Methods`]) and what the
//! extension declares about itself ([`Describe`]).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bindings::map_gateway::plugin::types::Caller;
use crate::error::{Error, Result};
use crate::params;

/// One call of a declared method.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// Who calls: tenant, participant, session, agents, declared capabilities.
    pub caller: &'a Caller,
    /// The method name, e.g. `notes/put`.
    pub method: &'a str,
    /// The request's params as JSON text (`{}` when absent).
    pub params: &'a str,
}

impl<'a> Call<'a> {
    pub fn new(caller: &'a Caller, method: &'a str, params: &'a str) -> Call<'a> {
        Call { caller, method, params }
    }

    /// The params decoded into `T`; malformed ones are -32602 naming the method.
    pub fn params<T: DeserializeOwned>(&self) -> Result<T> {
        params::parse(self.method, self.params)
    }

    /// Like [`params`](Call::params), for a `T` that borrows from the request text.
    pub fn params_borrowed<T: Deserialize<'a>>(&self) -> Result<T> {
        params::parse_borrowed(self.method, self.params)
    }

    /// The caller's declared capabilities (`null` when none or malformed).
    pub fn capabilities(&self) -> Value {
        serde_json::from_str(&self.caller.capabilities).unwrap_or(Value::Null)
    }

    /// Did the caller declare `false` at this dotted path of its capabilities
    /// (e.g. `notes.canWrite`)? Absent or any other value is not a refusal.
    pub fn declined(&self, path: &str) -> bool {
        let pointer: String = path.split('.').map(|p| format!("/{p}")).collect();
        self.capabilities().pointer(&pointer) == Some(&Value::Bool(false))
    }
}

/// A method's JSON-RPC result, as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply(String);

impl Reply {
    /// Serialise `value`; a value serde cannot write as JSON (a map with
    /// non-string keys, say) is -32603.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Reply> {
        serde_json::to_string(value).map(Reply).map_err(|e| Error::internal(format!("The result cannot be written as JSON: {e}")))
    }

    /// JSON text made elsewhere. It must be well-formed: the host answers
    /// anything else with -32603.
    pub fn raw(text: impl Into<String>) -> Reply {
        Reply(text.into())
    }

    /// `null`.
    pub fn null() -> Reply {
        Reply("null".into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl From<Value> for Reply {
    fn from(v: Value) -> Reply {
        Reply(v.to_string())
    }
}

/// What serves one method.
pub type Handler = fn(&Call<'_>) -> Result<Reply>;

/// The methods of an extension: names and their handlers. `describe` lists
/// the names, and [`dispatch`](Methods::dispatch) routes a call by name.
///
/// ```
/// use map_plugin_sdk::{Call, Methods, Reply, Result};
/// fn ping(_: &Call) -> Result<Reply> { Ok(Reply::raw(r#""pong""#)) }
/// const METHODS: Methods = Methods::new(&[("demo/ping", ping)]);
/// # assert_eq!(METHODS.names(), ["demo/ping"]);
/// ```
#[derive(Clone, Copy)]
pub struct Methods(&'static [(&'static str, Handler)]);

impl Methods {
    pub const fn new(table: &'static [(&'static str, Handler)]) -> Methods {
        Methods(table)
    }

    /// The method names, in table order.
    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|(name, _)| name.to_string()).collect()
    }

    pub fn find(&self, method: &str) -> Option<Handler> {
        self.0.iter().find(|(name, _)| *name == method).map(|(_, h)| *h)
    }

    pub fn contains(&self, method: &str) -> bool {
        self.find(method).is_some()
    }

    /// Run the handler of `call.method`; an unknown method is -32601.
    pub fn dispatch(&self, call: &Call<'_>) -> Result<Reply> {
        match self.find(call.method) {
            Some(handler) => handler(call),
            None => Err(Error::method_not_found(call.method)),
        }
    }
}

impl std::fmt::Debug for Methods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(name, _)| name)).finish()
    }
}

/// What an extension declares, read at load and once for each tenant (with
/// that tenant's `config`). The error range comes from `Extension::ERRORS`
/// and the methods, unless set here, from `Extension::METHODS`.
#[derive(Debug, Clone, PartialEq)]
pub struct Describe {
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The version of the protocol the extension implements, when it is not
    /// the plugin's own (`protocolVersion` in the capability group).
    pub protocol_version: Option<String>,
    pub uri: String,
    pub capability_group: String,
    pub capabilities: Value,
    /// Empty: the names of `Extension::METHODS`.
    pub methods: Vec<String>,
    pub event_filters: Vec<EventFilter>,
}

impl Describe {
    /// `name` (e.g. `notes`) at `version` (pass `env!("CARGO_PKG_VERSION")`),
    /// with the URI `urn:map:ext:<name>:1`, the capability group `<name>`
    /// and the capabilities `{"enabled": true}`. An experimental extension
    /// (a name with the `x-` prefix, e.g. `x-notes`) gets the URI
    /// `x-notes:1` instead: `urn:map:ext:` URIs are for registered ones.
    pub fn new(name: &str, version: &str) -> Describe {
        let uri = match name.starts_with("x-") {
            true => format!("{name}:1"),
            false => format!("urn:map:ext:{name}:1"),
        };
        Describe {
            name: name.into(),
            version: version.into(),
            protocol_version: None,
            uri,
            capability_group: name.into(),
            capabilities: serde_json::json!({ "enabled": true }),
            methods: Vec::new(),
            event_filters: Vec::new(),
        }
    }

    /// The version of the protocol the extension implements (e.g. `1.1.0`
    /// for mail v1.1), listed as its `version` in `capabilities.extensions`
    /// beside the plugin's own (`pluginVersion`). Its major must be the URI's.
    pub fn protocol_version(mut self, version: &str) -> Describe {
        self.protocol_version = Some(version.into());
        self
    }

    /// The URI listed in `capabilities.extensions`.
    pub fn uri(mut self, uri: &str) -> Describe {
        self.uri = uri.into();
        self
    }

    /// The key under which `capabilities` appear in `map/connect`.
    pub fn capability_group(mut self, group: &str) -> Describe {
        self.capability_group = group.into();
        self
    }

    /// The value shown at the capability group (a JSON object).
    pub fn capabilities(mut self, capabilities: Value) -> Describe {
        self.capabilities = capabilities;
        self
    }

    /// Declare these methods instead of `Extension::METHODS`.
    pub fn methods(mut self, methods: impl IntoIterator<Item = impl Into<String>>) -> Describe {
        self.methods = methods.into_iter().map(Into::into).collect();
        self
    }

    /// A subscription filter key over the extension's events.
    pub fn event_filter(mut self, filter: EventFilter) -> Describe {
        self.event_filters.push(filter);
        self
    }
}

/// A subscription filter key: `map/subscribe {filter: {<key>: {<field>: <value>}}}`
/// passes an event whose type matches `event_types` and whose `data` holds,
/// for each field given, that string at the first of the field's paths present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFilter {
    pub key: String,
    /// A type or `prefix.*`, e.g. `notes.*`.
    pub event_types: String,
    /// (field name, dot-separated paths into `data`, tried in order).
    pub fields: Vec<(String, Vec<String>)>,
}

impl EventFilter {
    pub fn new(key: &str, event_types: &str) -> EventFilter {
        EventFilter { key: key.into(), event_types: event_types.into(), fields: Vec::new() }
    }

    /// A field and where its value may be in `data`, e.g.
    /// `.field("noteId", &["noteId", "note.id"])`.
    pub fn field(mut self, name: &str, paths: &[&str]) -> EventFilter {
        self.fields.push((name.into(), paths.iter().map(|p| p.to_string()).collect()));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes;

    fn caller(capabilities: &str) -> Caller {
        Caller {
            tenant: "t".into(),
            participant_id: "p".into(),
            participant_type: "client".into(),
            session_id: "s".into(),
            agent_ids: vec![],
            capabilities: capabilities.into(),
        }
    }

    fn echo(call: &Call) -> Result<Reply> {
        Ok(Reply::raw(call.params))
    }

    fn fail(_: &Call) -> Result<Reply> {
        Err(Error::new(20001, "no"))
    }

    #[derive(Deserialize)]
    struct Named {
        name: String,
    }

    fn greet(call: &Call) -> Result<Reply> {
        let p: Named = call.params()?;
        Ok(serde_json::json!({ "hello": p.name }).into())
    }

    const METHODS: Methods = Methods::new(&[("t/echo", echo), ("t/fail", fail), ("t/greet", greet)]);

    #[test]
    fn dispatch_routes_by_name_and_refuses_unknown_methods() {
        let c = caller("null");
        assert_eq!(METHODS.dispatch(&Call::new(&c, "t/echo", r#"{"a":1}"#)).unwrap().as_str(), r#"{"a":1}"#);
        assert_eq!(METHODS.dispatch(&Call::new(&c, "t/fail", "{}")).unwrap_err().code(), Some(20001));
        let e = METHODS.dispatch(&Call::new(&c, "t/nope", "{}")).unwrap_err();
        assert_eq!((e.code(), e.message()), (Some(codes::METHOD_NOT_FOUND), "Method not found: t/nope"));
        assert_eq!(METHODS.names(), ["t/echo", "t/fail", "t/greet"]);
    }

    #[test]
    fn handlers_decode_params_into_invalid_params() {
        let c = caller("null");
        assert_eq!(METHODS.dispatch(&Call::new(&c, "t/greet", r#"{"name":"x"}"#)).unwrap().as_str(), r#"{"hello":"x"}"#);
        let e = METHODS.dispatch(&Call::new(&c, "t/greet", "{}")).unwrap_err();
        assert_eq!(e.code(), Some(codes::INVALID_PARAMS));
        assert!(e.message().contains("t/greet") && e.message().contains("name"), "{}", e.message());
    }

    #[test]
    fn declined_capabilities() {
        let c = caller(r#"{"notes":{"canWrite":false,"canRead":true}}"#);
        let call = Call::new(&c, "m", "{}");
        assert!(call.declined("notes.canWrite"));
        assert!(!call.declined("notes.canRead"));
        assert!(!call.declined("notes.other"));
        assert!(!Call::new(&caller("null"), "m", "{}").declined("notes.canWrite"));
    }

    #[test]
    fn describe_defaults_follow_the_name() {
        let d = Describe::new("notes", "1.0.0").event_filter(EventFilter::new("notes", "notes.*").field("noteId", &["noteId", "note.id"]));
        assert_eq!(d.uri, "urn:map:ext:notes:1");
        assert_eq!(d.capability_group, "notes");
        assert_eq!(d.capabilities, serde_json::json!({"enabled": true}));
        assert_eq!(d.event_filters[0].fields, [("noteId".to_string(), vec!["noteId".to_string(), "note.id".to_string()])]);
        let x = Describe::new("x-notes", "1.0.0");
        assert_eq!((x.uri.as_str(), x.capability_group.as_str()), ("x-notes:1", "x-notes"));
        let r = Reply::json(&std::collections::BTreeMap::from([("k", 1)])).unwrap();
        assert_eq!(r.as_str(), r#"{"k":1}"#);
    }
}
