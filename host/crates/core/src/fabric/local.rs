//! The single-process fabric: delivery to the sessions joined here and
//! fan-out of events to their subscriptions.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard, RwLock};

use super::log::{Log, Recorded};
use super::subscription::Subscription;
use super::wire::body_of;
use super::{Fabric, FabricView, ParkedSubscription, ReplayFrom, ReplayPage, ReplayQuery};
use crate::events::{Filter, NewEvent};
use crate::outbox::{Frame, Full, Outbox};
use map_protocol::ids::{self, Ulid, UlidGen};

pub(super) struct Events {
    pub(super) subscriptions: Vec<Subscription>,
    pub(super) log: Log,
    /// Event ids, made under this lock so the log stays in id order.
    pub(super) ids: UlidGen,
    /// Sessions that may not observe now (see `Fabric::observing`).
    pub(super) blind: foldhash::HashSet<String>,
}

/// The single-process fabric: one per tenant, so tenants never share a queue.
/// Delivery and events have separate locks: a send delivers and then
/// records, and two senders should not queue behind each other for both.
/// Where both are held, `events` is taken first.
pub struct LocalFabric {
    outboxes: RwLock<foldhash::HashMap<String, Arc<Outbox>>>,
    pub(super) events: Mutex<Events>,
    /// `events.subscriptions.len()`, read without the lock on every send.
    subscribers: AtomicUsize,
    /// See `FabricView::saved_through`.
    pub(super) saved_through: Mutex<Option<String>>,
}

impl LocalFabric {
    /// A fabric whose replay log keeps at most `log_capacity` events and about `log_max_bytes`.
    pub fn new(log_capacity: usize, log_max_bytes: usize) -> LocalFabric {
        LocalFabric {
            outboxes: RwLock::default(),
            events: Mutex::new(Events {
                subscriptions: Vec::new(),
                log: Log::new(log_capacity, log_max_bytes),
                ids: UlidGen::new(),
                blind: Default::default(),
            }),
            subscribers: AtomicUsize::new(0),
            saved_through: Mutex::new(None),
        }
    }

    /// Fan an event out to matching subscriptions and keep it in the log.
    pub(super) fn record(&self, mut guard: MutexGuard<'_, Events>, id: Ulid, timestamp: u64, event: NewEvent) {
        let events = &mut *guard;
        let event_id = id.as_str();
        // The event as sent, once per spelling of its type (usually one).
        let mut bodies: Vec<(String, String)> = Vec::new();
        let parsed = OnceCell::new();
        for sub in events.subscriptions.iter_mut() {
            if sub.sees(&event.kind) && event.visible_to(&sub.session) && sub.filter.matches_with(&event, &parsed) {
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
        let evicted = events.log.keep(Recorded::new(id, timestamp, event));
        drop(guard);
        // Free the evicted entries outside the lock.
        drop(evicted);
    }

    fn start_subscription(&self, session: &str, id: String, filter: Filter, sequence: u64, from: Option<ReplayFrom>, paused: bool) {
        let mut inner = self.events.lock();
        let outbox = self.outboxes.read().get(session).cloned().unwrap_or_else(|| Arc::new(Outbox::new(1, 1)));
        let mut sub = Subscription::new(id, session, filter, outbox, sequence, inner.log.newest(), paused);
        sub.set_blind(inner.blind.contains(session));
        if let Some(from) = from {
            for r in inner.log.since(&from) {
                if sub.sees(&r.event.kind) && r.event.visible_to(&sub.session) && sub.filter.matches(&r.event) {
                    let id = r.event_id.as_str();
                    let body = body_of(id, r.timestamp, &sub.filter.spelling(&r.event.kind), &r.event);
                    sub.offer(id, r.timestamp, r.event.caused_by.as_deref(), &body);
                }
            }
        }
        inner.subscriptions.push(sub);
        self.subscribers.store(inner.subscriptions.len(), Ordering::Relaxed);
    }

    /// Whether a session is joined here.
    pub fn serves(&self, session: &str) -> bool {
        self.outboxes.read().contains_key(session)
    }
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
        events.blind.remove(session);
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
        let subscriptions = events.subscriptions.iter().map(Subscription::view).collect();
        FabricView { subscriptions, log_events: events.log.len(), log_bytes: events.log.bytes(), saved_through: self.saved_through.lock().clone() }
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
        sub.set_paused(paused);
        true
    }

    fn observing(&self, session: &str, allowed: bool) {
        let mut events = self.events.lock();
        let changed = if allowed { events.blind.remove(session) } else { events.blind.insert(session.to_string()) };
        if changed {
            for sub in events.subscriptions.iter_mut().filter(|s| s.session == session) {
                sub.set_blind(!allowed);
            }
        }
    }

    fn unsubscribe(&self, session: &str, subscription: &str) -> bool {
        let mut inner = self.events.lock();
        let before = inner.subscriptions.len();
        inner.subscriptions.retain(|s| !(s.id == subscription && s.session == session));
        self.subscribers.store(inner.subscriptions.len(), Ordering::Relaxed);
        inner.subscriptions.len() != before
    }

    fn replay(&self, q: &ReplayQuery) -> ReplayPage {
        self.events.lock().log.replay(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Source;
    use crate::outbox::{channel, FrameRx};
    use serde_json::{json, Value};

    fn frames(rx: &mut FrameRx) -> Vec<Value> {
        std::iter::from_fn(|| rx.try_recv()).map(|f| serde_json::from_str(f.as_str()).unwrap()).collect()
    }

    /// A fabric with session `s1` (an outbox of two frames) subscribed to everything.
    fn subscribed() -> (LocalFabric, FrameRx, String) {
        let fabric = LocalFabric::new(100, 1 << 20);
        let outbox = Arc::new(Outbox::new(2, 1 << 20));
        let (tx, rx) = channel(2, 1 << 20);
        outbox.attach(tx);
        fabric.join("s1", outbox);
        let sub = fabric.subscribe("s1", Filter::default(), None);
        (fabric, rx, sub)
    }

    #[test]
    fn sequence_is_gap_free_and_overflow_is_reported() {
        let (fabric, mut rx, sub) = subscribed();
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
        let (fabric, mut rx, sub) = subscribed();
        assert!(fabric.pause("s1", &sub, true));
        assert!(!fabric.pause("s2", &sub, true), "another session's subscription");
        let ids: Vec<Ulid> = (0..4).map(|i| fabric.publish(NewEvent::new("x_happened", Source::default(), json!({"i": i})))).collect();
        assert!(frames(&mut rx).is_empty(), "nothing while paused");
        assert!(fabric.pause("s1", &sub, false));
        let got = frames(&mut rx);
        let held: Vec<(u64, u64)> =
            got.iter().map(|f| (f["params"]["sequenceNumber"].as_u64().unwrap(), f["params"]["event"]["data"]["i"].as_u64().unwrap())).collect();
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
    fn a_session_that_may_not_observe_gets_only_the_notices_of_its_permissions() {
        let (fabric, mut rx, sub) = subscribed();
        assert!(fabric.pause("s1", &sub, true));
        fabric.publish(NewEvent::new("held", Source::default(), json!({})));
        fabric.observing("s1", false);
        assert!(fabric.pause("s1", &sub, false));
        assert!(frames(&mut rx).is_empty(), "what the pause held is dropped");
        fabric.publish(NewEvent::new("x_happened", Source::default(), json!({})));
        fabric.publish(NewEvent::new(crate::events::PERMISSIONS_UPDATED, Source::default(), json!({})));
        let later = fabric.subscribe("s1", Filter::default(), Some(ReplayFrom::Timestamp(0)));
        let got = frames(&mut rx);
        let seen: Vec<(&str, &str)> =
            got.iter().map(|f| (f["params"]["subscriptionId"].as_str().unwrap(), f["params"]["event"]["type"].as_str().unwrap())).collect();
        assert_eq!(
            seen,
            [(sub.as_str(), "permissions_client_updated"), (later.as_str(), "permissions_client_updated")],
            "live, and in a new subscription's replay"
        );
        fabric.observing("s1", true);
        fabric.publish(NewEvent::new("x_happened", Source::default(), json!({})));
        let got = frames(&mut rx);
        assert_eq!(got[0]["params"]["sequenceNumber"], 2, "numbered on without a gap");
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
    fn the_log_is_bounded_by_bytes() {
        let fabric = LocalFabric::new(1000, 100_000);
        let big = "x".repeat(10_000);
        for _ in 0..50 {
            fabric.publish(NewEvent::with_text("x", Source::default(), format!("{{\"p\":\"{big}\"}}")));
        }
        let kept = fabric.replay(&ReplayQuery::default()).total_count;
        assert!((8..=10).contains(&kept), "about 100 kB of 10 kB events: {kept}");
        assert!(fabric.events.lock().log.bytes() <= 100_000);
    }
}
