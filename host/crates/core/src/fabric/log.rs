//! The in-memory replay window: recorded events in order, bounded by count
//! and bytes, paged for `map/replay` and for a writer keeping a durable copy.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::value::RawValue;

use super::wire::{body_of, replay_entry};
use super::{ReplayFrom, ReplayPage, ReplayQuery};
use crate::events::{NewEvent, StoredEvent};
use map_protocol::ids::Ulid;

pub struct Recorded {
    pub(super) event_id: Ulid,
    pub(super) timestamp: u64,
    pub(super) event: NewEvent,
    /// What the entry holds, about: the replay log is bounded by it.
    bytes: usize,
}

impl Recorded {
    pub(super) fn new(event_id: Ulid, timestamp: u64, event: NewEvent) -> Recorded {
        Recorded { event_id, timestamp, bytes: event_size(&event), event }
    }

    pub fn id(&self) -> &str {
        self.event_id.as_str()
    }

    /// The entry as the durable log keeps it.
    pub fn stored(&self) -> StoredEvent {
        StoredEvent::of(self.event_id.as_str(), self.timestamp, &self.event)
    }
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

/// Entries a `keep` pushed out: usually one (a full log), so it needs no list.
#[derive(Default)]
pub(super) struct Evicted {
    first: Option<Arc<Recorded>>,
    more: Vec<Arc<Recorded>>,
}

pub(super) struct Log {
    entries: VecDeque<Arc<Recorded>>,
    /// Sum of the entries' `bytes`.
    bytes: usize,
    capacity: usize,
    max_bytes: usize,
    /// Events made here that a shared log has not given back yet (cluster):
    /// `map/replay` lists them after the log; subscriptions get them when
    /// they come back, in the shared order every node sees.
    pending: VecDeque<Arc<Recorded>>,
}

impl Log {
    /// A log of at most `capacity` events and about `max_bytes`.
    pub(super) fn new(capacity: usize, max_bytes: usize) -> Log {
        Log { entries: VecDeque::new(), bytes: 0, capacity: capacity.max(1), max_bytes, pending: VecDeque::new() }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The oldest logged event.
    pub(super) fn oldest(&self) -> Option<Ulid> {
        self.entries.front().map(|r| r.event_id)
    }

    /// The newest logged event.
    pub(super) fn newest(&self) -> Option<Ulid> {
        self.entries.back().map(|r| r.event_id)
    }

    /// Append and evict what the bounds no longer admit (for the caller to free outside its lock).
    pub(super) fn keep(&mut self, rec: Recorded) -> Evicted {
        self.bytes += rec.bytes;
        self.entries.push_back(Arc::new(rec));
        let mut evicted = Evicted::default();
        while self.entries.len() > self.capacity || (self.bytes > self.max_bytes && self.entries.len() > 1) {
            let Some(old) = self.entries.pop_front() else { break };
            self.bytes -= old.bytes;
            match evicted.first {
                None => evicted.first = Some(old),
                Some(_) => evicted.more.push(old),
            }
        }
        evicted
    }

    /// The logged entries from `from` on.
    pub(super) fn since(&self, from: &ReplayFrom) -> impl Iterator<Item = &Arc<Recorded>> {
        let start = match from {
            ReplayFrom::EventId(after) => position_after(&self.entries, after),
            ReplayFrom::Timestamp(t) => self.entries.partition_point(|r| r.timestamp < *t),
        };
        self.entries.range(start..)
    }

    /// Keep an event made here until the shared log gives it back.
    pub(super) fn add_pending(&mut self, rec: Recorded) {
        self.pending.push_back(Arc::new(rec));
    }

    /// The shared log gave back an event made here: it is no longer pending.
    pub(super) fn take_pending(&mut self, id: &str) -> Option<Recorded> {
        let at = self.pending.iter().position(|r| r.event_id.as_str() == id)?;
        let rec = self.pending.remove(at)?;
        Some(Arc::try_unwrap(rec).unwrap_or_else(|shared| Recorded {
            event_id: shared.event_id,
            timestamp: shared.timestamp,
            event: shared.event.clone(),
            bytes: shared.bytes,
        }))
    }

    /// The logged entries after `after` (from the oldest when `None` or when
    /// it has left the log), oldest first, about `max_bytes` of them (at least one).
    pub(super) fn page(&self, after: Option<&str>, max_bytes: usize) -> Vec<Arc<Recorded>> {
        let start = after.map_or(0, |a| position_after(&self.entries, a));
        let mut bytes = 0;
        let mut page = Vec::new();
        for r in self.entries.range(start..) {
            if !page.is_empty() && bytes + r.bytes > max_bytes {
                break;
            }
            bytes += r.bytes;
            page.push(r.clone());
        }
        page
    }

    /// One page of `map/replay`.
    pub(super) fn replay(&self, q: &ReplayQuery) -> ReplayPage {
        let limit = q.limit.unwrap_or(100).clamp(1, 1000);
        // The log, then what is waiting for the shared log (a client reads its own events at once).
        let start = match &q.after_event_id {
            Some(after) => match self.pending.iter().position(|r| r.event_id.as_str() == after) {
                Some(i) => self.entries.len() + i + 1,
                None => position_after(&self.entries, after),
            },
            None => 0,
        };
        let (in_log, in_pending) = (start.min(self.entries.len()), start.saturating_sub(self.entries.len()));
        let selected = self.entries.range(in_log..).chain(self.pending.range(in_pending.min(self.pending.len())..)).filter(|r| {
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
                let kind = q.filter.as_ref().map_or(Cow::Borrowed(&*r.event.kind), |f| f.spelling(&r.event.kind));
                let body = body_of(r.event_id.as_str(), r.timestamp, &kind, &r.event);
                let entry = replay_entry(r.event_id.as_str(), r.timestamp, r.event.caused_by.as_deref(), &body);
                events.push(RawValue::from_string(entry).expect("entries are JSON"));
            }
        }
        ReplayPage { has_more: total > events.len(), events, total_count: total }
    }
}
