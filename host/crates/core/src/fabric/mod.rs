//! Delivery and event fan-out. Method handlers speak only to the `Fabric`
//! trait, so a multi-node fabric (e.g. over a message bus) can replace the
//! in-process one without touching them. This file holds the trait and the
//! shapes it speaks in; `local` is the in-process fabric, `subscription` one
//! subscription's numbering, pausing and gaps, `log` the in-memory replay
//! window, `shared_log` the in-process fabric's side toward a log kept
//! elsewhere (the cluster's, the journal's), `wire` the JSON text sent.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::asks::{Answer, Ask, NOT_RESPONDING};
use super::events::{Filter, NewEvent};
use super::outbox::{Frame, Full, Outbox};
use map_protocol::ids::Ulid;

mod local;
mod log;
mod shared_log;
mod subscription;
mod wire;

pub use self::local::LocalFabric;
pub use self::log::Recorded;

/// `map/replay` params.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplayQuery {
    pub after_event_id: Option<String>,
    pub from_timestamp: Option<u64>,
    pub to_timestamp: Option<u64>,
    pub filter: Option<Filter>,
    pub limit: Option<usize>,
    /// The asking session: events with an audience it is not in are left out.
    #[serde(skip)]
    pub session: String,
}

/// Where a new subscription starts in the past.
#[derive(Debug, Clone)]
pub enum ReplayFrom {
    Timestamp(u64),
    /// Events after this one.
    EventId(String),
}

/// One page of `map/replay`: raw event entries `{eventId, timestamp, causedBy?, event}`.
pub struct ReplayPage {
    pub events: Vec<Box<RawValue>>,
    pub has_more: bool,
    pub total_count: usize,
}

pub trait Fabric: Send + Sync {
    /// Make a session reachable through its outbox.
    fn join(&self, session: &str, outbox: Arc<Outbox>);
    /// Forget a session and its subscriptions.
    fn leave(&self, session: &str);
    /// Queue one frame for a session.
    fn deliver(&self, session: &str, frame: Frame) -> Result<(), Full>;
    /// Queue one frame for a session and say whether it was taken: at once
    /// here, or once the node serving the session has answered.
    fn deliver_confirmed(&self, session: &str, frame: Frame) -> Delivery {
        Delivery::Now(self.deliver(session, frame))
    }
    /// Number, record and fan out an event; returns its event id.
    fn publish(&self, event: NewEvent) -> Ulid;
    /// Whether anything (a subscription) would see events right now.
    fn has_subscribers(&self) -> bool;
    /// More events wait to be kept than allowed: new messages are refused
    /// until they are (a cluster's shared log; the embedded log never waits).
    fn behind(&self) -> bool {
        false
    }
    /// Start a subscription; with `from`, recorded events since then come first, without a gap.
    fn subscribe(&self, session: &str, filter: Filter, from: Option<ReplayFrom>) -> String;
    fn unsubscribe(&self, session: &str, subscription: &str) -> bool;
    /// Hold a subscription's events (`paused`), or send what it held and go
    /// on delivering; false when the session has no such subscription.
    fn pause(&self, session: &str, subscription: &str, paused: bool) -> bool;
    /// Whether a session may observe now (its `observation.canObserve` is
    /// not revoked), said by whoever changes its permissions where it is
    /// served. While it may not, its subscriptions stay but send only
    /// `permissions_client_updated`, and what a paused one held is dropped;
    /// once it may again they go on, numbered without a gap.
    fn observing(&self, session: &str, allowed: bool);
    fn replay(&self, query: &ReplayQuery) -> ReplayPage;
    /// For the operator: the live subscriptions and the replay log's size.
    fn inspect(&self) -> FabricView;
    /// Take up a subscription a session had on another node (a resume after
    /// that node died): same id, numbering on from `sequence`, recorded
    /// events since `from` first, paused if it was (its filter resolved).
    fn adopt_subscription(&self, session: &str, sub: ParkedSubscription);
    /// Whether a session served by `node` may be taken over here: that node
    /// has died (cluster only).
    fn home_is_gone(&self, _node: &str, _session: &str) -> bool {
        false
    }
    /// The subscriptions a session had on a node that died, as last checkpointed.
    fn parked_subscriptions(&self, _session: &str) -> Vec<ParkedSubscription> {
        Vec::new()
    }
    /// Send a request to a session another node serves and wait for the
    /// participant's answer (see `asks`): that node writes the request on
    /// the session and sends back what came. Only a cluster has other nodes.
    fn ask_elsewhere(&self, _session: &str, _ask: Ask) -> BoxFuture<'static, Answer> {
        Box::pin(async { Err(map_protocol::rpc::RpcError::new(NOT_RESPONDING, "the participant's session is not served by this gateway")) })
    }
}

/// What became of a frame for a session.
pub enum Delivery {
    Now(Result<(), Full>),
    /// Known once another node has answered (or has not, in time).
    Later(BoxFuture<'static, Result<(), Full>>),
}

/// A subscription left behind by a node that died.
pub struct ParkedSubscription {
    pub id: String,
    /// As given (extension keys not yet resolved).
    pub filter: Filter,
    pub sequence: u64,
    pub from: ReplayFrom,
    pub paused: bool,
}

/// What `Fabric::inspect` shows.
pub struct FabricView {
    pub subscriptions: Vec<SubscriptionView>,
    pub log_events: usize,
    pub log_bytes: usize,
    /// The newest event known to be on disk (where a durable copy is kept).
    pub saved_through: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionView {
    pub id: String,
    pub session_id: String,
    /// The filter's event types (empty: every type).
    pub event_types: Vec<String>,
    /// Events sent so far (the last sequence number).
    pub sequence: u64,
    /// Events dropped since the last overflow notice.
    pub dropped: u64,
    /// Its events are held until it is resumed.
    pub paused: bool,
    /// The last event queued for the session (or, before any, the newest
    /// logged when it began).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<String>,
    #[serde(skip)]
    pub filter: Filter,
    /// The newest logged event when it began.
    #[serde(skip)]
    pub start_event_id: Option<String>,
}
