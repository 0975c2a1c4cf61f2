//! The in-process fabric's side toward a log kept elsewhere: the cluster's
//! shared log (events numbered here, held until it gives them back, or
//! numbered elsewhere) and a durable copy (restored at start, written page
//! by page).

use std::sync::Arc;

use super::local::LocalFabric;
use super::log::Recorded;
use crate::events::{NewEvent, StoredEvent};
use map_protocol::ids::Ulid;

impl LocalFabric {
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
        let rec = Recorded::new(id, timestamp, event);
        self.events.lock().log.add_pending(rec);
    }

    /// The shared log gave back an event made here: fan it out and log it, in the log's order.
    pub fn confirm(&self, id: &str) {
        let mut guard = self.events.lock();
        let Some(rec) = guard.log.take_pending(id) else { return };
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
            events.log.keep(Recorded::new(id, timestamp, event));
        }
    }

    /// The logged entries after `after` (from the oldest when `None` or when
    /// it has left the log), oldest first, about `max_bytes` of them (at
    /// least one): a writer holds one page at a time, not the whole log.
    pub fn recorded_page(&self, after: Option<&str>, max_bytes: usize) -> Vec<Arc<Recorded>> {
        self.events.lock().log.page(after, max_bytes)
    }

    /// The oldest logged event: where the replay window starts.
    pub fn oldest_recorded(&self) -> Option<Ulid> {
        self.events.lock().log.oldest()
    }

    /// The newest logged event.
    pub fn newest_recorded(&self) -> Option<Ulid> {
        self.events.lock().log.newest()
    }

    /// Events up to `id` are on disk.
    pub fn mark_saved(&self, id: &str) {
        *self.saved_through.lock() = Some(id.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Source;
    use crate::fabric::{Fabric, ReplayPage, ReplayQuery};
    use serde_json::{json, Value};

    #[test]
    fn ingested_events_page_by_id_in_arrival_order() {
        // A cluster's log is in the shared log's order, which ids made on
        // several nodes follow only roughly.
        let fabric = LocalFabric::new(10, 1 << 20);
        let stored = |id: &str| StoredEvent::of(id, 1, &NewEvent::new("x", Source::default(), json!({"id": id})));
        for id in ["01J0000000000000000000000B", "01J0000000000000000000000A", "01J0000000000000000000000C"] {
            fabric.ingest(stored(id), true);
        }
        let ids = |page: ReplayPage| {
            page.events.iter().map(|e| serde_json::from_str::<Value>(e.get()).unwrap()["eventId"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        };
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
}
