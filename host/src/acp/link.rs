//! The bridge's MAP side: a JSON-RPC client of a MAP session, either inside
//! this gateway (frames go straight to the core, as from a transport) or
//! over a WebSocket to a gateway elsewhere (`map-gateway acp --url`, and
//! federation's links).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::wss::Trust;
use map_core::{Conn, Gateway};

/// An error answer of the MAP side: its JSON-RPC error object.
pub type MapError = Value;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, MapError>>>>>;

/// What one call of the link may be: its frame's size, and how long it
/// may wait for its answer (a frame the gateway cannot read is answered
/// without an id, so the wait would otherwise never end).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub max_frame_bytes: usize,
    pub call_timeout: Duration,
}

/// A MAP session the bridge acts through.
pub struct Link {
    out: mpsc::Sender<String>,
    pending: Pending,
    next_id: AtomicU64,
    bounds: Bounds,
}

fn closed() -> MapError {
    json!({"code": -32603, "message": "the MAP connection closed"})
}

impl Link {
    /// A link over two frame channels; notifications (`map/message`,
    /// `map/event`) come out of the returned receiver.
    pub(crate) fn over(out: mpsc::Sender<String>, mut incoming: mpsc::Receiver<String>, bounds: Bounds) -> (Link, mpsc::Receiver<Value>) {
        let pending: Pending = Arc::default();
        let (notes_tx, notes_rx) = mpsc::channel(1024);
        let answers = pending.clone();
        tokio::spawn(async move {
            while let Some(frame) = incoming.recv().await {
                let Ok(v) = serde_json::from_str::<Value>(&frame) else { continue };
                match v.get("id").and_then(Value::as_u64).filter(|_| v.get("method").is_none()) {
                    Some(id) => {
                        let result = match v.get("error") {
                            Some(e) => Err(e.clone()),
                            None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
                        };
                        if let Some(tx) = answers.lock().remove(&id) {
                            let _ = tx.send(result);
                        }
                    }
                    None if v.get("method").is_some() && notes_tx.send(v).await.is_err() => {
                        break;
                    }
                    None => {}
                }
            }
            // The MAP side is gone: every call still waiting fails.
            for (_, tx) in answers.lock().drain() {
                let _ = tx.send(Err(closed()));
            }
        });
        (Link { out, pending, next_id: AtomicU64::new(1), bounds }, notes_rx)
    }

    /// Call a MAP method and wait for its answer (within the link's bounds).
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, MapError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        let Bounds { max_frame_bytes, call_timeout } = self.bounds;
        if frame.len() > max_frame_bytes {
            let message = format!("Invalid Request: {method} would be a message of {} bytes, over the limit of {max_frame_bytes} bytes", frame.len());
            return Err(json!({"code": -32600, "message": message}));
        }
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        if self.out.send(frame).await.is_err() {
            self.pending.lock().remove(&id);
            return Err(closed());
        }
        match tokio::time::timeout(call_timeout, rx).await {
            Ok(answer) => answer.unwrap_or_else(|_| Err(closed())),
            Err(_) => {
                self.pending.lock().remove(&id);
                Err(json!({"code": -32603, "message": format!("the gateway did not answer {method} within {} s", call_timeout.as_secs_f64())}))
            }
        }
    }
}

/// A session inside this gateway, as a transport would open it: `preset`
/// credentials are those the editor's connection carried (HTTP headers).
pub fn in_process(
    gw: Arc<Gateway>,
    preset: Option<(String, String)>,
    loopback: bool,
    peer_ip: Option<IpAddr>,
    call_timeout: Duration,
) -> (Link, mpsc::Receiver<Value>) {
    let bounds = Bounds { max_frame_bytes: gw.config.server.max_message_bytes, call_timeout };
    let (frames_tx, mut frames_rx) = map_core::outbox::channel(gw.config.limits.outbox_frames, gw.config.limits.outbox_bytes);
    let (out_tx, mut out_rx) = mpsc::channel::<String>(64);
    let (in_tx, in_rx) = mpsc::channel::<String>(1024);
    let notes = in_tx.clone();
    tokio::spawn(async move {
        while let Some(frame) = frames_rx.recv().await {
            if notes.send(frame.as_str().to_string()).await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut conn = Conn::new(frames_tx, loopback, "acp");
        conn.peer_ip = peer_ip;
        conn.preset_auth = preset;
        while let Some(frame) = out_rx.recv().await {
            let answer = gw.handle_frame(&mut conn, frame.as_bytes()).await;
            for f in conn.deferred.drain(..) {
                let _ = in_tx.send(f.as_str().to_string()).await;
            }
            if let Some(a) = answer {
                if in_tx.send(a).await.is_err() {
                    break;
                }
            }
        }
        gw.connection_closed(&mut conn);
    });
    Link::over(out_tx, in_rx, bounds)
}

/// A session on the gateway at `url` (`ws://HOST[:PORT]/map`, or `wss://`
/// with `trust` saying which certificates it accepts), whose message limit
/// is taken to be `bounds.max_frame_bytes`.
pub async fn websocket(url: &str, bounds: Bounds, trust: Option<&Trust>) -> anyhow::Result<(Link, mpsc::Receiver<Value>)> {
    let uri: http::Uri = url.parse().with_context(|| format!("{url} is not a URL"))?;
    let (tls, default_port) = match uri.scheme_str() {
        Some("ws") => (None, 80),
        Some("wss") => (Some(trust.with_context(|| format!("{url}: this connection takes ws:// URLs only (put a TLS proxy's plain side here)"))?), 443),
        _ => anyhow::bail!("{url}: only ws:// and wss:// URLs are supported"),
    };
    let host = uri.host().with_context(|| format!("{url} names no host"))?;
    let port = uri.port_u16().unwrap_or(default_port);
    let tcp = tokio::net::TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port))
        .await
        .with_context(|| format!("connecting to {host}:{port}"))?;
    let _ = tcp.set_nodelay(true);
    let Some(trust) = tls else {
        let (socket, _) = tokio_tungstenite::client_async(url, tcp).await.with_context(|| format!("WebSocket handshake with {url}"))?;
        return Ok(serve(socket, bounds));
    };
    let name =
        ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string()).with_context(|| format!("{url}: {host} is not a server name"))?;
    let stream = TlsConnector::from(trust.config.clone())
        .connect(name, tcp)
        .await
        .with_context(|| format!("TLS handshake with {host}:{port} (its certificate checked against {})", trust.roots))?;
    let (socket, _) = tokio_tungstenite::client_async(url, stream).await.with_context(|| format!("WebSocket handshake with {url}"))?;
    Ok(serve(socket, bounds))
}

/// Frames both ways over an open WebSocket.
fn serve<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(socket: WebSocketStream<S>, bounds: Bounds) -> (Link, mpsc::Receiver<Value>) {
    let (mut sink, mut source) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<String>(64);
    let (in_tx, in_rx) = mpsc::channel::<String>(1024);
    tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            if sink.send(Message::text(frame)).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    tokio::spawn(async move {
        while let Some(Ok(m)) = source.next().await {
            let text = match m {
                Message::Text(t) => t.to_string(),
                Message::Close(_) => break,
                _ => continue,
            };
            if in_tx.send(text).await.is_err() {
                break;
            }
        }
    });
    Link::over(out_tx, in_rx, bounds)
}
