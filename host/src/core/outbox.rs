//! A session's outgoing frames. A connection attaches a writer; while none is
//! attached (between a disconnect and a resume, or an HTTP session with no SSE
//! stream) a bounded number of frames wait for the next one.

use std::collections::VecDeque;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;

/// One outgoing JSON-RPC text. Built only from `String`/`&'static str`, so it is always UTF-8.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame(Bytes);

impl Frame {
    pub fn from_static(s: &'static str) -> Frame {
        Frame(Bytes::from_static(s.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor takes UTF-8 text.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// The frame on one line, for line-based transports (stdio, SSE). Raw
    /// JSON passed through (payloads, addresses, plugin results) may be
    /// pretty-printed; outside strings a line break is only whitespace, and
    /// inside strings JSON has none, so each becomes a space.
    pub fn single_line(&self) -> std::borrow::Cow<'_, [u8]> {
        if !self.0.iter().any(|b| matches!(b, b'\n' | b'\r')) {
            return std::borrow::Cow::Borrowed(&self.0);
        }
        std::borrow::Cow::Owned(self.0.iter().map(|&b| if matches!(b, b'\n' | b'\r') { b' ' } else { b }).collect())
    }
}

impl From<String> for Frame {
    fn from(s: String) -> Frame {
        Frame(Bytes::from(s))
    }
}

/// Why a frame could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The reader is slow: the queue is at its limit.
    Backlogged,
    /// The session is gone for good.
    Closed,
}

pub struct Outbox {
    inner: Mutex<Attachment>,
    capacity: usize,
}

enum Attachment {
    Attached(mpsc::Sender<Frame>),
    Parked(VecDeque<Frame>),
    Closed,
}

impl Outbox {
    pub fn new(capacity: usize) -> Outbox {
        Outbox { inner: Mutex::new(Attachment::Parked(VecDeque::new())), capacity }
    }

    /// Send to this connection's writer from now on; frames parked meanwhile go first.
    pub fn attach(&self, tx: mpsc::Sender<Frame>) {
        let mut inner = self.inner.lock();
        if let Attachment::Parked(parked) = &mut *inner {
            for frame in parked.drain(..) {
                let _ = tx.try_send(frame);
            }
        }
        *inner = Attachment::Attached(tx);
    }

    /// Stop writing to the connection of `tx` (if it is still the attached one);
    /// later frames are parked.
    pub fn detach(&self, tx: &mpsc::Sender<Frame>) {
        let mut inner = self.inner.lock();
        if matches!(&*inner, Attachment::Attached(cur) if cur.same_channel(tx)) {
            *inner = Attachment::Parked(VecDeque::new());
        }
    }

    /// A live connection is writing this outbox.
    pub fn is_attached(&self) -> bool {
        matches!(&*self.inner.lock(), Attachment::Attached(tx) if !tx.is_closed())
    }

    pub fn close(&self) {
        *self.inner.lock() = Attachment::Closed;
    }

    /// Queue a notification without waiting; a full queue refuses it.
    pub fn push(&self, frame: Frame) -> Result<(), Full> {
        let mut inner = self.inner.lock();
        match &mut *inner {
            Attachment::Attached(tx) => match tx.try_send(frame) {
                Ok(()) => Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => Err(Full::Backlogged),
                Err(mpsc::error::TrySendError::Closed(frame)) => {
                    let mut parked = VecDeque::new();
                    parked.push_back(frame);
                    *inner = Attachment::Parked(parked);
                    Ok(())
                }
            },
            Attachment::Parked(parked) if parked.len() < self.capacity => {
                parked.push_back(frame);
                Ok(())
            }
            Attachment::Parked(_) => Err(Full::Backlogged),
            Attachment::Closed => Err(Full::Closed),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_line_keeps_the_json_and_drops_line_breaks() {
        let f = Frame::from("{\"a\":\r\n  {\"b\": \"x\\ny\"}\n}".to_string());
        let line = f.single_line();
        assert!(!line.contains(&b'\n') && !line.contains(&b'\r'));
        let a: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(a, serde_json::from_str::<serde_json::Value>(f.as_str()).unwrap());
        assert!(matches!(Frame::from_static("{}").single_line(), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn parks_until_attached_and_bounds_the_queue() {
        let ob = Outbox::new(2);
        ob.push(Frame::from_static("a")).unwrap();
        ob.push(Frame::from_static("b")).unwrap();
        assert_eq!(ob.push(Frame::from_static("c")), Err(Full::Backlogged));
        let (tx, mut rx) = mpsc::channel(2);
        ob.attach(tx.clone());
        assert_eq!(rx.try_recv().unwrap().as_str(), "a");
        assert_eq!(rx.try_recv().unwrap().as_str(), "b");
        ob.push(Frame::from_static("d")).unwrap();
        assert_eq!(rx.try_recv().unwrap().as_str(), "d");
        ob.detach(&tx);
        ob.push(Frame::from_static("p")).unwrap();
        assert!(rx.try_recv().is_err());
        ob.close();
        assert_eq!(ob.push(Frame::from_static("e")), Err(Full::Closed));
    }
}
