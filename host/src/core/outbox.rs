//! A session's outgoing frames. A connection attaches a writer; while none is
//! attached (between a disconnect and a resume, or an HTTP session with no SSE
//! stream) a bounded number of frames wait for the next one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

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

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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

/// A connection's queue of outgoing frames, bounded by count and by bytes.
pub fn channel(frames: usize, bytes: usize) -> (FrameTx, FrameRx) {
    let (tx, rx) = mpsc::channel(frames.max(1));
    let shared = Arc::new(Shared::default());
    (FrameTx { tx, shared: shared.clone(), max_bytes: bytes }, FrameRx { rx, shared })
}

/// What both ends of a channel see.
#[derive(Default)]
struct Shared {
    /// Bytes sent and not yet received.
    queued: AtomicUsize,
    /// `FrameTx::end` was called: the connection is to close.
    ended: AtomicBool,
    wake: tokio::sync::Notify,
}

/// The writing end of `channel`.
#[derive(Clone)]
pub struct FrameTx {
    tx: mpsc::Sender<Frame>,
    shared: Arc<Shared>,
    max_bytes: usize,
}

pub struct FrameRx {
    rx: mpsc::Receiver<Frame>,
    shared: Arc<Shared>,
}

impl FrameTx {
    /// Wait for room by count (answers: a peer that does not read stops
    /// being read). Bytes are counted, so notifications see the backlog.
    pub async fn send(&self, frame: Frame) -> Result<(), Frame> {
        let n = frame.len();
        self.shared.queued.fetch_add(n, Ordering::Relaxed);
        self.tx.send(frame).await.map_err(|e| {
            self.shared.queued.fetch_sub(n, Ordering::Relaxed);
            e.0
        })
    }

    /// Queue without waiting; refused when full by count or by bytes (a frame
    /// larger than the whole budget still goes into an empty queue).
    pub fn try_send(&self, frame: Frame) -> Result<(), mpsc::error::TrySendError<Frame>> {
        let n = frame.len();
        let before = self.shared.queued.fetch_add(n, Ordering::Relaxed);
        if before > 0 && before + n > self.max_bytes {
            self.shared.queued.fetch_sub(n, Ordering::Relaxed);
            return Err(mpsc::error::TrySendError::Full(frame));
        }
        self.tx.try_send(frame).inspect_err(|_| {
            self.shared.queued.fetch_sub(n, Ordering::Relaxed);
        })
    }

    pub fn same_channel(&self, other: &FrameTx) -> bool {
        self.tx.same_channel(&other.tx)
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Close the connection: its reader's `recv` answers `None` from now on.
    pub fn end(&self) {
        self.shared.ended.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }
}

impl FrameRx {
    /// The next frame; `None` when every sender is gone or the channel was ended.
    pub async fn recv(&mut self) -> Option<Frame> {
        if self.ended() {
            return None;
        }
        let f = tokio::select! {
            f = self.rx.recv() => f?,
            _ = self.shared.wake.notified() => return None,
        };
        self.shared.queued.fetch_sub(f.len(), Ordering::Relaxed);
        Some(f)
    }

    /// The writing side called `FrameTx::end`.
    pub fn ended(&self) -> bool {
        self.shared.ended.load(Ordering::SeqCst)
    }

    pub fn try_recv(&mut self) -> Option<Frame> {
        let f = self.rx.try_recv().ok()?;
        self.shared.queued.fetch_sub(f.len(), Ordering::Relaxed);
        Some(f)
    }
}

pub struct Outbox {
    inner: Mutex<Attachment>,
    capacity: usize,
    max_bytes: usize,
}

enum Attachment {
    Attached(FrameTx),
    /// Frames waiting for a connection, and their bytes.
    Parked(VecDeque<Frame>, usize),
    Closed,
}

fn attach_locked(inner: &mut Attachment, tx: FrameTx) {
    if let Attachment::Parked(parked, _) = inner {
        for frame in parked.drain(..) {
            let _ = tx.try_send(frame);
        }
    }
    *inner = Attachment::Attached(tx);
}

impl Outbox {
    pub fn new(capacity: usize, max_bytes: usize) -> Outbox {
        Outbox { inner: Mutex::new(Attachment::Parked(VecDeque::new(), 0)), capacity, max_bytes }
    }

    /// Send to this connection's writer from now on; frames parked meanwhile go first.
    pub fn attach(&self, tx: FrameTx) {
        attach_locked(&mut self.inner.lock(), tx);
    }

    /// `attach`, unless a live connection is attached already or the session is closed.
    pub fn attach_if_free(&self, tx: FrameTx) -> bool {
        let mut inner = self.inner.lock();
        match &*inner {
            Attachment::Attached(cur) if !cur.is_closed() => false,
            Attachment::Closed => false,
            _ => {
                attach_locked(&mut inner, tx);
                true
            }
        }
    }

    /// Stop writing to the connection of `tx` (if it is still the attached one);
    /// later frames are parked.
    pub fn detach(&self, tx: &FrameTx) {
        let mut inner = self.inner.lock();
        if matches!(&*inner, Attachment::Attached(cur) if cur.same_channel(tx)) {
            *inner = Attachment::Parked(VecDeque::new(), 0);
        }
    }

    /// A live connection is writing this outbox.
    pub fn is_attached(&self) -> bool {
        matches!(&*self.inner.lock(), Attachment::Attached(tx) if !tx.is_closed())
    }

    pub fn close(&self) {
        *self.inner.lock() = Attachment::Closed;
    }

    /// Close for good, and end the connection attached now (if any).
    pub fn close_and_end(&self) {
        if let Attachment::Attached(tx) = std::mem::replace(&mut *self.inner.lock(), Attachment::Closed) {
            tx.end();
        }
    }

    /// Queue a notification without waiting; a full queue refuses it.
    pub fn push(&self, frame: Frame) -> Result<(), Full> {
        let mut inner = self.inner.lock();
        match &mut *inner {
            Attachment::Attached(tx) => match tx.try_send(frame) {
                Ok(()) => Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    crate::metrics::outbox_full();
                    Err(Full::Backlogged)
                }
                Err(mpsc::error::TrySendError::Closed(frame)) => {
                    let n = frame.len();
                    *inner = Attachment::Parked(VecDeque::from([frame]), n);
                    Ok(())
                }
            },
            Attachment::Parked(parked, bytes) if parked.len() < self.capacity && (parked.is_empty() || *bytes + frame.len() <= self.max_bytes) => {
                *bytes += frame.len();
                parked.push_back(frame);
                Ok(())
            }
            Attachment::Parked(..) => {
                crate::metrics::outbox_full();
                Err(Full::Backlogged)
            }
            Attachment::Closed => Err(Full::Closed),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
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
        let ob = Outbox::new(2, 1 << 20);
        ob.push(Frame::from_static("a")).unwrap();
        ob.push(Frame::from_static("b")).unwrap();
        assert_eq!(ob.push(Frame::from_static("c")), Err(Full::Backlogged));
        let (tx, mut rx) = channel(2, 1 << 20);
        ob.attach(tx.clone());
        assert_eq!(rx.try_recv().unwrap().as_str(), "a");
        assert_eq!(rx.try_recv().unwrap().as_str(), "b");
        ob.push(Frame::from_static("d")).unwrap();
        assert_eq!(rx.try_recv().unwrap().as_str(), "d");
        ob.detach(&tx);
        ob.push(Frame::from_static("p")).unwrap();
        assert!(rx.try_recv().is_none());
        ob.close();
        assert_eq!(ob.push(Frame::from_static("e")), Err(Full::Closed));
    }

    #[tokio::test]
    async fn ending_wakes_a_waiting_reader() {
        let ob = Arc::new(Outbox::new(2, 1 << 20));
        let (tx, mut rx) = channel(2, 1 << 20);
        ob.attach(tx.clone());
        let reader = tokio::spawn(async move { (rx.recv().await, rx.ended()) });
        tokio::task::yield_now().await;
        ob.close_and_end();
        assert_eq!(reader.await.unwrap(), (None, true));
        assert_eq!(ob.push(Frame::from_static("x")), Err(Full::Closed));
    }

    #[test]
    fn bytes_bound_the_queue_as_well_as_count() {
        let big = || Frame::from("x".repeat(400));
        let ob = Outbox::new(100, 1000);
        ob.push(big()).unwrap();
        ob.push(big()).unwrap();
        assert_eq!(ob.push(big()), Err(Full::Backlogged), "parked: 1200 bytes > 1000");
        let (tx, mut rx) = channel(100, 1000);
        ob.attach(tx);
        assert_eq!(ob.push(big()), Err(Full::Backlogged), "attached: 1200 bytes > 1000");
        rx.try_recv().unwrap();
        ob.push(big()).unwrap();
        // One frame over the whole budget still passes an empty queue.
        let (tx, _rx) = channel(100, 10);
        assert!(tx.try_send(big()).is_ok());
        assert!(tx.try_send(big()).is_err());
    }
}
