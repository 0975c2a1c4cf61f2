//! `GET /acp?agent=ID_OR_ROLE` upgraded to a WebSocket: an editor speaking
//! ACP (one JSON-RPC message per text frame), bridged to that MAP agent by
//! a session of this gateway opened with the connection's credentials
//! (`Authorization: Bearer …` or `X-Api-Key`, else the anonymous tenant).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use super::reply::{error_json, Body};
use crate::acp::{bridge, link};
use map_core::Gateway;

pub fn upgrade(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let agent = req.uri().query().and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "agent").map(|(_, v)| v.into_owned()));
    let Some(agent) = agent.filter(|a| !a.is_empty()) else {
        return error_json(StatusCode::BAD_REQUEST, "name the MAP agent: /acp?agent=<agent id or role>");
    };
    let preset = super::headers::header_credentials(req.headers());
    let linger = req.extensions().get::<super::Linger>().cloned().unwrap_or_default();
    let max = gw.config.server.max_message_bytes;
    let opts = bridge::Options {
        agent,
        client_request_timeout: Duration::from_millis(gw.config.acp.client_request_timeout_ms),
        agent_request_timeout: Duration::from_millis(gw.config.acp.agent_request_timeout_ms),
        max_message_bytes: max,
    };
    super::ws::accept(max, peer, req, move |socket| session(gw, socket, peer, preset, opts, linger))
}

/// `linger`: set when the socket closes on a frame it could not read (too
/// large, not UTF-8), so that its close frame reaches the editor, as on `/map`.
async fn session(
    gw: Arc<Gateway>,
    socket: super::ws::Socket,
    peer: SocketAddr,
    preset: Option<(String, String)>,
    opts: bridge::Options,
    linger: super::Linger,
) {
    let _open = gw.drain.enter();
    let _counted = map_observe::metrics::connection("acp");
    let (map, notes) = link::in_process(gw.clone(), preset, super::headers::is_loopback(&peer), Some(peer.ip()), opts.agent_request_timeout);
    let (mut sink, mut source) = socket.split();
    let (in_tx, in_rx) = mpsc::channel::<String>(64);
    let (out_tx, mut out_rx) = mpsc::channel::<String>(1024);
    let (close_tx, mut close_rx) = oneshot::channel::<CloseFrame>();
    let writer = tokio::spawn(async move {
        while let Some(text) = out_rx.recv().await {
            if sink.send(Message::text(text)).await.is_err() {
                return;
            }
        }
        // The reader has already stopped when the bridge ended because the
        // editor's frames did; otherwise this closes normally, at once.
        match close_rx.try_recv() {
            Ok(frame) => {
                let _ = sink.send(Message::Close(Some(frame))).await;
            }
            Err(_) => {
                let _ = sink.close().await;
            }
        }
    });
    let stopping = gw.drain.stopping();
    let reader = async move {
        tokio::pin!(stopping);
        loop {
            let next = tokio::select! {
                next = source.next() => next,
                _ = &mut stopping => break,
            };
            match next {
                Some(Ok(Message::Text(t))) => {
                    if in_tx.send(t.to_string()).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Binary(b))) => {
                    if in_tx.send(String::from_utf8_lossy(&b).into_owned()).await.is_err() {
                        break;
                    }
                }
                Some(Err(e)) => {
                    if let Some(frame) = super::ws::close_for(&e) {
                        linger.set();
                        let _ = close_tx.send(frame);
                    }
                    break;
                }
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => continue,
            }
        }
    };
    tokio::spawn(reader);
    bridge::run(map, notes, in_rx, out_tx, opts, None).await;
    let _ = writer.await;
}
