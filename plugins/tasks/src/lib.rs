//! The MAP tasks extension (`urn:map:ext:tasks:1`) as a gateway plugin
//! (world `extension`): `map/tasks/create`, `assign`, `update` and `list`
//! over the host's store, announced as `task.created`, `task.assigned`,
//! `task.status` and `task.completed` events, and tasks as resources of the
//! type `x-tasks/task` (`map/resources/*`, `resources`). The host lets this plugin
//! serve the `map/tasks/` namespace because it declares the registered
//! tasks URI and its error range 14000–14999.

mod access;
mod error;
mod events;
mod methods;
mod model;
mod params;
mod repo;
mod resources;
mod settings;
mod uap_jobs;

use map_plugin_sdk::{Call, Describe, ErrorRange, EventFilter, Extension, Methods, Reply, Result};

struct Tasks;

impl Extension for Tasks {
    const ERRORS: ErrorRange = error::ERRORS;
    const METHODS: Methods = Methods::new(&[
        ("map/tasks/create", methods::create),
        ("map/tasks/assign", methods::assign),
        ("map/tasks/update", methods::update),
        ("map/tasks/list", methods::list),
    ]);

    fn describe() -> Describe {
        Describe::new("tasks", env!("CARGO_PKG_VERSION"))
            // Described per tenant: its grants and `enabled` show at map/connect.
            .capabilities(settings::capabilities())
            // `map/subscribe {filter: {tasks: {taskId}}}` follows one task.
            .event_filter(EventFilter::new("tasks", "task.*").field("taskId", &["taskId", "task.id"]))
    }

    /// An unknown method is -32601 even where tasks are off; a known one is
    /// 14000 there.
    fn handle(call: &Call) -> Result<Reply> {
        if Self::METHODS.contains(call.method) && !settings::enabled() {
            return Err(error::not_enabled());
        }
        Self::METHODS.dispatch(call)
    }
}

use resources::TaskResources;

map_plugin_sdk::export_extension!(Tasks);
map_plugin_sdk::export_resources!(TaskResources);
