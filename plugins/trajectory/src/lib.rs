//! The MAP trajectory extension (`urn:map:ext:trajectory:1`) as a gateway
//! plugin: agents report checkpoints of their work, with optional content
//! artifacts; clients and agents list, fetch and download them. Large
//! artifacts are stored in chunks and streamed back as
//! `trajectory/content.chunk` notifications, one chunk in memory at a time.
//!
//! Everything lives in the host's store, scoped to (tenant, plugin), so it
//! survives restarts; see `keys` for the layout.

wit_bindgen::generate!({ path: "../../wit", world: "extension" });

mod access;
mod artifacts;
mod content;
mod error;
mod host;
mod ids;
mod keys;
mod model;
mod params;
mod query;
mod repo;
mod report;
mod settings;

use exports::map_gateway::plugin::rpc::{Descriptor, EventFilter, FilterField, Guest};
use map_gateway::plugin::types::{Caller, RpcError};

use error::Error;
use settings::Settings;

pub const CHECKPOINT: &str = "trajectory/checkpoint";
pub const LIST: &str = "trajectory/list";
pub const GET: &str = "trajectory/get";
pub const CONTENT: &str = "trajectory/content";

struct Trajectory;

impl Guest for Trajectory {
    fn describe() -> Descriptor {
        Descriptor {
            name: "trajectory".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            uri: "urn:map:ext:trajectory:1".into(),
            capability_group: "trajectory".into(),
            // Described per tenant: a tenant's `enabled = false` shows at map/connect.
            capabilities: serde_json::json!({
                "enabled": Settings::load().enabled,
                "canReport": true,
                "canQuery": true,
                "canRequestContent": true,
            })
            .to_string(),
            methods: [CHECKPOINT, LIST, GET, CONTENT].map(String::from).to_vec(),
            error_range: (13000, 13999),
            // `map/subscribe {filter: {trajectory: {agentId, sessionId}}}`.
            event_filters: vec![EventFilter {
                key: "trajectory".into(),
                event_types: "trajectory.*".into(),
                fields: [("agentId", ["checkpoint.agentId", "agentId"]), ("sessionId", ["checkpoint.sessionId", "sessionId"])]
                    .iter()
                    .map(|(name, paths)| FilterField { name: name.to_string(), paths: paths.iter().map(|p| p.to_string()).collect() })
                    .collect(),
            }],
        }
    }

    fn handle(caller: Caller, method: String, params: String) -> Result<String, RpcError> {
        dispatch(&caller, &method, &params).map_err(Error::into_rpc)
    }
}

fn dispatch(caller: &Caller, method: &str, params: &str) -> Result<String, Error> {
    let settings = Settings::load();
    if !settings.enabled {
        return Err(Error::not_enabled());
    }
    match method {
        CHECKPOINT => report::checkpoint(caller, &settings, params),
        LIST => query::list(caller, params),
        GET => query::get(caller, params),
        CONTENT => content::content(caller, &settings, params),
        other => Err(Error::method_not_found(other)),
    }
}

export!(Trajectory);
