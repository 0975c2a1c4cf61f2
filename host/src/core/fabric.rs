//! Delivery and event fan-out. Method handlers speak only to the `Fabric`
//! trait, so a multi-node fabric (e.g. over a message bus) can replace the
//! in-process one without touching them.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::json;

use super::events::{Filter, NewEvent, StoredEvent};
use futures_util::future::BoxFuture;
use crate::ids::{self, Ulid, UlidGen};
use super::outbox::{Frame, Full, Outbox};
use crate::rpc::push_json_str;

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
    /// Start a subscription; with `from`, recorded events since then come first, without a gap.
    fn subscribe(&self, session: &str, filter: Filter, from: Option<ReplayFrom>) -> String;
    fn unsubscribe(&self, session: &str, subscription: &str) -> bool;
    /// Hold a subscription's events (`paused`), or send what it held and go
    /// on delivering; false when the session has no such subscription.
    fn pause(&self, session: &str, subscription: &str, paused: bool) -> bool;
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

/// Events a subscription lost: how many, the first and the last.
#[derive(Default)]
struct Gap {
    count: u64,
    oldest: Option<String>,
    newest: Option<String>,
}

impl Gap {
    fn note(&mut self, event_id: &str) {
        self.count += 1;
        self.oldest.get_or_insert_with(|| event_id.to_string());
        self.newest = Some(event_id.to_string());
    }

    /// This gap followed by `later`.
    fn extend(&mut self, later: Gap) {
        if later.count > 0 {
            self.count += later.count;
            self.oldest = self.oldest.take().or(later.oldest);
            self.newest = later.newest;
        }
    }
}

/// An event waiting in a paused subscription.
struct Held {
    event_id: String,
    timestamp: u64,
    caused_by: Option<String>,
    body: String,
}

/// What a held event counts for against the outbox's byte bound.
fn held_size(h: &Held) -> usize {
    h.body.len() + 200
}

struct Subscription {
    id: String,
    session: String,
    filter: Filter,
    outbox: Arc<Outbox>,
    sequence: u64,
    /// Dropped since the last overflow notice.
    dropped: Gap,
    /// The last event queued, or the newest in the log when the
    /// subscription began (where a resume elsewhere goes on from).
    last: Option<Ulid>,
    /// The newest event in the log when the subscription began.
    start: Option<Ulid>,
    /// Paused: events wait in `held`, within the outbox's bounds; what
    /// does not fit is lost, and reported after the held events.
    paused: bool,
    held: VecDeque<Held>,
    held_bytes: usize,
    lost_while_paused: Gap,
}

pub struct Recorded {
    event_id: Ulid,
    timestamp: u64,
    event: NewEvent,
    /// What the entry holds, about: the replay log is bounded by it.
    bytes: usize,
}

/// Roughly the bytes a JSON value holds (strings, and a word per node).
fn approx_size(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::String(s) => s.len() + 16,
        Value::Array(a) => 16 + a.iter().map(approx_size).sum::<usize>(),
        Value::Object(m) => 16 + m.iter().map(|(k, v)| k.len() + 16 + approx_size(v)).sum::<usize>(),
        _ => 16,
    }
}

/// Roughly the bytes a recorded event holds.
fn event_size(e: &NewEvent) -> usize {
    let strings = e.caused_by.as_ref().map_or(0, String::len)
        + e.facets.scopes.iter().chain(e.audience.iter().flatten()).map(|s| s.len() + 24).sum::<usize>()
        + e.facets.correlation_id.as_ref().map_or(0, String::len);
    let data = e.data_text.as_ref().map_or_else(|| approx_size(&e.data), String::len);
    160 + e.kind.len() + strings + data + e.facets.metadata.as_ref().map_or(0, approx_size)
}

/// The `event` object as sent: `{id, type, timestamp, source, data}`. Built
/// only when someone receives the event (most events are only ever recorded).
impl Recorded {
    pub fn id(&self) -> &str {
        self.event_id.as_str()
    }

    /// The entry as the durable log keeps it.
    pub fn stored(&self) -> StoredEvent {
        StoredEvent::of(self.event_id.as_str(), self.timestamp, &self.event)
    }
}

/// The event as sent, typed `kind` (the subscription's spelling of its type).
fn body_of(event_id: &str, timestamp: u64, kind: &str, event: &NewEvent) -> String {
    let data = match &event.data_text {
        Some(text) => std::borrow::Cow::Borrowed(text.as_str()),
        None => std::borrow::Cow::Owned(serde_json::to_string(&event.data).expect("data serialises")),
    };
    let mut s = String::with_capacity(data.len() + 192);
    let _ = write!(s, r#"{{"id":"{event_id}","timestamp":{timestamp},"type":"#);
    push_json_str(&mut s, kind);
    s.push_str(r#","source":"#);
    s.push_str(&serde_json::to_string(&event.source).expect("source serialises"));
    s.push_str(r#","data":"#);
    s.push_str(&data);
    s.push('}');
    s
}

struct Events {
    subscriptions: Vec<Subscription>,
    log: VecDeque<Arc<Recorded>>,
    /// Sum of the log's `bytes`.
    log_bytes: usize,
    /// Event ids, made under this lock so the log stays in id order.
    ids: UlidGen,
    /// Events made here that a shared log has not given back yet (cluster):
    /// `map/replay` lists them after the log; subscriptions get them when
    /// they come back, in the shared order every node sees.
    pending: VecDeque<Arc<Recorded>>,
}

/// The single-process fabric: one per tenant, so tenants never share a queue.
/// Delivery and events have separate locks: a send delivers and then
/// records, and two senders should not queue behind each other for both.
/// Where both are held, `events` is taken first.
pub struct LocalFabric {
    outboxes: RwLock<foldhash::HashMap<String, Arc<Outbox>>>,
    events: Mutex<Events>,
    /// `events.subscriptions.len()`, read without the lock on every send.
    subscribers: AtomicUsize,
    log_capacity: usize,
    log_max_bytes: usize,
    /// See `FabricView::saved_through`.
    saved_through: Mutex<Option<String>>,
}

impl LocalFabric {
    /// A fabric whose replay log keeps at most `log_capacity` events and about `log_max_bytes`.
    pub fn new(log_capacity: usize, log_max_bytes: usize) -> LocalFabric {
        LocalFabric {
            outboxes: RwLock::default(),
            events: Mutex::new(Events { subscriptions: Vec::new(), log: VecDeque::new(), log_bytes: 0, ids: UlidGen::new(), pending: VecDeque::new() }),
            subscribers: AtomicUsize::new(0),
            log_capacity: log_capacity.max(1),
            log_max_bytes,
            saved_through: Mutex::new(None),
        }
    }
}

fn event_frame(sub: &Subscription, rec_id: &str, timestamp: u64, caused_by: Option<&str>, body: &str) -> Frame {
    let mut s = String::with_capacity(body.len() + 200);
    s.push_str(r#"{"jsonrpc":"2.0","method":"map/event","params":{"subscriptionId":"#);
    push_json_str(&mut s, &sub.id);
    let _ = write!(s, r#","sequenceNumber":{},"eventId":"#, sub.sequence + 1);
    push_json_str(&mut s, rec_id);
    let _ = write!(s, r#","timestamp":{timestamp}"#);
    if let Some(c) = caused_by {
        s.push_str(r#","causedBy":"#);
        push_json_str(&mut s, c);
    }
    s.push_str(r#","event":"#);
    s.push_str(body);
    s.push_str("}}");
    Frame::from(s)
}

impl Subscription {
    /// Queue one event, or hold it while paused.
    fn offer(&mut self, event_id: &str, timestamp: u64, caused_by: Option<&str>, body: &str) {
        if self.paused {
            self.hold(Held { event_id: event_id.to_string(), timestamp, caused_by: caused_by.map(String::from), body: body.to_string() });
        } else {
            self.send(event_id, timestamp, caused_by, body);
        }
    }

    /// Queue one event; when the reader is behind, count it as dropped and
    /// report the gap with `subscription.overflow` once there is room again.
    fn send(&mut self, event_id: &str, timestamp: u64, caused_by: Option<&str>, body: &str) {
        if self.dropped.count > 0 && !self.report_gap(timestamp) {
            self.dropped.note(event_id);
            return;
        }
        match self.outbox.push(event_frame(self, event_id, timestamp, caused_by, body)) {
            Ok(()) => {
                self.sequence += 1;
                self.last = Ulid::parse(event_id);
            }
            Err(_) => self.dropped.note(event_id),
        }
    }

    /// Queue the `subscription.overflow` notice of the dropped events; false when there is no room.
    fn report_gap(&mut self, timestamp: u64) -> bool {
        let overflow = json!({
            "id": ids::prefixed("evt"),
            "type": "subscription.overflow",
            "timestamp": timestamp,
            "source": {},
            "data": {"subscriptionId": self.id, "eventsDropped": self.dropped.count,
                     "oldestDropped": self.dropped.oldest, "newestDropped": self.dropped.newest},
        })
        .to_string();
        let overflow_id = ids::ulid();
        if self.outbox.push(event_frame(self, &overflow_id, timestamp, None, &overflow)).is_err() {
            return false;
        }
        self.sequence += 1;
        self.dropped = Gap::default();
        true
    }

    /// Keep an event for the resume; past the outbox's bounds it is lost.
    fn hold(&mut self, held: Held) {
        let size = held_size(&held);
        if self.held.len() >= self.outbox.capacity() || (!self.held.is_empty() && self.held_bytes + size > self.outbox.max_bytes()) {
            self.lost_while_paused.note(&held.event_id);
            return;
        }
        self.held_bytes += size;
        self.held.push_back(held);
    }

    /// Send what was held, in order, then report what was lost meanwhile.
    fn resume(&mut self) {
        self.paused = false;
        self.held_bytes = 0;
        for h in std::mem::take(&mut self.held) {
            self.send(&h.event_id, h.timestamp, h.caused_by.as_deref(), &h.body);
        }
        self.dropped.extend(std::mem::take(&mut self.lost_while_paused));
        if self.dropped.count > 0 {
            self.report_gap(ids::now_ms());
        }
    }
}

impl LocalFabric {
    /// Fan an event out to matching subscriptions and keep it in the log.
    fn record(&self, mut guard: parking_lot::MutexGuard<'_, Events>, id: Ulid, timestamp: u64, event: NewEvent) {
        let events = &mut *guard;
        let event_id = id.as_str();
        // The event as sent, once per spelling of its type (usually one).
        let mut bodies: Vec<(String, String)> = Vec::new();
        let parsed = std::cell::OnceCell::new();
        for sub in events.subscriptions.iter_mut() {
            if event.visible_to(&sub.session) && sub.filter.matches_with(&event, &parsed) {
                let kind = sub.filter.spelling(&event.kind);
                let at = match bodies.iter().position(|(k, _)| *k == *kind) {
                    Some(at) => at,
                    None => {
                        bodies.push((kind.to_string(), body_of(event_id, timestamp, &kind, &event)));
                        bodies.len() - 1
                    }
                };
                sub.offer(event_id, timestamp, event.caused_by.as_deref(), &bodies[at].1);
            }
        }
        if !event.recorded {
            return;
        }
        let evicted = self.keep(events, Recorded { event_id: id, timestamp, bytes: event_size(&event), event });
        drop(guard);
        // Free the evicted entries outside the lock.
        drop(evicted);
    }

    /// Append to the log and evict what the bounds no longer admit.
    fn keep(&self, events: &mut Events, rec: Recorded) -> Vec<Arc<Recorded>> {
        events.log_bytes += rec.bytes;
        events.log.push_back(Arc::new(rec));
        let mut evicted = Vec::new();
        while events.log.len() > self.log_capacity || (events.log_bytes > self.log_max_bytes && events.log.len() > 1) {
            let Some(old) = events.log.pop_front() else { break };
            events.log_bytes -= old.bytes;
            evicted.push(old);
        }
        evicted
    }

    /// A fresh event id and timestamp (for an event numbered here and
    /// recorded when it comes back, as the cluster does).
    pub fn next_id(&self) -> (Ulid, u64) {
        self.events.lock().ids.next_id()
    }

    /// Fan out and record an event numbered with `next_id`.
    pub fn record_at(&self, id: Ulid, timestamp: u64, event: NewEvent) {
        self.record(self.events.lock(), id, timestamp, event);
    }

    /// Keep an event made here until the shared log gives it back (`confirm`).
    pub fn hold(&self, id: Ulid, timestamp: u64, event: NewEvent) {
        let bytes = event_size(&event);
        self.events.lock().pending.push_back(Arc::new(Recorded { event_id: id, timestamp, event, bytes }));
    }

    /// The shared log gave back an event made here: fan it out and log it, in the log's order.
    pub fn confirm(&self, id: &str) {
        let mut guard = self.events.lock();
        let Some(at) = guard.pending.iter().position(|r| r.event_id.as_str() == id) else { return };
        let Some(rec) = guard.pending.remove(at) else { return };
        let rec = Arc::try_unwrap(rec).unwrap_or_else(|shared| Recorded { event_id: shared.event_id, timestamp: shared.timestamp, event: shared.event.clone(), bytes: shared.bytes });
        self.record(guard, rec.event_id, rec.timestamp, rec.event);
    }

    /// Fan out and record an event numbered elsewhere (another node, or
    /// this one through the cluster's log). Events arrive in log order.
    /// `recorded`: false for a live-only event (fanned out, not kept).
    pub fn ingest(&self, stored: StoredEvent, recorded: bool) {
        let Some(id) = Ulid::parse(&stored.id) else { return };
        let (_, timestamp, mut event) = stored.into_event();
        event.recorded = recorded;
        self.record(self.events.lock(), id, timestamp, event);
    }

    /// Refill the log from a durable copy, oldest first, at start-up (no fan-out).
    pub fn restore(&self, entries: Vec<StoredEvent>) {
        let mut events = self.events.lock();
        for stored in entries {
            let Some(id) = Ulid::parse(&stored.id) else { continue };
            let (_, timestamp, event) = stored.into_event();
            let bytes = event_size(&event);
            self.keep(&mut events, Recorded { event_id: id, timestamp, event, bytes });
        }
    }

    /// The logged entries after `after` (from the oldest when `None` or when
    /// it has left the log), oldest first, about `max_bytes` of them (at
    /// least one): a writer holds one page at a time, not the whole log.
    pub fn recorded_page(&self, after: Option<&str>, max_bytes: usize) -> Vec<Arc<Recorded>> {
        let events = self.events.lock();
        let start = after.map_or(0, |a| position_after(&events.log, a));
        let mut bytes = 0;
        let mut page = Vec::new();
        for r in events.log.range(start..) {
            if !page.is_empty() && bytes + r.bytes > max_bytes {
                break;
            }
            bytes += r.bytes;
            page.push(r.clone());
        }
        page
    }

    /// The newest logged event.
    pub fn newest_recorded(&self) -> Option<Ulid> {
        self.events.lock().log.back().map(|r| r.event_id)
    }

    fn start_subscription(&self, session: &str, id: String, filter: Filter, sequence: u64, from: Option<ReplayFrom>, paused: bool) {
        let mut inner = self.events.lock();
        let outbox = self.outboxes.read().get(session).cloned().unwrap_or_else(|| Arc::new(Outbox::new(1, 1)));
        let mut sub = Subscription {
            id,
            session: session.to_string(),
            filter,
            outbox,
            sequence,
            dropped: Gap::default(),
            last: inner.log.back().map(|r| r.event_id),
            start: inner.log.back().map(|r| r.event_id),
            paused,
            held: VecDeque::new(),
            held_bytes: 0,
            lost_while_paused: Gap::default(),
        };
        if let Some(from) = from {
            let start = match &from {
                ReplayFrom::EventId(after) => position_after(&inner.log, after),
                ReplayFrom::Timestamp(t) => inner.log.partition_point(|r| r.timestamp < *t),
            };
            for r in inner.log.range(start..) {
                if r.event.visible_to(&sub.session) && sub.filter.matches(&r.event) {
                    let id = r.event_id.as_str();
                    let body = body_of(id, r.timestamp, &sub.filter.spelling(&r.event.kind), &r.event);
                    sub.offer(id, r.timestamp, r.event.caused_by.as_deref(), &body);
                }
            }
        }
        inner.subscriptions.push(sub);
        self.subscribers.store(inner.subscriptions.len(), Ordering::Relaxed);
    }


    /// Events up to `id` are on disk.
    pub fn mark_saved(&self, id: &str) {
        *self.saved_through.lock() = Some(id.to_string());
    }

    /// Whether a session is joined here.
    pub fn serves(&self, session: &str) -> bool {
        self.outboxes.read().contains_key(session)
    }

}

/// Where the entries after event `after` start. The log is in id order on
/// one node; in a cluster it is in the order of the shared log, which ids
/// from several nodes follow only roughly, so an id not found by halving is
/// looked for from the newest end.
fn position_after(log: &VecDeque<Arc<Recorded>>, after: &str) -> usize {
    let guess = log.partition_point(|r| r.event_id.as_str() <= after);
    if guess > 0 && log[guess - 1].event_id.as_str() == after {
        return guess;
    }
    log.iter().rposition(|r| r.event_id.as_str() == after).map_or(guess, |i| i + 1)
}

impl Fabric for LocalFabric {
    fn join(&self, session: &str, outbox: Arc<Outbox>) {
        let mut events = self.events.lock();
        for sub in events.subscriptions.iter_mut().filter(|s| s.session == session) {
            sub.outbox = outbox.clone();
        }
        self.outboxes.write().insert(session.to_string(), outbox);
    }

    fn leave(&self, session: &str) {
        let mut events = self.events.lock();
        self.outboxes.write().remove(session);
        events.subscriptions.retain(|s| s.session != session);
        self.subscribers.store(events.subscriptions.len(), Ordering::Relaxed);
    }

    fn deliver(&self, session: &str, frame: Frame) -> Result<(), Full> {
        self.outboxes.read().get(session).ok_or(Full::Closed)?.push(frame)
    }

    fn publish(&self, event: NewEvent) -> Ulid {
        let mut guard = self.events.lock();
        // Id and timestamp are taken under the lock, so the log stays in event-id order.
        let (id, timestamp) = guard.ids.next_id();
        self.record(guard, id, timestamp, event);
        id
    }


    fn has_subscribers(&self) -> bool {
        self.subscribers.load(Ordering::Relaxed) > 0
    }

    fn inspect(&self) -> FabricView {
        let events = self.events.lock();
        let subscriptions = events
            .subscriptions
            .iter()
            .map(|s| SubscriptionView {
                id: s.id.clone(),
                session_id: s.session.clone(),
                event_types: s.filter.event_types.clone(),
                sequence: s.sequence,
                dropped: s.dropped.count,
                paused: s.paused,
                last_event_id: s.last.map(|l| l.to_string()),
                filter: s.filter.clone(),
                start_event_id: s.start.map(|l| l.to_string()),
            })
            .collect();
        FabricView { subscriptions, log_events: events.log.len(), log_bytes: events.log_bytes, saved_through: self.saved_through.lock().clone() }
    }

    fn subscribe(&self, session: &str, filter: Filter, from: Option<ReplayFrom>) -> String {
        let id = ids::prefixed("sub");
        self.start_subscription(session, id.clone(), filter, 0, from, false);
        id
    }

    fn adopt_subscription(&self, session: &str, sub: ParkedSubscription) {
        self.start_subscription(session, sub.id, sub.filter, sub.sequence, Some(sub.from), sub.paused);
    }

    fn pause(&self, session: &str, subscription: &str, paused: bool) -> bool {
        let mut inner = self.events.lock();
        let Some(sub) = inner.subscriptions.iter_mut().find(|s| s.id == subscription && s.session == session) else { return false };
        if paused {
            sub.paused = true;
        } else if sub.paused {
            sub.resume();
        }
        true
    }

    fn unsubscribe(&self, session: &str, subscription: &str) -> bool {
        let mut inner = self.events.lock();
        let before = inner.subscriptions.len();
        inner.subscriptions.retain(|s| !(s.id == subscription && s.session == session));
        self.subscribers.store(inner.subscriptions.len(), Ordering::Relaxed);
        inner.subscriptions.len() != before
    }

    fn replay(&self, q: &ReplayQuery) -> ReplayPage {
        let limit = q.limit.unwrap_or(100).clamp(1, 1000);
        let inner = self.events.lock();
        // The log, then what is waiting for the shared log (a client reads its own events at once).
        let start = match &q.after_event_id {
            Some(after) => match inner.pending.iter().position(|r| r.event_id.as_str() == after) {
                Some(i) => inner.log.len() + i + 1,
                None => position_after(&inner.log, after),
            },
            None => 0,
        };
        let (in_log, in_pending) = (start.min(inner.log.len()), start.saturating_sub(inner.log.len()));
        let selected = inner.log.range(in_log..).chain(inner.pending.range(in_pending.min(inner.pending.len())..)).filter(|r| {
            r.event.visible_to(&q.session)
                && q.from_timestamp.is_none_or(|t| r.timestamp >= t)
                && q.to_timestamp.is_none_or(|t| r.timestamp <= t)
                && q.filter.as_ref().is_none_or(|f| f.matches(&r.event))
        });
        let mut events = Vec::new();
        let mut total = 0;
        for r in selected {
            total += 1;
            if events.len() < limit {
                let kind = q.filter.as_ref().map_or(std::borrow::Cow::Borrowed(&*r.event.kind), |f| f.spelling(&r.event.kind));
                let body = body_of(r.event_id.as_str(), r.timestamp, &kind, &r.event);
                let mut s = String::with_capacity(body.len() + 80);
                s.push_str(r#"{"eventId":"#);
                push_json_str(&mut s, r.event_id.as_str());
                let _ = write!(s, r#","timestamp":{}"#, r.timestamp);
                if let Some(c) = &r.event.caused_by {
                    s.push_str(r#","causedBy":"#);
                    push_json_str(&mut s, c);
                }
                s.push_str(r#","event":"#);
                s.push_str(&body);
                s.push('}');
                events.push(RawValue::from_string(s).expect("entries are JSON"));
            }
        }
        ReplayPage { has_more: total > events.len(), events, total_count: total }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::events::Source;
    use crate::core::outbox::{channel, FrameRx};
    use serde_json::Value;

    fn frames(rx: &mut FrameRx) -> Vec<Value> {
        std::iter::from_fn(|| rx.try_recv()).map(|f| serde_json::from_str(f.as_str()).unwrap()).collect()
    }

    #[test]
    fn sequence_is_gap_free_and_overflow_is_reported() {
        let fabric = LocalFabric::new(100, 1 << 20);
        let outbox = Arc::new(Outbox::new(2, 1 << 20));
        let (tx, mut rx) = channel(2, 1 << 20);
        outbox.attach(tx);
        fabric.join("s1", outbox);
        let sub = fabric.subscribe("s1", Filter::default(), None);
        for i in 0..5 {
            fabric.publish(NewEvent::new("x_happened", Source::default(), json!({"i": i})));
        }
        let got = frames(&mut rx);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["params"]["subscriptionId"], sub);
        assert_eq!(got[1]["params"]["sequenceNumber"], 2);
        fabric.publish(NewEvent::new("x_happened", Source::default(), json!({"i": 5})));
        let got = frames(&mut rx);
        assert_eq!(got[0]["params"]["event"]["type"], "subscription.overflow");
        assert_eq!(got[0]["params"]["event"]["data"]["eventsDropped"], 3);
        assert_eq!(got[0]["params"]["sequenceNumber"], 3);
        assert_eq!(got[1]["params"]["sequenceNumber"], 4);
        assert_eq!(got[1]["params"]["event"]["data"]["i"], 5);
    }

    #[test]
    fn a_paused_subscription_holds_what_fits_and_reports_the_rest_after_it() {
        let fabric = LocalFabric::new(100, 1 << 20);
        let outbox = Arc::new(Outbox::new(2, 1 << 20));
        let (tx, mut rx) = channel(2, 1 << 20);
        outbox.attach(tx);
        fabric.join("s1", outbox);
        let sub = fabric.subscribe("s1", Filter::default(), None);
        assert!(fabric.pause("s1", &sub, true));
        assert!(!fabric.pause("s2", &sub, true), "another session's subscription");
        let ids: Vec<Ulid> = (0..4).map(|i| fabric.publish(NewEvent::new("x_happened", Source::default(), json!({"i": i})))).collect();
        assert!(frames(&mut rx).is_empty(), "nothing while paused");
        assert!(fabric.pause("s1", &sub, false));
        let got = frames(&mut rx);
        let held: Vec<(u64, u64)> = got.iter().map(|f| (f["params"]["sequenceNumber"].as_u64().unwrap(), f["params"]["event"]["data"]["i"].as_u64().unwrap())).collect();
        assert_eq!(held, [(1, 0), (2, 1)], "the two that fit, in order");
        // No room for the notice at the resume: it goes before the next event.
        fabric.publish(NewEvent::new("x_happened", Source::default(), json!({"i": 4})));
        let got = frames(&mut rx);
        assert_eq!(got[0]["params"]["event"]["type"], "subscription.overflow");
        assert_eq!(got[0]["params"]["event"]["data"]["eventsDropped"], 2);
        assert_eq!(got[0]["params"]["event"]["data"]["oldestDropped"], ids[2].as_str());
        assert_eq!(got[0]["params"]["event"]["data"]["newestDropped"], ids[3].as_str());
        assert_eq!(got[1]["params"]["sequenceNumber"], 4);
    }

    #[test]
    fn an_audience_limits_fan_out_and_replay() {
        let fabric = LocalFabric::new(10, 1 << 20);
        let (outbox1, outbox2) = (Arc::new(Outbox::new(8, 1 << 20)), Arc::new(Outbox::new(8, 1 << 20)));
        let (tx1, mut rx1) = channel(8, 1 << 20);
        let (tx2, mut rx2) = channel(8, 1 << 20);
        outbox1.attach(tx1);
        outbox2.attach(tx2);
        fabric.join("s1", outbox1);
        fabric.join("s2", outbox2);
        fabric.subscribe("s1", Filter::default(), None);
        fabric.subscribe("s2", Filter::default(), None);
        let mut private = NewEvent::new("secret", Source::default(), json!({}));
        private.audience = Some(vec!["s2".into()]);
        fabric.publish(private);
        assert!(frames(&mut rx1).is_empty());
        assert_eq!(frames(&mut rx2).len(), 1);
        let q = |session: &str| ReplayQuery { session: session.into(), ..Default::default() };
        assert_eq!(fabric.replay(&q("s1")).total_count, 0);
        assert_eq!(fabric.replay(&q("s2")).total_count, 1);
    }

    #[test]
    fn replay_pages_after_an_event_id() {
        let fabric = LocalFabric::new(3, 1 << 20);
        let ids: Vec<Ulid> = (0..5).map(|i| fabric.publish(NewEvent::new("x", Source::default(), json!({"i": i})))).collect();
        let page = fabric.replay(&ReplayQuery { limit: Some(2), ..Default::default() });
        assert_eq!(page.total_count, 3, "the log keeps the newest three");
        assert!(page.has_more);
        let first: Value = serde_json::from_str(page.events[0].get()).unwrap();
        assert_eq!(first["eventId"], ids[2].as_str());
        let page = fabric.replay(&ReplayQuery { after_event_id: Some(ids[3].to_string()), ..Default::default() });
        assert_eq!(page.events.len(), 1);
        assert!(!page.has_more);
    }

    #[test]
    fn ingested_events_page_by_id_in_arrival_order() {
        // A cluster's log is in the shared log's order, which ids made on
        // several nodes follow only roughly.
        let fabric = LocalFabric::new(10, 1 << 20);
        let stored = |id: &str| StoredEvent::of(id, 1, &NewEvent::new("x", Source::default(), json!({"id": id})));
        for id in ["01J0000000000000000000000B", "01J0000000000000000000000A", "01J0000000000000000000000C"] {
            fabric.ingest(stored(id), true);
        }
        let ids = |page: ReplayPage| page.events.iter().map(|e| serde_json::from_str::<Value>(e.get()).unwrap()["eventId"].as_str().unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(ids(fabric.replay(&ReplayQuery::default())), ["01J0000000000000000000000B", "01J0000000000000000000000A", "01J0000000000000000000000C"]);
        let after_b = ReplayQuery { after_event_id: Some("01J0000000000000000000000B".into()), ..Default::default() };
        assert_eq!(ids(fabric.replay(&after_b)), ["01J0000000000000000000000A", "01J0000000000000000000000C"]);
        let after_a = ReplayQuery { after_event_id: Some("01J0000000000000000000000A".into()), ..Default::default() };
        assert_eq!(ids(fabric.replay(&after_a)), ["01J0000000000000000000000C"]);
    }

    #[test]
    fn recorded_pages_are_bounded_by_bytes_and_hold_at_least_one() {
        let fabric = LocalFabric::new(1000, 1 << 20);
        let big = "x".repeat(10_000);
        for _ in 0..10 {
            fabric.publish(NewEvent::with_text("x", Source::default(), format!("{{\"p\":\"{big}\"}}")));
        }
        let first = fabric.recorded_page(None, 25_000);
        assert_eq!(first.len(), 2, "about 10 kB each");
        let all = fabric.recorded_page(None, usize::MAX);
        assert_eq!(all.len(), 10);
        let next = fabric.recorded_page(Some(first[1].id()), 25_000);
        assert_eq!(next[0].id(), all[2].id(), "the next page starts after the last one");
        assert_eq!(fabric.recorded_page(None, 1).len(), 1, "one event larger than the page still goes");
        let last = fabric.newest_recorded().unwrap();
        assert!(fabric.recorded_page(Some(last.as_str()), 25_000).is_empty());
    }

    #[test]
    fn the_log_is_bounded_by_bytes() {
        let fabric = LocalFabric::new(1000, 100_000);
        let big = "x".repeat(10_000);
        for _ in 0..50 {
            fabric.publish(NewEvent::with_text("x", Source::default(), format!("{{\"p\":\"{big}\"}}")));
        }
        let kept = fabric.replay(&ReplayQuery::default()).total_count;
        assert!((8..=10).contains(&kept), "about 100 kB of 10 kB events: {kept}");
        assert!(fabric.events.lock().log_bytes <= 100_000);
    }
}
