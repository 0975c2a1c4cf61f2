//! `map/auth/expiring`: a notification to a session whose credential (a
//! JWT) expires within five minutes, sent once per expiry to the connection
//! that holds the session then. One timer per session with an expiring
//! credential, none for the others: nothing walks all sessions.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use tokio::task::AbortHandle;

use super::outbox::{Frame, Outbox};
use map_protocol::ids;

pub const METHOD: &str = "map/auth/expiring";

/// How long before the expiry the notice goes out.
pub const NOTICE_BEFORE_MS: u64 = 5 * 60 * 1000;

/// `refreshBefore` is this long before the expiry (the SDK's own refresh
/// timer uses the same margin), but never before the notice itself.
const REFRESH_MARGIN_MS: u64 = 60 * 1000;

/// A session's credential expiry and the timer that announces it.
#[derive(Default)]
pub struct Expiry {
    state: Mutex<Armed>,
}

#[derive(Default)]
struct Armed {
    /// Unix ms; none: the credential does not expire.
    expires_at: Option<u64>,
    timer: Option<AbortHandle>,
}

impl Expiry {
    /// When the session's credential expires (Unix ms).
    pub fn expires_at(&self) -> Option<u64> {
        self.state.lock().expires_at
    }

    /// A connection has taken the session up (opened, resumed, an event
    /// stream attached): announce `expires_at` to it, once, when due. A
    /// notice due already is returned, for the caller to write after its
    /// answer (a notice must not overtake the answer to `map/connect`).
    #[must_use]
    pub fn arm(&self, expires_at: Option<u64>, outbox: &Arc<Outbox>) -> Option<Frame> {
        let mut state = self.state.lock();
        if let Some(timer) = state.timer.take() {
            timer.abort();
        }
        state.expires_at = expires_at;
        let at = expires_at?;
        let now = ids::now_ms();
        let due_in = at.saturating_sub(NOTICE_BEFORE_MS).saturating_sub(now);
        if due_in == 0 {
            return Some(frame(at, now));
        }
        state.timer = start(at, due_in, outbox.clone());
        None
    }

    /// The session's credential was refreshed: a new expiry is announced
    /// anew; the same expiry is not announced twice.
    #[must_use]
    pub fn refreshed(&self, expires_at: Option<u64>, outbox: &Arc<Outbox>) -> Option<Frame> {
        if self.expires_at() == expires_at {
            return None;
        }
        self.arm(expires_at, outbox)
    }

    /// The session has ended.
    pub fn cancel(&self) {
        if let Some(timer) = self.state.lock().timer.take() {
            timer.abort();
        }
    }
}

/// The notice's params at `now`: all times in Unix ms.
pub fn notice(expires_at: u64, now: u64) -> serde_json::Value {
    json!({
        "expiresAt": expires_at,
        "expiresInMs": expires_at.saturating_sub(now),
        "refreshBefore": expires_at.saturating_sub(REFRESH_MARGIN_MS).max(now),
    })
}

fn frame(expires_at: u64, now: u64) -> Frame {
    Frame::from(map_protocol::rpc::encode_notification(METHOD, &notice(expires_at, now)))
}

/// Sleep until the notice is due, then send it to the connection holding
/// the session, if one does (a session taken up later is armed again).
/// None outside a runtime (nothing to run a timer on).
fn start(expires_at: u64, due_in: u64, outbox: Arc<Outbox>) -> Option<AbortHandle> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let task = runtime.spawn(async move {
        tokio::time::sleep(Duration::from_millis(due_in)).await;
        if outbox.is_attached() {
            let _ = outbox.push(frame(expires_at, ids::now_ms()));
        }
    });
    Some(task.abort_handle())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_counts_down_in_ms_and_asks_for_a_refresh_no_earlier_than_now() {
        let n = notice(1_000_000, 700_000);
        assert_eq!(n, json!({"expiresAt": 1_000_000, "expiresInMs": 300_000, "refreshBefore": 940_000}));
        let late = notice(1_000_000, 990_000);
        assert_eq!(late["refreshBefore"], 990_000);
        assert_eq!(notice(1_000, 2_000)["expiresInMs"], 0, "an expiry already passed (inside the leeway) is due now");
    }

    /// The timer's firing is the interop suite's (auth-expiring.test.mjs, in
    /// real time); here, what is armed, re-armed and announced at once.
    #[tokio::test]
    async fn one_notice_per_expiry_and_a_new_one_after_a_refresh() {
        let outbox = Arc::new(Outbox::new(16, 1 << 20));
        let (tx, mut rx) = super::super::outbox::channel(16, 1 << 20);
        outbox.attach(tx);
        let expiry = Expiry::default();
        let at = ids::now_ms() + NOTICE_BEFORE_MS + 10_000;
        assert!(expiry.arm(Some(at), &outbox).is_none(), "not due yet");
        assert!(expiry.state.lock().timer.is_some(), "a timer waits for it");
        assert!(expiry.refreshed(Some(at), &outbox).is_none(), "the same expiry is not announced twice");
        assert!(expiry.state.lock().timer.is_some(), "and its timer stays");
        let soon = ids::now_ms() + 60_000;
        let due = expiry.refreshed(Some(soon), &outbox).expect("re-armed, due at once: for the caller to write");
        assert!(due.as_str().contains(METHOD) && due.as_str().contains(&soon.to_string()));
        assert!(expiry.state.lock().timer.is_none(), "the earlier timer is gone");
        assert_eq!(expiry.expires_at(), Some(soon));
        assert!(expiry.arm(None, &outbox).is_none(), "a credential that does not expire");
        assert!(expiry.state.lock().timer.is_none());
        assert!(rx.try_recv().is_none(), "nothing was sent by a timer");
    }
}
