//! A session's outgoing frames. A connection attaches a writer; while none is
//! attached (between a disconnect and a resume, or an HTTP session with no SSE
//! stream) a bounded number of frames wait for the next one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

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

/// Why `FrameTx::try_send` refused a frame (the frame comes back).
#[derive(Debug)]
pub enum Refused {
    /// At the limit by count or by bytes.
    Full(Frame),
    /// The receiving connection is gone.
    Closed(Frame),
}

/// A connection's queue of outgoing frames, bounded by count and by bytes.
/// An idle queue holds no buffer: it grows with what is queued.
pub fn channel(frames: usize, bytes: usize) -> (FrameTx, FrameRx) {
    let chan = Arc::new(Chan {
        state: Mutex::new(State { queue: VecDeque::new(), bytes: 0, senders: 1, receiver: true, ended: false, reader: None }),
        room: Notify::new(),
        max_frames: frames.max(1),
        max_bytes: bytes,
    });
    (FrameTx { chan: chan.clone() }, FrameRx { chan })
}

/// What both ends of a channel share.
struct Chan {
    state: Mutex<State>,
    /// Wakes senders waiting for room (or for the receiver to go).
    room: Notify,
    max_frames: usize,
    max_bytes: usize,
}

struct State {
    queue: VecDeque<Frame>,
    /// Bytes queued and not yet received.
    bytes: usize,
    senders: usize,
    receiver: bool,
    /// `FrameTx::end` was called: the connection is to close.
    ended: bool,
    /// The receiver, waiting for a frame.
    reader: Option<Waker>,
}

/// A queue emptied after a burst keeps at most this many slots.
const KEPT_SLOTS: usize = 256;

impl Chan {
    /// Queue `frame` (the caller checked the limits) and wake the receiver.
    fn push(&self, mut state: parking_lot::MutexGuard<'_, State>, frame: Frame) {
        state.bytes += frame.len();
        state.queue.push_back(frame);
        let reader = state.reader.take();
        drop(state);
        if let Some(w) = reader {
            w.wake();
        }
    }
}

/// The writing end of `channel`.
pub struct FrameTx {
    chan: Arc<Chan>,
}

impl Clone for FrameTx {
    fn clone(&self) -> FrameTx {
        self.chan.state.lock().senders += 1;
        FrameTx { chan: self.chan.clone() }
    }
}

impl Drop for FrameTx {
    fn drop(&mut self) {
        let mut state = self.chan.state.lock();
        state.senders -= 1;
        let reader = if state.senders == 0 { state.reader.take() } else { None };
        drop(state);
        if let Some(w) = reader {
            w.wake();
        }
    }
}

pub struct FrameRx {
    chan: Arc<Chan>,
}

impl Drop for FrameRx {
    fn drop(&mut self) {
        self.chan.state.lock().receiver = false;
        self.chan.room.notify_waiters();
    }
}

impl FrameTx {
    /// Wait for room by count (answers: a peer that does not read stops
    /// being read). Bytes are counted, so notifications see the backlog.
    pub async fn send(&self, frame: Frame) -> Result<(), Frame> {
        loop {
            let room = self.chan.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let state = self.chan.state.lock();
                if !state.receiver {
                    return Err(frame);
                }
                if state.queue.len() < self.chan.max_frames {
                    self.chan.push(state, frame);
                    return Ok(());
                }
            }
            room.await;
        }
    }

    /// Queue without waiting; refused when full by count or by bytes (a frame
    /// larger than the whole budget still goes into an empty queue).
    pub fn try_send(&self, frame: Frame) -> Result<(), Refused> {
        let state = self.chan.state.lock();
        if !state.receiver {
            return Err(Refused::Closed(frame));
        }
        if state.queue.len() >= self.chan.max_frames || (state.bytes > 0 && state.bytes + frame.len() > self.chan.max_bytes) {
            return Err(Refused::Full(frame));
        }
        self.chan.push(state, frame);
        Ok(())
    }

    pub fn same_channel(&self, other: &FrameTx) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }

    /// The receiving connection is gone.
    pub fn is_closed(&self) -> bool {
        !self.chan.state.lock().receiver
    }

    /// Close the connection: its reader's `recv` answers `None` from now on.
    pub fn end(&self) {
        let mut state = self.chan.state.lock();
        state.ended = true;
        let reader = state.reader.take();
        drop(state);
        if let Some(w) = reader {
            w.wake();
        }
    }
}

impl FrameRx {
    /// The next frame; `None` when every sender is gone or the channel was ended.
    pub async fn recv(&mut self) -> Option<Frame> {
        std::future::poll_fn(|cx| {
            let mut state = self.chan.state.lock();
            if state.ended {
                return Poll::Ready(None);
            }
            if let Some(f) = self.take(&mut state) {
                return Poll::Ready(Some(f));
            }
            if state.senders == 0 {
                return Poll::Ready(None);
            }
            if !state.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                state.reader = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }

    /// The writing side called `FrameTx::end`.
    pub fn ended(&self) -> bool {
        self.chan.state.lock().ended
    }

    pub fn try_recv(&mut self) -> Option<Frame> {
        let mut state = self.chan.state.lock();
        self.take(&mut state)
    }

    fn take(&self, state: &mut State) -> Option<Frame> {
        let was_full = state.queue.len() >= self.chan.max_frames;
        let f = state.queue.pop_front()?;
        state.bytes -= f.len();
        if state.queue.is_empty() && state.queue.capacity() > KEPT_SLOTS {
            state.queue = VecDeque::new();
        }
        if was_full {
            self.chan.room.notify_one();
        }
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
                Err(Refused::Full(_)) => {
                    map_observe::metrics::outbox_full();
                    Err(Full::Backlogged)
                }
                Err(Refused::Closed(frame)) => {
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
                map_observe::metrics::outbox_full();
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

    #[tokio::test]
    async fn a_full_queue_makes_send_wait_for_room() {
        let (tx, mut rx) = channel(1, 1 << 20);
        tx.send(Frame::from_static("a")).await.unwrap();
        assert!(matches!(tx.try_send(Frame::from_static("x")), Err(Refused::Full(_))));
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(Frame::from_static("b")).await }
        });
        assert_eq!(rx.recv().await.unwrap().as_str(), "a");
        waiting.await.unwrap().unwrap();
        assert_eq!(rx.recv().await.unwrap().as_str(), "b");
    }

    #[tokio::test]
    async fn the_receiver_sees_the_end_of_every_sender_and_senders_see_it_go() {
        let (tx, mut rx) = channel(1, 1 << 20);
        let tx2 = tx.clone();
        tx.send(Frame::from_static("a")).await.unwrap();
        drop(tx);
        let reader = tokio::spawn(async move { (rx.recv().await, rx.recv().await) });
        tokio::task::yield_now().await;
        drop(tx2);
        let (first, second) = reader.await.unwrap();
        assert_eq!(first.unwrap().as_str(), "a");
        assert_eq!(second, None, "no sender is left");

        let (tx, mut rx) = channel(1, 1 << 20);
        tx.send(Frame::from_static("a")).await.unwrap();
        let blocked = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(Frame::from_static("b")).await }
        });
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_some());
        drop(rx);
        let _ = blocked.await.unwrap();
        assert!(tx.is_closed());
        assert!(matches!(tx.try_send(Frame::from_static("c")), Err(Refused::Closed(_))));
        assert_eq!(tx.send(Frame::from_static("d")).await.unwrap_err().as_str(), "d");
    }
}
