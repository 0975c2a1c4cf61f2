//! Resource types for the MAP resources extension (the `resources`
//! interface, added in 0.2.4): the gateway serves `map/resources/list` and
//! `map/resources/get` itself and calls the plugin that declared the type.
//!
//! Implement [`Resources`] and export it beside the plugin's other
//! interfaces with [`export_resources!`](crate::export_resources):
//!
//! ```no_run
//! use map_plugin_sdk::prelude::*;
//! use map_plugin_sdk::resources::{Page, Query, Resource, Resources};
//!
//! struct Notes;
//!
//! impl Resources for Notes {
//!     const ERRORS: ErrorRange = ErrorRange::new(20000, 20999);
//!     fn kinds() -> Vec<String> {
//!         vec!["x-notes/note".into()]
//!     }
//!     fn list(_caller: &Caller, _query: &Query) -> Result<Page> {
//!         Ok(Page::default())
//!     }
//!     fn get(_caller: &Caller, _kind: &str, id: &str) -> Result<Option<Resource>> {
//!         Ok(Some(Resource::new(id, "a note", "active", "alice", 0)))
//!     }
//! }
//!
//! map_plugin_sdk::export_resources!(Notes);
//! ```
//!
//! The plugin decides what the caller may see: leave out of a page what it
//! may not, and answer `None` for it from `get` (the client gets -32004,
//! as for a resource that does not exist). An [`Error::invalid_params`]
//! from `list` reaches the client as -32003 (invalid filter).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::bindings::exports::map_gateway::plugin::resources as wit;
use crate::bindings::map_gateway::plugin::types::{Caller, RpcError};
use crate::error::{Error, ErrorRange, Result};

/// One resource; the gateway adds `type` and `origin_hub_id`, and writes
/// the times as ISO 8601.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub id: String,
    pub name: String,
    pub status: String,
    /// Who owns or made it: a participant or agent id.
    pub owner_id: String,
    /// Unix milliseconds.
    pub created_at: u64,
    pub updated_at: u64,
    pub metadata: Map<String, Value>,
}

impl Resource {
    /// A resource updated when it was made, without metadata.
    pub fn new(id: impl Into<String>, name: impl Into<String>, status: impl Into<String>, owner_id: impl Into<String>, created_at: u64) -> Resource {
        Resource {
            id: id.into(),
            name: name.into(),
            status: status.into(),
            owner_id: owner_id.into(),
            created_at,
            updated_at: created_at,
            metadata: Map::new(),
        }
    }

    pub fn updated_at(mut self, ms: u64) -> Resource {
        self.updated_at = ms;
        self
    }

    pub fn metadata(mut self, metadata: Map<String, Value>) -> Resource {
        self.metadata = metadata;
        self
    }

    fn into_wit(self) -> wit::Item {
        wit::Item {
            id: self.id,
            name: self.name,
            status: self.status,
            owner_id: self.owner_id,
            created_at: self.created_at,
            updated_at: self.updated_at,
            metadata: Value::Object(self.metadata).to_string(),
        }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub resources: Vec<Resource>,
    /// Where the next page starts (`None` after the last); the gateway hands
    /// it back as the next query's `cursor`.
    pub cursor: Option<String>,
    /// How many match in all, when known cheaply.
    pub total: Option<u64>,
}

/// What `map/resources/list` asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub kind: String,
    /// The client's filter, a JSON object (empty when none).
    pub filter: Map<String, Value>,
    pub cursor: Option<String>,
    /// 1..=500.
    pub limit: u32,
}

impl Query {
    /// The filter decoded into `T`; one that does not fit is -32602 (the
    /// client sees -32003).
    pub fn filter<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_value(Value::Object(self.filter.clone())).map_err(|e| Error::invalid_params(format!("Invalid filter for {}: {e}", self.kind)))
    }
}

/// The resource types a plugin provides.
pub trait Resources {
    /// The plugin's error range (usually its `Extension::ERRORS`): codes
    /// outside it and JSON-RPC's become -32603.
    const ERRORS: ErrorRange;

    /// The types provided, e.g. `x-tasks/task`; read once per tenant with
    /// its configuration, like `Extension::describe`.
    fn kinds() -> Vec<String>;

    /// Up to `query.limit` resources of `query.kind` that `caller` may see.
    fn list(caller: &Caller, query: &Query) -> Result<Page>;

    /// One resource of `kind`, if it exists and `caller` may see it.
    fn get(caller: &Caller, kind: &str, id: &str) -> Result<Option<Resource>>;
}

impl<T: Resources> wit::Guest for T {
    fn kinds() -> Vec<String> {
        <T as Resources>::kinds()
    }

    fn list(caller: Caller, kind: String, filter: String, cursor: Option<String>, limit: u32) -> Result<wit::Page, RpcError> {
        let filter = match serde_json::from_str(&filter) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        let page = <T as Resources>::list(&caller, &Query { kind, filter, cursor, limit }).map_err(|e| e.into_rpc(&T::ERRORS))?;
        Ok(wit::Page { items: page.resources.into_iter().map(Resource::into_wit).collect(), cursor: page.cursor, total: page.total })
    }

    fn get(caller: Caller, kind: String, id: String) -> Result<Option<wit::Item>, RpcError> {
        <T as Resources>::get(&caller, &kind, &id).map(|r| r.map(Resource::into_wit)).map_err(|e| e.into_rpc(&T::ERRORS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_resource_goes_out_with_its_metadata_as_json() {
        let mut meta = Map::new();
        meta.insert("k".into(), json!(1));
        let item = Resource::new("t-1", "a task", "open", "alice", 5).updated_at(9).metadata(meta).into_wit();
        assert_eq!((item.id.as_str(), item.created_at, item.updated_at), ("t-1", 5, 9));
        assert_eq!(item.metadata, r#"{"k":1}"#);
    }

    #[test]
    fn a_filter_that_does_not_fit_is_invalid_params() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        struct F {
            #[allow(dead_code)]
            status: Option<String>,
        }
        let q = |f: Value| Query { kind: "x/y".into(), filter: f.as_object().unwrap().clone(), cursor: None, limit: 10 };
        assert!(q(json!({"status": "open"})).filter::<F>().is_ok());
        assert_eq!(q(json!({"colour": "red"})).filter::<F>().unwrap_err().code(), Some(-32602));
    }
}
