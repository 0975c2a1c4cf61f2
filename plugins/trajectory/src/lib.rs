//! The MAP trajectory extension (`urn:map:ext:trajectory:1`) as a gateway
//! plugin: agents report checkpoints of their work, with optional content
//! artifacts; clients and agents list, fetch and download them. Large
//! artifacts are stored in chunks and streamed back as
//! `trajectory/content.chunk` notifications, one chunk in memory at a time.
//! Checkpoints are also resources of the type `x-trajectory/checkpoint`
//! (`map/resources/*`, `resources`).
//!
//! Everything lives in the host's store, scoped to (tenant, plugin), so it
//! survives restarts; see `keys` for the layout.

mod access;
mod artifacts;
mod content;
mod error;
mod keys;
mod model;
mod params;
mod query;
mod repo;
mod report;
mod resources;
mod settings;

use map_plugin_sdk::{Call, Describe, ErrorRange, EventFilter, Extension, Methods, Reply, Result};

use settings::Settings;

pub const CHECKPOINT: &str = "trajectory/checkpoint";
pub const LIST: &str = "trajectory/list";
pub const GET: &str = "trajectory/get";
pub const CONTENT: &str = "trajectory/content";

struct Trajectory;

impl Extension for Trajectory {
    const ERRORS: ErrorRange = error::ERRORS;
    const METHODS: Methods = Methods::new(&[(CHECKPOINT, report::checkpoint), (LIST, query::list), (GET, query::get), (CONTENT, content::content)]);

    fn describe() -> Describe {
        Describe::new("trajectory", env!("CARGO_PKG_VERSION"))
            .protocol_version("1.0.0")
            // Described per tenant: a tenant's `enabled = false` shows at map/connect.
            .capabilities(serde_json::json!({
                "enabled": Settings::load().enabled,
                // Reporting is for agents (access.rs); other sessions see false.
                "canReport": false,
                "canQuery": true,
                "canRequestContent": true,
                "byParticipantType": {"agent": {"canReport": true}},
            }))
            // `map/subscribe {filter: {trajectory: {agentId, sessionId}}}`.
            .event_filter(
                EventFilter::new("trajectory", "trajectory.*")
                    .field("agentId", &["checkpoint.agentId", "agentId"])
                    .field("sessionId", &["checkpoint.sessionId", "sessionId"]),
            )
    }

    fn handle(call: &Call) -> Result<Reply> {
        if !Settings::load().enabled {
            return Err(error::not_enabled());
        }
        Self::METHODS.dispatch(call)
    }
}

use resources::CheckpointResources;

map_plugin_sdk::export_extension!(Trajectory);
map_plugin_sdk::export_resources!(CheckpointResources);
