//! Transports: bytes in, JSON-RPC frames through `Gateway::handle_frame`, bytes out.
//! One listener serves HTTP (`/map/rpc`, `/map/events`, `/healthz`) and
//! WebSocket upgrades; stdio is served on its own.

mod http;
pub mod stdio;
mod ws;

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::core::Gateway;

/// Accept connections until the process ends.
pub async fn serve(gateway: Arc<Gateway>, listener: TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| http::route(gateway.clone(), peer, req));
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

/// Queue a frame's answer, then the notifications deferred behind it, for
/// this connection's writer. Waiting for room is the backpressure: a peer
/// that does not read stops being read. `false` when the writer is gone.
pub(crate) async fn send_answer(conn: &mut crate::core::Conn, answer: Option<String>) -> bool {
    let mut alive = true;
    for frame in answer.map(crate::core::outbox::Frame::from).into_iter().chain(conn.deferred.drain(..)) {
        alive &= conn.tx.send(frame).await.is_ok();
    }
    alive
}

/// Credentials a transport may carry outside `map/connect`.
pub(crate) fn header_credentials(headers: &hyper::HeaderMap) -> Option<(String, String)> {
    if let Some(v) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(("api-key".into(), v.trim().to_string()));
    }
    let auth = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let token = auth.strip_prefix("Bearer ").or_else(|| auth.strip_prefix("bearer "))?;
    Some(("bearer".into(), token.trim().to_string()))
}

pub(crate) fn is_loopback(peer: &SocketAddr) -> bool {
    peer.ip().is_loopback() || matches!(peer.ip(), std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
}
