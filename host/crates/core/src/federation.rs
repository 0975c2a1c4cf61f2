//! What the core needs from federation (MAP's link between systems):
//! defined here, implemented by the `federation` module, so the core only
//! routes `map/federation/*`, sends to `{system, agent}` addresses, and
//! shows a peer's gateway session what the tenant exposes to it.

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use super::model::Agent;
use super::Active;
use map_protocol::rpc::RpcError;

/// Which of this system's agents a peer may see and reach.
#[derive(Clone, Debug, PartialEq)]
pub enum Exposure {
    Nothing,
    /// Agents with one of these tags (`capabilityDescriptor.tags` or `metadata.tags`).
    Tagged(Vec<String>),
    All,
}

impl Exposure {
    pub fn admits(&self, agent: &Agent) -> bool {
        match self {
            Exposure::Nothing => false,
            Exposure::All => true,
            Exposure::Tagged(wanted) => {
                let tags = |v: Option<&Value>| v.and_then(|d| d.get("tags")).and_then(Value::as_array).cloned().unwrap_or_default();
                tags(agent.capability_descriptor.as_ref())
                    .iter()
                    .chain(tags(agent.metadata.as_ref()).iter())
                    .any(|t| t.as_str().is_some_and(|t| wanted.iter().any(|w| w == t)))
            }
        }
    }
}

/// What one peer system may see of this one.
#[derive(Clone, Debug)]
pub struct Shown {
    pub agents: Exposure,
    /// Scope ids it may list.
    pub scopes: Vec<String>,
    /// Event types (exact, or `prefix.*`) it may subscribe to.
    pub events: Vec<String>,
}

/// The methods a peer system's sessions may call: federating, and reading
/// what is shown to it. Anything else is 1003.
pub const PEER_METHODS: &[&str] = &[
    "map/connect",
    "map/initialize",
    "map/authenticate",
    "map/auth/refresh",
    "map/disconnect",
    "map/shutdown",
    "map/federation/connect",
    "map/federation/route",
    "map/agents/list",
    "map/scopes/list",
    "map/subscribe",
    "map/unsubscribe",
    "map/subscribe.ack",
    "map/subscriptions/pause",
    "map/subscriptions/resume",
    "map/pause",
    "map/resume",
];

/// A local agent's message for an agent of another system.
pub struct Outbound {
    pub message_id: String,
    /// The sending agent (or the session's participant id).
    pub from: String,
    pub system: String,
    pub agent: String,
    pub payload: Option<Value>,
    pub meta: Option<Map<String, Value>>,
    pub timestamp: u64,
}

/// One tenant as a system of a federation.
pub trait Federation: Send + Sync + 'static {
    /// This system's id.
    fn system_id(&self) -> &str;

    /// `map/federation/connect` from a session of this tenant.
    fn connect(&self, active: &Active, params: Value) -> BoxFuture<'static, Result<Value, RpcError>>;

    /// `map/federation/route` from a session of this tenant.
    fn route(&self, active: &Active, params: Value) -> BoxFuture<'static, Result<Value, RpcError>>;

    /// Carry a message to another system: the send's result (`delivered`
    /// names what the peer accepted; `queued` when it waits for the peer).
    fn send(&self, message: Outbound) -> BoxFuture<'static, Result<Value, RpcError>>;

    /// What a peer system's principal is shown; `None`: the principal is
    /// not a peer's. A peer's sessions reach only the methods `PEER_METHODS`
    /// names, and see only this.
    fn shown_to(&self, principal: &str) -> Option<Shown>;

    /// Agents of other systems, as this tenant lists them.
    fn remote_agents(&self) -> Vec<Value>;

    /// A session ended (a peer's gateway session among them).
    fn session_closed(&self, session: &str);
}
