//! The plugin's configuration for the current tenant (`[plugins.tasks]
//! config`, overlaid by the tenant's `plugin_config.tasks`). Each key is
//! read on its own, so a malformed one (logged) keeps its default.

use map_plugin_sdk::config;
use serde_json::{json, Map, Value};

/// What a method needs: one flag of the capability group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    Create,
    Assign,
    Update,
    List,
}

impl Flag {
    pub const ALL: [Flag; 4] = [Flag::Create, Flag::Assign, Flag::Update, Flag::List];

    /// Its name in the capability group, e.g. `canCreate`.
    pub fn capability(self) -> &'static str {
        match self {
            Flag::Create => "canCreate",
            Flag::Assign => "canAssign",
            Flag::Update => "canUpdate",
            Flag::List => "canList",
        }
    }

    /// The configuration key listing the participant types granted it.
    fn config_key(self) -> &'static str {
        match self {
            Flag::Create => "can_create",
            Flag::Assign => "can_assign",
            Flag::Update => "can_update",
            Flag::List => "can_list",
        }
    }
}

/// Participant types, as `map/connect` names them.
const PARTICIPANT_TYPES: [&str; 4] = ["agent", "client", "gateway", "system"];
/// Who may use each method unless configured: clients and agents (the registry's `callableBy`).
const DEFAULT_GRANTED: [&str; 2] = ["client", "agent"];

/// `enabled = false` turns tasks off for a tenant: every method answers 14000.
pub fn enabled() -> bool {
    config::get::<bool>("enabled").unwrap_or(true)
}

/// Does the tenant grant `flag` to participants of this type?
pub fn granted(flag: Flag, participant_type: &str) -> bool {
    match config::get::<Vec<String>>(flag.config_key()) {
        Some(types) => types.iter().any(|t| t == participant_type),
        None => DEFAULT_GRANTED.contains(&participant_type),
    }
}

/// `agents_update_any = true` lets an agent session update any task; by
/// default it updates only tasks assigned to or created by its agents.
pub fn agents_update_any() -> bool {
    config::get::<bool>("agents_update_any").unwrap_or(false)
}

/// `registered_assignees = true` assigns tasks only to agents registered in
/// the tenant (14002 otherwise); by default any agent id will do, as the
/// SDK's own tests assign to ids nobody registered.
pub fn registered_assignees() -> bool {
    config::get::<bool>("registered_assignees").unwrap_or(false)
}

/// `show_uap_jobs = false` leaves the UAP hub's jobs out of `map/tasks/list`;
/// by default a tenant that runs the hub lists them after its own tasks.
pub fn show_uap_jobs() -> bool {
    config::get::<bool>("show_uap_jobs").unwrap_or(true)
}

/// The capability group: every flag false but for `enabled`, and each
/// participant type's own grants under `byParticipantType`.
pub fn capabilities() -> Value {
    let on = enabled();
    let flags =
        |grant: &dyn Fn(Flag) -> bool| -> Map<String, Value> { Flag::ALL.iter().map(|&f| (f.capability().to_string(), Value::Bool(on && grant(f)))).collect() };
    let by_type: Map<String, Value> = PARTICIPANT_TYPES.iter().map(|&t| (t.to_string(), Value::Object(flags(&|f| granted(f, t))))).collect();
    let mut group = flags(&|_| false);
    group.insert("enabled".into(), json!(on));
    group.insert("byParticipantType".into(), Value::Object(by_type));
    Value::Object(group)
}
