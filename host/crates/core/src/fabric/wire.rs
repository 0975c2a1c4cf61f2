//! The JSON text of events as sent: the event object, the `map/event`
//! frame around it, and a `map/replay` entry.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::events::NewEvent;
use crate::outbox::Frame;
use map_protocol::rpc::push_json_str;

/// The `event` object as sent, `{id, timestamp, type, source, data}`, typed
/// `kind` (the subscription's spelling of its type). Built only when
/// someone receives the event (most events are only ever recorded).
pub(super) fn body_of(event_id: &str, timestamp: u64, kind: &str, event: &NewEvent) -> String {
    let data = match &event.data_text {
        Some(text) => Cow::Borrowed(text.as_str()),
        None => Cow::Owned(serde_json::to_string(&event.data).expect("data serialises")),
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

/// A `map/event` notification: event `body` as the `sequence`th of subscription `sub_id`.
pub(super) fn event_frame(sub_id: &str, sequence: u64, event_id: &str, timestamp: u64, caused_by: Option<&str>, body: &str) -> Frame {
    let mut s = String::with_capacity(body.len() + 200);
    s.push_str(r#"{"jsonrpc":"2.0","method":"map/event","params":{"subscriptionId":"#);
    push_json_str(&mut s, sub_id);
    let _ = write!(s, r#","sequenceNumber":{sequence},"#);
    push_event_fields(&mut s, event_id, timestamp, caused_by, body);
    s.push_str("}}");
    Frame::from(s)
}

/// A `map/replay` entry: `{eventId, timestamp, causedBy?, event}`.
pub(super) fn replay_entry(event_id: &str, timestamp: u64, caused_by: Option<&str>, body: &str) -> String {
    let mut s = String::with_capacity(body.len() + 80);
    s.push('{');
    push_event_fields(&mut s, event_id, timestamp, caused_by, body);
    s.push('}');
    s
}

/// `"eventId":…,"timestamp":…,"causedBy"?:…,"event":…`, shared by both shapes.
fn push_event_fields(s: &mut String, event_id: &str, timestamp: u64, caused_by: Option<&str>, body: &str) {
    s.push_str(r#""eventId":"#);
    push_json_str(s, event_id);
    let _ = write!(s, r#","timestamp":{timestamp}"#);
    if let Some(c) = caused_by {
        s.push_str(r#","causedBy":"#);
        push_json_str(s, c);
    }
    s.push_str(r#","event":"#);
    s.push_str(body);
}
