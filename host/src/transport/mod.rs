//! Transports: bytes in, JSON-RPC frames through `Gateway::handle_frame`, bytes out.
//! One listener serves HTTP/1.1 (`/map/rpc`, `/map/events`, `/healthz`,
//! plugin routes), WebSocket upgrades and, over HTTP/2, gRPC for plugins;
//! stdio is served on its own.

mod acp;
mod admin;
mod body;
mod dashboard;
pub(crate) mod grpc;
mod headers;
pub(crate) mod http;
mod pending;
pub(crate) mod plugin_http;
mod reply;
pub mod stdio;
pub mod tls;
pub(crate) mod ws;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use map_core::Gateway;

/// Raise the soft limit on open files to the hard limit, so the connection
/// cap, not the descriptor table, decides how many peers fit.
fn raise_file_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "could not raise the open-file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map(|(soft, _)| soft).unwrap_or(1024)
        }
    }
}

/// How long a peer that is refused while still sending (a body or frame
/// over the limit) is read from, and what it sends discarded, before its
/// connection closes.
const LINGER: Duration = Duration::from_secs(5);

/// How long a peer waits for a slot to come free before it gets a 503.
const SLOT_WAIT: Duration = Duration::from_secs(3);

/// How often a peer waiting for a slot makes another silent connection give way.
const EVICTION_RETRY: Duration = Duration::from_millis(100);

/// Accept connections until the process ends (over TLS when `tls` is
/// given). A connection must send a complete request head within the
/// header timeout counted from accept (its TLS handshake included), and is
/// closed when it idles between requests. At `max_connections`, the oldest
/// connection that holds a slot but has not yet sent a request head is
/// closed to make room, and the new peer waits for that slot (until its own
/// header deadline, then 503); when there is none, a new peer is answered
/// 503 and closed.
pub async fn serve(gateway: Arc<Gateway>, listener: TcpListener, tls: Option<Arc<tls::Tls>>) -> std::io::Result<()> {
    let server = &gateway.config.server;
    let files = raise_file_limit();
    // Keep descriptors for the store, plugins and logs beyond the cap.
    let cap = (server.max_connections as u64).min(files.saturating_sub(64).max(16)) as usize;
    if cap < server.max_connections {
        tracing::warn!(max_connections = server.max_connections, open_file_limit = files, cap, "max_connections lowered to fit the open-file limit");
    }
    let slots = Arc::new(tokio::sync::Semaphore::new(cap));
    let pending = Arc::new(pending::Pending::default());
    let header_timeout = Duration::from_millis(server.header_timeout_ms);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors: a connection that never sent a
                // request head gives its descriptor up (waiters for a slot
                // would otherwise hold theirs until their header timeout).
                let out_of_files = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                if !(out_of_files && pending.evict_oldest() != pending::Evicted::Nobody) {
                    tracing::warn!(error = %e, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(if out_of_files { 5 } else { 50 })).await;
                continue;
            }
        };
        let deadline = tokio::time::Instant::now() + header_timeout;
        let _ = stream.set_nodelay(true);
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Some(slot),
            // A slot comes free when an evicted connection's task ends (one
            // evicted just now, or earlier and not yet gone: evicting a
            // connection still waiting for its slot frees a descriptor).
            Err(_) if pending.evict_oldest() != pending::Evicted::Nobody => None,
            Err(_) => {
                tokio::spawn(refuse_busy(stream));
                continue;
            }
        };
        // Admitted here, not in the task: once it has its slot, a peer is
        // evictable at once, whether or not its task has run yet.
        let waiting = pending.admit(deadline, slot.is_some());
        tokio::spawn(accepted(gateway.clone(), tls.clone(), slots.clone(), pending.clone(), stream, peer, slot, waiting));
    }
}

/// One accepted peer: its slot (now, or once one comes free), its TLS
/// handshake if any, then its connection.
#[allow(clippy::too_many_arguments)]
async fn accepted(
    gateway: Arc<Gateway>,
    tls: Option<Arc<tls::Tls>>,
    slots: Arc<tokio::sync::Semaphore>,
    pending: Arc<pending::Pending>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
    waiting: Arc<pending::Waiting>,
) {
    let slot = match slot {
        Some(slot) => slot,
        // Until the slot of a connection it evicted comes free; a 503 when
        // its header deadline or `SLOT_WAIT` (every slot busy with
        // requests) comes first. While it waits, each `EVICTION_RETRY`
        // another silent connection gives way, so the wait ends even when
        // the evicted one's slot went to a peer queued earlier.
        None => {
            let give_up = tokio::time::sleep(SLOT_WAIT);
            tokio::pin!(give_up);
            loop {
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => {
                            waiting.got_slot();
                            break slot;
                        }
                        Err(_) => return,
                    },
                    () = waiting.expired() => return refuse_busy(stream).await,
                    () = &mut give_up => return refuse_busy(stream).await,
                    _ = tokio::time::sleep(EVICTION_RETRY) => {
                        pending.evict_oldest();
                    }
                }
            }
        }
    };
    let _open = gateway.drain.enter();
    let _counted = map_observe::metrics::connection("http");
    match tls {
        None => serve_connection(gateway, peer, IdleIo::new(stream, slot), waiting).await,
        Some(tls) => {
            let handshake = tokio::select! {
                r = tls.acceptor().accept(stream) => r,
                _ = waiting.expired() => return tracing::debug!(%peer, "no TLS handshake and request head within the header timeout"),
            };
            match handshake {
                Ok(stream) => serve_connection(gateway, peer, IdleIo::new(stream, slot), waiting).await,
                Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            }
        }
    }
}

/// One connection: HTTP/1.1, or HTTP/2 when the client opens with its preface (gRPC).
async fn serve_connection<S>(gateway: Arc<Gateway>, peer: SocketAddr, io: IdleIo<S>, waiting: Arc<pending::Waiting>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let server = &gateway.config.server;
    let header_timeout = Duration::from_millis(server.header_timeout_ms);
    let idle = Duration::from_secs(server.idle_timeout_secs);
    let stopping = gateway.drain.stopping();
    let last_active = io.last_active.clone();
    let linger = io.linger.clone();
    let service = {
        let gateway = gateway.clone();
        let waiting = waiting.clone();
        hyper::service::service_fn(move |mut req| {
            waiting.started();
            req.extensions_mut().insert(linger.clone());
            serve_request(gateway.clone(), peer, req)
        })
    };
    let mut builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    // Bounds the heads of later requests; the first one is bounded from accept by `waiting`.
    builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(header_timeout);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .keep_alive_interval(Some(idle / 4))
        .keep_alive_timeout(Duration::from_secs(20));
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    let expired = waiting.expired();
    tokio::pin!(conn);
    tokio::pin!(stopping);
    tokio::pin!(expired);
    let mut draining = false;
    // Close a connection whose bytes stopped flowing for the idle time.
    // Upgraded WebSockets keep their own ping-based check; SSE streams
    // write a keep-alive every 15 s.
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                break;
            }
            // Requests in flight finish; no new ones on this connection.
            _ = &mut stopping, if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            () = &mut expired => {
                tracing::debug!(%peer, "closing a connection that sent no request head within the header timeout");
                break;
            }
            _ = tokio::time::sleep(idle / 4) => {
                if map_protocol::ids::now_ms().saturating_sub(last_active.load(Ordering::Relaxed)) >= idle.as_millis() as u64 {
                    tracing::debug!(%peer, "closing an idle connection");
                    break;
                }
            }
        }
    }
}

/// One connection over any byte stream, served as the listener serves a
/// peer at `peer` (the fuzz targets drive the whole HTTP stack this way).
pub(crate) async fn serve_stream<S>(gateway: Arc<Gateway>, peer: SocketAddr, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let slot = Arc::new(tokio::sync::Semaphore::new(1)).try_acquire_owned().expect("a new semaphore has a permit");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(gateway.config.server.header_timeout_ms);
    let waiting = Arc::new(pending::Pending::default()).admit(deadline, true);
    serve_connection(gateway, peer, IdleIo::new(stream, slot), waiting).await
}

/// Concurrent HTTP/2 streams (gRPC calls) on one connection.
const MAX_STREAMS: u32 = 256;

/// gRPC goes to the plugins' gRPC service, everything else to the HTTP routes.
async fn serve_request(
    gw: Arc<Gateway>,
    peer: SocketAddr,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<tonic::body::Body>, std::convert::Infallible> {
    if grpc::is_grpc(&req) {
        return Ok(grpc::serve(gw, peer, req).await);
    }
    let resp = http::route(gw, peer, req).await?;
    Ok(resp.map(tonic::body::Body::new))
}

/// A connection over the cap: a short 503, then close.
async fn refuse_busy(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "{\"error\":\"too many connections\"}";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.write_all(head.as_bytes())).await;
    let _ = stream.shutdown().await;
}

/// Set (through a request's extensions) by a handler that refuses a peer
/// still sending: when the connection closes, what the peer still sends is
/// read and discarded for up to `LINGER`, so the refusal reaches it
/// instead of a reset.
#[derive(Clone, Default)]
pub(crate) struct Linger(Arc<AtomicBool>);

impl Linger {
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A connection's stream: remembers when bytes last moved, for the idle
/// timeout, and holds its connection slot until it is dropped (after a
/// WebSocket upgrade too), or until its lingering close ends.
struct IdleIo<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> {
    /// `None` only once dropped.
    inner: Option<(S, tokio::sync::OwnedSemaphorePermit)>,
    /// Milliseconds since the epoch when bytes last moved.
    last_active: Arc<AtomicU64>,
    linger: Linger,
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> IdleIo<S> {
    fn new(inner: S, slot: tokio::sync::OwnedSemaphorePermit) -> Self {
        IdleIo { inner: Some((inner, slot)), last_active: Arc::new(AtomicU64::new(map_protocol::ids::now_ms())), linger: Linger::default() }
    }

    fn touch(&self) {
        self.last_active.store(map_protocol::ids::now_ms(), Ordering::Relaxed);
    }

    fn io(&mut self) -> std::pin::Pin<&mut S> {
        std::pin::Pin::new(&mut self.inner.as_mut().expect("present until dropped").0)
    }
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> Drop for IdleIo<S> {
    fn drop(&mut self) {
        if !self.linger.0.load(Ordering::Relaxed) {
            return;
        }
        let (Some((io, slot)), Ok(runtime)) = (self.inner.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        runtime.spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut io = io;
            let _ = tokio::time::timeout(LINGER, async {
                let _ = io.shutdown().await;
                let mut discard = vec![0u8; 16 << 10];
                while matches!(io.read(&mut discard).await, Ok(n) if n > 0) {}
            })
            .await;
            drop(slot);
        });
    }
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> tokio::io::AsyncRead for IdleIo<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = self.io().poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> tokio::io::AsyncWrite for IdleIo<S> {
    fn poll_write(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, data: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        let r = self.io().poll_write(cx, data);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}

/// Queue a frame's answer, then the notifications deferred behind it, for
/// this connection's writer. Waiting for room is the backpressure: a peer
/// that does not read stops being read. `false` when the writer is gone.
pub(crate) async fn send_answer(conn: &mut map_core::Conn, answer: Option<String>) -> bool {
    use map_core::outbox::{Frame, Refused};
    let tx = &conn.tx;
    let mut frames = answer.map(Frame::from).into_iter().chain(conn.deferred.drain(..));
    let mut alive = true;
    // Almost always there is room: queue without an await point, so that
    // the future every idle connection holds stays small.
    while let Some(frame) = frames.next() {
        match tx.try_send(frame) {
            Ok(()) => {}
            Err(Refused::Closed(_)) => alive = false,
            Err(Refused::Full(frame)) => return Box::pin(wait_for_room(tx, std::iter::once(frame).chain(frames))).await && alive,
        }
    }
    alive
}

/// The rest of `send_answer` once the queue is full: wait for room.
async fn wait_for_room(tx: &map_core::outbox::FrameTx, frames: impl Iterator<Item = map_core::outbox::Frame>) -> bool {
    let mut alive = true;
    for frame in frames {
        alive &= tx.send(frame).await.is_ok();
    }
    alive
}
