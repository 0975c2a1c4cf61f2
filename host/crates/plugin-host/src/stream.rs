//! The body of a plugin's streaming HTTP response: each chunk passes on
//! as the plugin writes it; dropping the body (the client went away)
//! tells the call; the body ends when the call does, cleanly if the call
//! went well. A call that failed ends a Server-Sent Events response with
//! an `event: error` frame (then the body ends: HTTP/1.1 would drop a
//! frame still buffered when the connection is cut), and any other
//! response with an error (the connection cut), so that a client never
//! takes a stream cut short for a whole one.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use serde_json::json;
use tokio::sync::oneshot;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use map_protocol::rpc::RpcError;

/// When a stream last sent something to its client (for `stream_idle_ms`).
#[derive(Default)]
pub struct Progress {
    /// Nanoseconds since `epoch()`.
    at: AtomicU64,
}

/// A fixed instant the progress of every stream is counted from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Progress {
    pub fn touch(&self) {
        self.at.store(epoch().elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn last(&self) -> Instant {
        epoch() + Duration::from_nanos(self.at.load(Ordering::Relaxed))
    }
}

/// A request body as a streaming plugin reads it, as it arrives.
pub type RequestBody = http_body_util::combinators::UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>;

/// Why a stream ended early, as the client's HTTP stack sees it.
pub type StreamError = Box<dyn std::error::Error + Send + Sync>;

enum State {
    /// Passing the plugin's chunks on.
    Streaming,
    /// The plugin's body ended (`aborted`: with an error); waiting for how the call did.
    Ending {
        aborted: bool,
    },
    /// The call failed: the error still to give.
    Failing(String),
    Done,
}

pub struct StreamBody {
    inner: HyperOutgoingBody,
    /// How the call ended.
    ended: oneshot::Receiver<Result<(), RpcError>>,
    /// Dropped with the body: the call sees its client has gone.
    _client: oneshot::Sender<()>,
    /// Touched with each chunk that goes out.
    progress: Arc<Progress>,
    sse: bool,
    state: State,
}

impl StreamBody {
    pub(crate) fn new(
        inner: HyperOutgoingBody,
        ended: oneshot::Receiver<Result<(), RpcError>>,
        client: oneshot::Sender<()>,
        progress: Arc<Progress>,
        sse: bool,
    ) -> StreamBody {
        StreamBody { inner, ended, _client: client, progress, sse, state: State::Streaming }
    }

    /// The last frame of a failed Server-Sent Events stream.
    fn error_event(message: &str) -> Frame<Bytes> {
        let data = json!({"error": "plugin_failed", "message": message});
        Frame::data(Bytes::from(format!("event: error\ndata: {data}\n\n")))
    }
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = StreamError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, StreamError>>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Streaming => match Pin::new(&mut this.inner).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(frame))) => {
                        this.progress.touch();
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    Poll::Ready(Some(Err(_))) => this.state = State::Ending { aborted: true },
                    Poll::Ready(None) => this.state = State::Ending { aborted: false },
                },
                State::Ending { aborted } => {
                    let aborted = *aborted;
                    let failed = match Pin::new(&mut this.ended).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(Ok(()))) if !aborted => None,
                        Poll::Ready(Ok(Ok(()))) => Some("the plugin aborted its response body".to_string()),
                        Poll::Ready(Ok(Err(e))) => Some(e.message),
                        Poll::Ready(Err(_)) => Some("the plugin's call ended without an outcome".to_string()),
                    };
                    match failed {
                        None => this.state = State::Done,
                        Some(message) if this.sse => {
                            this.state = State::Done;
                            return Poll::Ready(Some(Ok(Self::error_event(&message))));
                        }
                        Some(message) => this.state = State::Failing(message),
                    }
                }
                State::Failing(message) => {
                    let message = std::mem::take(message);
                    this.state = State::Done;
                    return Poll::Ready(Some(Err(message.into())));
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
