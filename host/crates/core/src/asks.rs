//! Requests from the gateway to a participant, and the wait for its
//! response: the gateway writes a JSON-RPC request on the participant's
//! session (the relayed `workspace/*` methods, say) and the participant
//! answers it on that session as it answers any server request.
//!
//! - Ids are strings `gw-ask-<n>`: the SDK's own requests carry integers,
//!   so neither side can take the other's answers for its own.
//! - An answer counts only on the session the request went to; any other
//!   response frame is dropped, as before.
//! - At most `max_pending` requests wait per session; one more is refused
//!   (4000, retryable) without being sent.
//! - Each waits at most its timeout (then 3002, retryable). A closed
//!   connection or an ended session fails what waits on it at once, and a
//!   caller that stops waiting takes its entry with it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::outbox::{Frame, Full, Outbox};
use map_protocol::rpc::{codes, RpcError};

/// The prefix of the gateway's request ids.
const ID_PREFIX: &str = "gw-ask-";

/// "The participant did not answer", JSON-RPC's agent-not-responding code.
pub const NOT_RESPONDING: i64 = 3002;

/// One request for a participant.
#[derive(Debug, Clone)]
pub struct Ask {
    /// Who is asked, as errors name it (`Agent a-1`).
    pub who: String,
    pub method: String,
    /// A JSON object.
    pub params: Box<RawValue>,
    pub timeout: Duration,
    pub max_pending: usize,
}

/// What the participant answered: its result, or its error as it gave it.
pub type Answer = Result<Box<RawValue>, RpcError>;

struct Waiter {
    session: String,
    tx: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Inner {
    /// Request id → who waits.
    waiting: HashMap<String, Waiter>,
    /// Session → requests waiting on it.
    per_session: HashMap<String, usize>,
}

/// One tenant's requests waiting for participants' answers.
#[derive(Default)]
pub struct Asks {
    inner: Mutex<Inner>,
    next: AtomicU64,
}

/// Removes a request's entry when its caller stops waiting, however it ends.
struct Entry<'a> {
    asks: &'a Asks,
    id: String,
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        self.asks.take(&self.id);
    }
}

#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow)]
    id: Option<&'a str>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct ErrorObject {
    code: i64,
    #[serde(default)]
    message: String,
    #[serde(default)]
    data: Option<Value>,
}

fn not_responding(message: String) -> RpcError {
    RpcError::new(NOT_RESPONDING, message)
}

impl Asks {
    /// Send `ask` to the session whose outbox this is and wait for its answer.
    pub async fn ask(&self, outbox: &Outbox, session: &str, ask: &Ask) -> Answer {
        let who = &ask.who;
        if !outbox.is_attached() {
            return Err(not_responding(format!("{who} is not connected now")));
        }
        let (id, answer) = self.open(session, ask.max_pending, who)?;
        let entry = Entry { asks: self, id };
        let mut frame = String::with_capacity(ask.params.get().len() + ask.method.len() + 64);
        frame.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
        map_protocol::rpc::push_json_str(&mut frame, &entry.id);
        frame.push_str(",\"method\":");
        map_protocol::rpc::push_json_str(&mut frame, &ask.method);
        frame.push_str(",\"params\":");
        frame.push_str(ask.params.get());
        frame.push('}');
        match outbox.push(Frame::from(frame)) {
            Ok(()) => {}
            Err(Full::Backlogged) => return Err(RpcError::new(codes::RESOURCE_EXHAUSTED, format!("{who} is not reading its session; try again later"))),
            Err(Full::Closed) => return Err(not_responding(format!("{who} is not connected now"))),
        }
        let timeout_ms = ask.timeout.as_millis();
        match tokio::time::timeout(ask.timeout, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(not_responding(format!("{who} left before it answered {}", ask.method))),
            Err(_) => Err(not_responding(format!("{who} did not answer {} within {timeout_ms} ms", ask.method))),
        }
        // `entry` goes here and with it whatever is left of the request.
    }

    /// A fresh request id for `session`, unless too many wait on it already.
    fn open(&self, session: &str, max_pending: usize, who: &str) -> Result<(String, oneshot::Receiver<Answer>), RpcError> {
        let mut inner = self.inner.lock();
        let count = inner.per_session.entry(session.to_string()).or_default();
        if *count >= max_pending {
            let e = RpcError::new(codes::RESOURCE_EXHAUSTED, format!("{max_pending} requests already wait for {who}; try again later"));
            return Err(e.with_data(json!({"retryAfterMs": 1000})));
        }
        *count += 1;
        let id = format!("{ID_PREFIX}{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (tx, rx) = oneshot::channel();
        inner.waiting.insert(id.clone(), Waiter { session: session.to_string(), tx });
        Ok((id, rx))
    }

    /// Forget a request; who waited for it, if anyone still does.
    fn take(&self, id: &str) -> Option<Waiter> {
        let mut inner = self.inner.lock();
        let waiter = inner.waiting.remove(id)?;
        if let Some(count) = inner.per_session.get_mut(&waiter.session) {
            *count -= 1;
            if *count == 0 {
                inner.per_session.remove(&waiter.session);
            }
        }
        Some(waiter)
    }

    /// A response frame that came in on `session`: `true` when it answered
    /// one of the gateway's requests to that session.
    pub fn answered(&self, session: &str, frame: &[u8]) -> bool {
        let Ok(response) = serde_json::from_slice::<Response>(frame) else { return false };
        let Some(id) = response.id.filter(|id| id.starts_with(ID_PREFIX)) else { return false };
        if self.inner.lock().waiting.get(id).is_none_or(|w| w.session != session) {
            return false;
        }
        let Some(waiter) = self.take(id) else { return false };
        let answer = match (response.error, response.result) {
            (Some(e), _) => Err(RpcError { code: e.code, message: e.message, data: e.data }),
            (None, Some(result)) => Ok(result.to_owned()),
            (None, None) => Err(RpcError::internal("the answer had neither a result nor an error")),
        };
        let _ = waiter.tx.send(answer);
        true
    }

    /// The session's connection closed or the session ended: what waits
    /// on it fails now.
    pub fn session_closed(&self, session: &str) {
        let mut inner = self.inner.lock();
        if inner.per_session.remove(session).is_none() {
            return;
        }
        // Dropping the senders wakes their callers ("left before it answered").
        inner.waiting.retain(|_, w| w.session != session);
    }

    /// Requests waiting now, for tests.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.inner.lock().waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::channel;

    fn ask(timeout_ms: u64, max_pending: usize) -> Ask {
        Ask {
            who: "agent a".into(),
            method: "workspace/read".into(),
            params: RawValue::from_string(r#"{"path":"a"}"#.into()).unwrap(),
            timeout: Duration::from_millis(timeout_ms),
            max_pending,
        }
    }

    fn attached() -> (Outbox, crate::outbox::FrameRx) {
        let outbox = Outbox::new(16, 1 << 20);
        let (tx, rx) = channel(16, 1 << 20);
        outbox.attach(tx);
        (outbox, rx)
    }

    async fn sent_id(rx: &mut crate::outbox::FrameRx) -> String {
        let frame = rx.recv().await.expect("a request was written");
        let v: Value = serde_json::from_str(frame.as_str()).unwrap();
        assert_eq!(v["method"], "workspace/read");
        assert_eq!(v["params"]["path"], "a");
        v["id"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn an_answer_on_the_same_session_completes_the_request() {
        let asks = Asks::default();
        let (outbox, mut rx) = attached();
        let request = ask(5_000, 4);
        let waiting = asks.ask(&outbox, "s1", &request);
        let answer = async {
            let id = sent_id(&mut rx).await;
            let frame = format!(r#"{{"jsonrpc":"2.0","id":"{id}","result":{{"text":"hi"}}}}"#);
            assert!(!asks.answered("s2", frame.as_bytes()), "another session cannot answer it");
            assert!(!asks.answered("s1", br#"{"jsonrpc":"2.0","id":7,"result":{}}"#), "the client's own ids are not ours");
            assert!(asks.answered("s1", frame.as_bytes()));
        };
        let (result, ()) = tokio::join!(waiting, answer);
        assert_eq!(result.unwrap().get(), r#"{"text":"hi"}"#);
        assert_eq!(asks.pending(), 0);
    }

    #[tokio::test]
    async fn errors_pass_through_and_silence_times_out() {
        let asks = Asks::default();
        let (outbox, mut rx) = attached();
        let request = ask(5_000, 4);
        let waiting = asks.ask(&outbox, "s1", &request);
        let answer = async {
            let id = sent_id(&mut rx).await;
            let frame = format!(r#"{{"jsonrpc":"2.0","id":"{id}","error":{{"code":12001,"message":"no such file"}}}}"#);
            assert!(asks.answered("s1", frame.as_bytes()));
        };
        let (result, ()) = tokio::join!(waiting, answer);
        assert_eq!(result.unwrap_err().code, 12001);
        let e = asks.ask(&outbox, "s1", &ask(20, 4)).await.unwrap_err();
        assert_eq!(e.code, NOT_RESPONDING);
        assert!(e.message.contains("within 20 ms"), "{e}");
        assert_eq!(asks.pending(), 0, "a timed-out request is forgotten");
    }

    #[tokio::test]
    async fn requests_per_session_are_bounded_and_a_closed_session_fails_them() {
        let asks = Asks::default();
        let (outbox, _rx) = attached();
        let request = ask(5_000, 1);
        let first = asks.ask(&outbox, "s1", &request);
        let second = async {
            tokio::task::yield_now().await;
            let e = asks.ask(&outbox, "s1", &ask(5_000, 1)).await.unwrap_err();
            assert_eq!(e.code, codes::RESOURCE_EXHAUSTED);
            asks.session_closed("s1");
        };
        let (result, ()) = tokio::join!(first, second);
        let e = result.unwrap_err();
        assert_eq!(e.code, NOT_RESPONDING);
        assert!(e.message.contains("left before it answered"), "{e}");
        assert_eq!(asks.pending(), 0);
    }

    #[tokio::test]
    async fn a_detached_session_is_not_asked() {
        let asks = Asks::default();
        let outbox = Outbox::new(16, 1 << 20);
        let e = asks.ask(&outbox, "s1", &ask(5_000, 4)).await.unwrap_err();
        assert_eq!(e.code, NOT_RESPONDING);
        assert_eq!(asks.pending(), 0);
    }
}
