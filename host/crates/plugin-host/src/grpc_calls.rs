//! The host side of a plugin's open gRPC calls: where `grpc-stream.write`
//! and `finish` go, with a bounded queue per call for backpressure. The
//! transport turns a call's messages and final status into HTTP/2.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, Notify};

pub use super::bindings::map_gateway::plugin::grpc_types::Status;

/// A call's request messages as they arrive; an error ends the call with
/// that status. Read only as the plugin takes them: the client's HTTP/2 flow
/// control is the backpressure.
pub type Requests = Pin<Box<dyn futures_util::Stream<Item = Result<Vec<u8>, Status>> + Send>>;

/// Response messages a call holds that the client has not read yet.
pub const QUEUED_MESSAGES: usize = 16;

pub mod code {
    pub const OK: u32 = 0;
    pub const CANCELLED: u32 = 1;
    pub const UNKNOWN_STATUS: u32 = 2;
    pub const DEADLINE_EXCEEDED: u32 = 4;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const INTERNAL: u32 = 13;
    pub const UNAVAILABLE: u32 = 14;
}

pub fn status(code: u32, message: impl Into<String>) -> Status {
    Status { code, message: message.into() }
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

struct Open {
    messages: mpsc::Sender<Vec<u8>>,
    status: oneshot::Sender<Status>,
    ended: Arc<Notify>,
}

/// The open calls of one tenant plugin.
#[derive(Default)]
pub struct GrpcCalls {
    open: Mutex<HashMap<u64, Open>>,
}

/// What the client receives: messages, then one status.
pub struct Response {
    pub messages: mpsc::Receiver<Vec<u8>>,
    pub status: oneshot::Receiver<Status>,
    /// Ends the call (CANCELLED) when the response is dropped: the client
    /// went away (a `CallGuard`, or a relayed call's end).
    pub guard: Box<dyn Send>,
    /// The plugin's callbacks for this call, when they run on this node.
    pub drive: Option<Drive>,
}

/// The plugin's side of one call: its callbacks, in order, until the call
/// ends. The transport polls it in the request's own task while it waits
/// for the first answer, so a quick call needs no task hand-off; whatever
/// is left then runs on the plugin threads (`detach`). Dropped unfinished,
/// it goes on there too: an instance is never dropped in the middle of a
/// callback, and the call's end (`grpc-closed`) always reaches the plugin.
pub struct Drive {
    future: Option<BoxFuture<'static, ()>>,
    runtime: Handle,
}

impl Drive {
    pub fn new(future: BoxFuture<'static, ()>, runtime: Handle) -> Drive {
        Drive { future: Some(future), runtime }
    }

    /// Whether the callbacks are over.
    pub fn is_done(&self) -> bool {
        self.future.is_none()
    }

    /// Run the rest on the plugin threads.
    pub fn detach(mut self) {
        self.spawn_rest();
    }

    fn spawn_rest(&mut self) {
        if let Some(future) = self.future.take() {
            self.runtime.spawn(future);
        }
    }
}

impl Future for Drive {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(future) = self.future.as_mut() else { return Poll::Ready(()) };
        futures_util::ready!(future.as_mut().poll(cx));
        self.future = None;
        Poll::Ready(())
    }
}

impl Drop for Drive {
    fn drop(&mut self) {
        self.spawn_rest();
    }
}

pub struct CallGuard {
    calls: Arc<GrpcCalls>,
    id: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.calls.end(self.id, status(code::CANCELLED, "the client went away"));
    }
}

/// The host's end of a call `grpc-unary` answers: one message or a status.
/// It is not registered among the open calls, so `grpc-stream` cannot
/// write to it.
pub struct Answer {
    messages: mpsc::Sender<Vec<u8>>,
    status: oneshot::Sender<Status>,
}

impl Answer {
    /// A call answered in one callback (`unary` names its id).
    pub fn unary() -> (u64, Response, Answer) {
        let id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(1);
        let (status_tx, status_rx) = oneshot::channel();
        (id, Response { messages: rx, status: status_rx, guard: Box::new(()), drive: None }, Answer { messages: tx, status: status_tx })
    }

    /// The response message, then OK.
    pub fn reply(self, body: Vec<u8>) {
        // The queue is empty and holds one: this only fails when the client is gone.
        let _ = self.messages.try_send(body);
        self.end(status(code::OK, ""));
    }

    /// End with `status`, after the message queued before it (the status
    /// is in place before the queue closes, as `GrpcCalls::end` does).
    pub fn end(self, status: Status) {
        let Answer { messages, status: tx } = self;
        let _ = tx.send(status);
        drop(messages);
    }

    /// Resolves when the client went away (the response was dropped).
    pub async fn abandoned(&mut self) {
        self.status.closed().await
    }
}

impl GrpcCalls {
    /// Register a call; `ended` fires when it is over, however it ends.
    pub fn open(self: &Arc<Self>) -> (u64, Response, Arc<Notify>) {
        let id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(QUEUED_MESSAGES);
        let (status_tx, status_rx) = oneshot::channel();
        let ended = Arc::new(Notify::new());
        self.open.lock().insert(id, Open { messages: tx, status: status_tx, ended: ended.clone() });
        (id, Response { messages: rx, status: status_rx, guard: Box::new(CallGuard { calls: self.clone(), id }), drive: None }, ended)
    }

    /// Queue one message, waiting for the client until `deadline` when the queue is full.
    pub async fn write(&self, id: u64, body: Vec<u8>, deadline: Instant) -> Result<(), String> {
        let tx = self.open.lock().get(&id).map(|o| o.messages.clone()).ok_or_else(|| format!("gRPC call {id} is not open"))?;
        match tokio::time::timeout_at(deadline.into(), tx.send(body)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(format!("gRPC call {id} is closed")),
            Err(_) => Err(format!("gRPC call {id}: the client did not read in time")),
        }
    }

    /// End a call with a status, after the messages queued before it.
    pub fn end(&self, id: u64, status: Status) -> bool {
        let Some(open) = self.open.lock().remove(&id) else { return false };
        let _ = open.status.send(status);
        open.ended.notify_one();
        true
    }

    /// End every open call (a hot swap retired this version): clients reconnect.
    pub fn end_all(&self, status: Status) {
        self.end_all_but(None, status);
    }

    /// End every open call but `keep`.
    pub fn end_all_but(&self, keep: Option<u64>, status: Status) {
        let ids: Vec<u64> = self.open.lock().keys().copied().filter(|id| Some(*id) != keep).collect();
        for id in ids {
            self.end(id, status.clone());
        }
    }
}
