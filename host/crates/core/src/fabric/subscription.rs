//! One subscription: numbering what it queues, holding events while
//! paused, and reporting what it lost with `subscription.overflow`.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::json;

use super::wire::event_frame;
use super::SubscriptionView;
use crate::events::{Filter, PERMISSIONS_UPDATED};
use crate::outbox::Outbox;
use map_protocol::ids::{self, Ulid};

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

pub(super) struct Subscription {
    pub(super) id: String,
    pub(super) session: String,
    pub(super) filter: Filter,
    pub(super) outbox: Arc<Outbox>,
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
    /// The session may not observe now (`observation.canObserve` revoked):
    /// only the notices of its permissions changing go out.
    blind: bool,
}

impl Subscription {
    /// A subscription numbering on from `sequence`; `newest` is the newest logged event.
    pub(super) fn new(id: String, session: &str, filter: Filter, outbox: Arc<Outbox>, sequence: u64, newest: Option<Ulid>, paused: bool) -> Subscription {
        Subscription {
            id,
            session: session.to_string(),
            filter,
            outbox,
            sequence,
            dropped: Gap::default(),
            last: newest,
            start: newest,
            paused,
            held: VecDeque::new(),
            held_bytes: 0,
            lost_while_paused: Gap::default(),
            blind: false,
        }
    }

    /// Whether an event of this type may go out: checked per event, so a bool
    /// set when the session's permissions change, not a look at them.
    pub(super) fn sees(&self, kind: &str) -> bool {
        !self.blind || kind == PERMISSIONS_UPDATED
    }

    /// The session may no longer observe (what a pause held goes too), or may again.
    pub(super) fn set_blind(&mut self, blind: bool) {
        self.blind = blind;
        if blind {
            self.held.clear();
            self.held_bytes = 0;
        }
    }

    /// Queue one event, or hold it while paused.
    pub(super) fn offer(&mut self, event_id: &str, timestamp: u64, caused_by: Option<&str>, body: &str) {
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
        match self.outbox.push(event_frame(&self.id, self.sequence + 1, event_id, timestamp, caused_by, body)) {
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
        if self.outbox.push(event_frame(&self.id, self.sequence + 1, &overflow_id, timestamp, None, &overflow)).is_err() {
            return false;
        }
        self.sequence += 1;
        self.dropped = Gap::default();
        true
    }

    /// Hold events from now on (`paused`), or send what was held and go on delivering.
    pub(super) fn set_paused(&mut self, paused: bool) {
        if paused {
            self.paused = true;
        } else if self.paused {
            self.resume();
        }
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

    /// What the operator sees of it.
    pub(super) fn view(&self) -> SubscriptionView {
        SubscriptionView {
            id: self.id.clone(),
            session_id: self.session.clone(),
            event_types: self.filter.event_types.clone(),
            sequence: self.sequence,
            dropped: self.dropped.count,
            paused: self.paused,
            last_event_id: self.last.map(|l| l.to_string()),
            filter: self.filter.clone(),
            start_event_id: self.start.map(|l| l.to_string()),
        }
    }
}
