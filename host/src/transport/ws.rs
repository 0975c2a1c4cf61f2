//! WebSocket: one JSON-RPC message (or batch) per text frame, one reader and
//! one writer per socket. Requests are handled in the order they arrive;
//! an extension call that waits (for storage, say) runs on beside the
//! next requests, and its answer goes out when it is ready, so answers may
//! come in another order than the requests (JSON-RPC matches them by id).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use futures_util::stream::{FuturesUnordered, SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, UPGRADE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame as WsFrame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use super::reply::Body;
use map_core::outbox::{channel, Frame, FrameRx};
use map_core::{Conn, Gateway, Handled};

/// Requests of one socket that may run at once; past this the socket is
/// not read until one of them finishes.
const MAX_RUNNING: usize = 32;

pub fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.headers().get(UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

pub fn upgrade(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let preset = super::headers::header_credentials(req.headers());
    let linger = req.extensions().get::<super::Linger>().cloned().unwrap_or_default();
    let max = gw.config.server.max_message_bytes;
    accept(max, peer, req, move |socket| run(gw, socket, peer, preset, linger))
}

/// A WebSocket the handshake accepted.
pub type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Answer the WebSocket handshake; `serve` gets the socket once upgraded.
pub fn accept<F, Fut>(max_message_bytes: usize, peer: SocketAddr, mut req: Request<Incoming>, serve: F) -> Response<Body>
where
    F: FnOnce(Socket) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    use http_body_util::Empty;
    let Some(key) = req.headers().get(SEC_WEBSOCKET_KEY).map(|k| derive_accept_key(k.as_bytes())) else {
        let mut r = Response::new(super::reply::boxed(Empty::new()));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return r;
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let config = socket_config(max_message_bytes);
                let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
                serve(socket).await;
            }
            Err(e) => tracing::debug!(%peer, error = %e, "websocket upgrade failed"),
        }
    });
    let mut r = Response::new(super::reply::boxed(Empty::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(SEC_WEBSOCKET_ACCEPT, HeaderValue::from_str(&key).expect("base64 is a valid header"));
    r
}

/// Messages larger than this go out as fragments of this size: the
/// socket's write buffer, which keeps its largest size for the life of the
/// connection, then never holds more than its own size and one fragment.
const FRAGMENT_BYTES: usize = 64 << 10;

/// Queue one frame on the socket (whole, or in fragments when large).
async fn feed<S>(sink: &mut S, f: Frame) -> Result<(), tungstenite::Error>
where
    S: futures_util::Sink<Message, Error = tungstenite::Error> + Unpin,
{
    let bytes = f.into_bytes();
    if bytes.len() <= FRAGMENT_BYTES {
        // SAFETY: a Frame is always UTF-8 (see `Frame`).
        return sink.feed(Message::Text(unsafe { Utf8Bytes::from_bytes_unchecked(bytes) })).await;
    }
    for at in (0..bytes.len()).step_by(FRAGMENT_BYTES) {
        let end = (at + FRAGMENT_BYTES).min(bytes.len());
        let opcode = OpCode::Data(if at == 0 { Data::Text } else { Data::Continue });
        sink.feed(Message::Frame(WsFrame::message(bytes.slice(at..end), opcode, end == bytes.len()))).await?;
    }
    Ok(())
}

/// Bytes read from the socket at a time.
const READ_BUFFER: usize = 4 << 10;

/// How an accepted socket reads frames, for a gateway whose messages may
/// be `max_message_bytes` long.
pub(crate) fn socket_config(max_message_bytes: usize) -> WebSocketConfig {
    // Frames past our own limit are answered with an error; only far
    // larger ones make the WebSocket layer close with 1009.
    let hard_cap = crate::framing::read_cap(max_message_bytes);
    // The read buffer is allocated per connection and zero-filled before
    // every read (tungstenite's default is 128 KiB: ~140 KiB per idle
    // session). 4 KiB holds a burst of ordinary requests; a larger frame
    // grows it as far as that frame needs.
    WebSocketConfig::default().max_message_size(Some(hard_cap)).max_frame_size(Some(hard_cap)).read_buffer_size(READ_BUFFER)
}

/// Why the reader stopped, and the close code to send.
pub(crate) fn close_for(e: &tungstenite::Error) -> Option<CloseFrame> {
    let (code, reason) = match e {
        tungstenite::Error::Utf8 => (CloseCode::Invalid, "text frame is not valid UTF-8"),
        tungstenite::Error::Capacity(_) => (CloseCode::Size, "message too large"),
        _ => return None,
    };
    Some(CloseFrame { code, reason: reason.into() })
}

/// One socket: a writer task and the read loop. `linger`: set when the
/// socket is closed on a frame it could not read, so the rest of that frame
/// is read and discarded and the close frame reaches the peer instead of a
/// reset.
async fn run<S>(gw: Arc<Gateway>, socket: WebSocketStream<S>, peer: SocketAddr, preset: Option<(String, String)>, linger: super::Linger)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sink, source) = socket.split();
    let (tx, rx) = channel(gw.config.limits.outbox_frames, gw.config.limits.outbox_bytes);
    // Pings and the closing frame, beside the frames of the session.
    let control = Arc::new(Control::default());
    let writer = tokio::spawn(write_loop(sink, rx, control.clone()));
    // Tells the writer the reader is done, however the reader ends (a panic too).
    let done = ReaderDone(control.clone());

    let _open = gw.drain.enter();
    let _counted = map_observe::metrics::connection("websocket");
    let mut conn = Conn::new(tx.clone(), super::headers::is_loopback(&peer), "websocket");
    conn.peer_ip = Some(peer.ip());
    conn.preset_auth = preset;
    let close = read_loop(&gw, &mut conn, source, &control, peer, &linger).await;
    // The close goes to the writer before the frame queue ends: otherwise the
    // writer could see the queue end first and close without the code.
    if let Some(frame) = close {
        control.ask(|a| a.close = Some(frame));
    }
    gw.connection_closed(&mut conn);
    drop(conn);
    drop(tx);
    drop(done);
    let _ = writer.await;
}

/// What the reader asks the writer for besides the session's frames: a
/// ping, the closing frame, or to close because the reader is done. A
/// mutex and a wake-up rather than a channel: a channel allocates a block
/// of slots per connection, and these are asked for once or twice in its life.
#[derive(Default)]
struct Control {
    asked: parking_lot::Mutex<Asked>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct Asked {
    ping: bool,
    close: Option<CloseFrame>,
    done: bool,
}

impl Control {
    fn ask(&self, f: impl FnOnce(&mut Asked)) {
        f(&mut self.asked.lock());
        self.wake.notify_one();
    }
}

struct ReaderDone(Arc<Control>);

impl Drop for ReaderDone {
    fn drop(&mut self) {
        self.0.ask(|a| a.done = true);
    }
}

/// The socket's writer: the session's frames, pings and the closing frame,
/// until the reader is done or the peer stops taking them.
async fn write_loop<S>(mut sink: SplitSink<WebSocketStream<S>, Message>, mut rx: FrameRx, control: Arc<Control>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    loop {
        let frame = tokio::select! {
            biased;
            _ = control.wake.notified() => {
                let asked = std::mem::take(&mut *control.asked.lock());
                if let Some(frame) = asked.close {
                    // Answers already queued go out before the close.
                    while let Some(f) = rx.try_recv() {
                        if feed(&mut sink, f).await.is_err() {
                            return;
                        }
                    }
                    let _ = sink.send(Message::Close(Some(frame))).await;
                    return;
                }
                if asked.ping && sink.send(Message::Ping(Bytes::new())).await.is_err() {
                    return;
                }
                // The reader is done: close below (which also answers a
                // peer's close frame, as the handshake wants).
                if asked.done {
                    break;
                }
                continue;
            },
            f = rx.recv() => match f {
                Some(f) => f,
                None => break,
            },
        };
        if write_queued(&mut sink, frame, &mut rx).await.is_err() {
            return;
        }
    }
    if rx.ended() {
        // The session was ended by an operator: a close frame that says so.
        let frame = CloseFrame { code: CloseCode::Policy, reason: "the session was disconnected by an operator".into() };
        let _ = sink.send(Message::Close(Some(frame))).await;
    }
    let _ = sink.close().await;
}

/// Write `first` and everything already queued behind it, then flush once.
async fn write_queued<S>(sink: &mut S, first: Frame, rx: &mut FrameRx) -> Result<(), tungstenite::Error>
where
    S: futures_util::Sink<Message, Error = tungstenite::Error> + Unpin,
{
    let mut next = Some(first);
    while let Some(f) = next {
        feed(sink, f).await?;
        next = rx.try_recv();
    }
    sink.flush().await
}

/// What the read loop does next.
enum Step {
    /// A message from the peer, or the read's outcome.
    Read(Result<Option<Result<Message, tungstenite::Error>>, tokio::time::error::Elapsed>),
    /// A call that ran on finished: its answer and the notifications after it.
    Answered(Option<String>, Vec<Frame>),
    /// Read nothing more (the gateway is stopping).
    Drain,
    /// Stopping, and nothing runs any more: close.
    Close(CloseFrame),
}

/// A frame's request bytes (text or binary); `Ok(None)` for a control frame
/// to pass over; `Err` ends the connection, with the close frame to send.
fn payload(msg: Result<Message, tungstenite::Error>, peer: SocketAddr, linger: &super::Linger) -> Result<Option<Bytes>, Option<CloseFrame>> {
    match msg {
        Ok(Message::Text(t)) => Ok(Some(t.into())),
        Ok(Message::Binary(b)) => Ok(Some(b)),
        Ok(Message::Close(_)) => Err(None),
        Ok(_) => Ok(None),
        Err(e) => {
            tracing::debug!(%peer, error = %e, "websocket read failed");
            let close = close_for(&e);
            if close.is_some() {
                linger.set();
            }
            Err(close)
        }
    }
}

/// Read requests and answer them until the peer leaves, idles, misbehaves
/// or the gateway stops. Returns the close frame to send, if any.
async fn read_loop<S>(
    gw: &Arc<Gateway>,
    conn: &mut Conn,
    mut source: SplitStream<WebSocketStream<S>>,
    control: &Control,
    peer: SocketAddr,
    linger: &super::Linger,
) -> Option<CloseFrame>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let stopping = gw.drain.stopping();
    tokio::pin!(stopping);
    let mut draining = false;
    // Half the idle time without a frame: ping; the other half without one: close.
    let half_idle = Duration::from_secs(gw.config.server.idle_timeout_secs).max(Duration::from_secs(2)) / 2;
    let mut pinged = false;
    // Calls still running while the connection reads on; answered as they finish.
    // Dropped with the loop: their answers would have no reader.
    let mut running = FuturesUnordered::new();
    loop {
        let step = tokio::select! {
            biased;
            Some((answer, deferred)) = running.next(), if !running.is_empty() => Step::Answered(answer, deferred),
            // Shutting down: read no more requests, answer the running ones, then close.
            _ = &mut stopping, if !draining => Step::Drain,
            _ = std::future::ready(()), if draining && running.is_empty() => {
                Step::Close(CloseFrame { code: CloseCode::Away, reason: "the gateway is shutting down".into() })
            }
            next = tokio::time::timeout(half_idle, source.next()), if !draining && running.len() < MAX_RUNNING => Step::Read(next),
        };
        let msg = match step {
            Step::Answered(answer, deferred) => {
                conn.deferred.extend(deferred);
                if !super::send_answer(conn, answer).await {
                    return None;
                }
                continue;
            }
            Step::Drain => {
                draining = true;
                continue;
            }
            Step::Close(frame) => return Some(frame),
            Step::Read(Ok(Some(msg))) => msg,
            Step::Read(Ok(None)) => return None,
            Step::Read(Err(_)) if pinged => return Some(CloseFrame { code: CloseCode::Away, reason: "idle: no answer to ping".into() }),
            Step::Read(Err(_)) => {
                pinged = true;
                control.ask(|a| a.ping = true);
                continue;
            }
        };
        pinged = false;
        let bytes = match payload(msg, peer, linger) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => continue,
            Err(close) => return close,
        };
        match gw.start_frame(conn, &bytes).await {
            Handled::Later(call) => running.push(call),
            Handled::Now(answer) => {
                if !super::send_answer(conn, answer).await {
                    return None;
                }
                if gw.too_many_failures(conn) {
                    return Some(CloseFrame { code: CloseCode::Policy, reason: "too many failed authentications".into() });
                }
            }
        }
    }
}
