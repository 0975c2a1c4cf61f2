//! HTTP: `POST /map/rpc` (and the draft's `/map/batch`), `GET /map/events`
//! as Server-Sent Events, `GET /healthz`, and the WebSocket upgrade.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::StreamBody;
use hyper::body::{Frame as BodyFrame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::body::{read_body, refusing_body, BodyError};
use super::headers::{caller, foreign_origin, origin_allowed, trace_headers};
use super::reply::{boxed, error_json, full, method_not_allowed, Body};
use map_core::{Conn, Gateway, StreamRefused};
use map_protocol::rpc::{encode_error, RpcError};

/// Header naming the session of an HTTP request (returned by `map/connect`).
pub const SESSION_HEADER: &str = "map-session-id";

fn rpc_error(status: StatusCode, err: RpcError) -> Response<Body> {
    full(status, "application/json", encode_error(&Value::Null, &err))
}

/// `GET /readyz`: 200 when the gateway can serve (its store answers, a
/// cluster node reaches NATS, and it is not shutting down), else 503 with
/// what is not ready.
async fn readiness(gw: &Gateway) -> Response<Body> {
    let mut problems = gw.not_ready();
    if gw.drain.is_stopping() {
        problems.push("shutting down".to_string());
    }
    if let Some(host) = &gw.extensions {
        if let Err(e) = host.ready().await {
            problems.push(e);
        }
    }
    match problems.is_empty() {
        true => full(StatusCode::OK, "application/json", json!({"status": "ready"}).to_string()),
        false => full(StatusCode::SERVICE_UNAVAILABLE, "application/json", json!({"status": "not ready", "problems": problems}).to_string()),
    }
}

/// The MAP endpoints answer browsers of allowed origins only; those get CORS headers.
fn with_cors(mut resp: Response<Body>, origin: Option<&HeaderValue>) -> Response<Body> {
    if let Some(o) = origin {
        let h = resp.headers_mut();
        h.insert("access-control-allow-origin", o.clone());
        h.insert("access-control-expose-headers", HeaderValue::from_static(SESSION_HEADER));
        h.insert("vary", HeaderValue::from_static("Origin"));
    }
    resp
}

pub async fn route(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let map_endpoint = matches!(path.as_str(), "/map/rpc" | "/map/batch" | "/map/events" | "/acp");
    if (super::ws::is_upgrade(&req) || map_endpoint) && !origin_allowed(&gw.config.server.allowed_origins, req.headers()) {
        return Ok(error_json(StatusCode::FORBIDDEN, "cross-origin requests from this origin are not allowed (server.allowed_origins)"));
    }
    if super::ws::is_upgrade(&req) && path == "/acp" {
        return Ok(super::acp::upgrade(gw, peer, req));
    }
    if super::ws::is_upgrade(&req) {
        return Ok(super::ws::upgrade(gw, peer, req));
    }
    let origin = foreign_origin(req.headers()).and(req.headers().get(hyper::header::ORIGIN).cloned());
    Ok(match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => full(StatusCode::OK, "application/json", json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}).to_string()),
        (&Method::GET, "/readyz") => readiness(&gw).await,
        (&Method::POST, "/map/rpc" | "/map/batch") => with_cors(rpc(gw, peer, req).await, origin.as_ref()),
        (&Method::GET, "/map/events") => with_cors(events(gw, peer, req), origin.as_ref()),
        (&Method::OPTIONS, _) if map_endpoint && origin.is_some() => {
            let mut r = with_cors(full(StatusCode::NO_CONTENT, "text/plain", Bytes::new()), origin.as_ref());
            let h = r.headers_mut();
            h.insert("access-control-allow-methods", HeaderValue::from_static("GET, POST"));
            h.insert("access-control-allow-headers", HeaderValue::from_static("content-type, authorization, x-api-key, map-session-id"));
            r
        }
        (_, "/metrics") => super::admin::route(gw, peer, req).await,
        (_, p) if p.starts_with("/admin/") => super::admin::route(gw, peer, req).await,
        (_, p) if p == "/dashboard" || p.starts_with("/dashboard/") => super::dashboard::serve(req.method(), p),
        (_, "/map/rpc" | "/map/batch") => method_not_allowed("POST"),
        (_, "/map/events" | "/healthz" | "/readyz") => method_not_allowed("GET"),
        _ => super::plugin_http::serve(gw, peer, req).await,
    })
}

fn session_of(req: &Request<Incoming>) -> Option<String> {
    if let Some(v) = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        return Some(v.to_string());
    }
    req.uri().query()?.split('&').find_map(|kv| kv.strip_prefix("sessionId=")).map(String::from)
}

/// JSON-RPC over HTTP is `application/json`: a browser cannot send that
/// cross-site without a CORS preflight, which only allowed origins pass.
fn is_json(req: &Request<Incoming>) -> bool {
    let ct = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    ct.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

fn session_refused(id: &str) -> Response<Body> {
    let err = RpcError::new(map_protocol::rpc::codes::SESSION_NOT_FOUND, format!("Session not found, expired, or not yours: {id}"));
    rpc_error(StatusCode::NOT_FOUND, err)
}

async fn rpc(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    if !is_json(&req) {
        let err = RpcError::invalid_request("Invalid Request: Content-Type must be application/json");
        return rpc_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, err);
    }
    let limit = gw.config.server.max_message_bytes;
    let session = session_of(&req);
    let preset = super::headers::header_credentials(req.headers());
    let trace = trace_headers(req.headers());
    // A request naming a session must come from whoever opened it.
    let who = match session.as_ref().map(|_| caller(&gw, peer, req.headers())) {
        Some(Err((status, e))) => return rpc_error(status, e),
        Some(Ok(who)) => who,
        None => None,
    };
    let linger = req.extensions().get::<super::Linger>().cloned();
    let body = match read_body(req.into_body(), limit).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            let err = RpcError::invalid_request(format!("Invalid Request: body exceeds the limit of {limit} bytes"));
            return refusing_body(rpc_error(StatusCode::PAYLOAD_TOO_LARGE, err), linger);
        }
        Err(BodyError::Unreadable) => return full(StatusCode::BAD_REQUEST, "text/plain", "could not read the body\n"),
    };
    // Notifications raised while handling go nowhere: this request has no stream.
    let (tx, _rx) = map_core::outbox::channel(1, 1);
    let mut conn = Conn::new(tx, super::headers::is_loopback(&peer), "http");
    conn.peer_ip = Some(peer.ip());
    conn.preset_auth = preset;
    conn.streams = false;
    conn.trace_parent = match trace {
        (Some(parent), state) => Some((parent, state)),
        _ => None,
    };
    if let Some(id) = &session {
        if !gw.bind_session(&mut conn, id, who.as_ref()) {
            return session_refused(id);
        }
    }
    let answer = gw.handle_frame(&mut conn, &body).await;
    // Notifications for the caller wait for its event stream, after this answer.
    if let map_core::ConnState::Active(active) = &conn.state {
        for frame in conn.deferred.drain(..) {
            let _ = active.outbox.push(frame);
        }
    }
    let bound = gw.request_done(&mut conn);
    let mut resp = match answer {
        Some(text) => full(StatusCode::OK, "application/json", text),
        None => full(StatusCode::ACCEPTED, "application/json", Bytes::new()),
    };
    if let Some(id) = bound.and_then(|id| HeaderValue::from_str(&id).ok()) {
        resp.headers_mut().insert(SESSION_HEADER, id);
    }
    resp
}

/// Ends the session's stream attachment when the client goes away.
struct StreamGuard {
    gw: Arc<Gateway>,
    session: String,
    tx: map_core::outbox::FrameTx,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.gw.stream_closed(&self.session, &self.tx);
    }
}

fn events(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let Some(session) = session_of(&req) else {
        return rpc_error(
            StatusCode::UNAUTHORIZED,
            RpcError::new(map_protocol::rpc::codes::AUTH_REQUIRED, format!("Name the session in the {SESSION_HEADER} header")),
        );
    };
    let who = match caller(&gw, peer, req.headers()) {
        Ok(who) => who,
        Err((status, e)) => return rpc_error(status, e),
    };
    let (tx, rx) = map_core::outbox::channel(gw.config.limits.outbox_frames, gw.config.limits.outbox_bytes);
    match gw.attach_stream(&session, who.as_ref(), tx.clone()) {
        Ok(()) => {}
        Err(StreamRefused::NotFound) => return session_refused(&session),
        Err(StreamRefused::InUse) => {
            let err = RpcError::new(map_protocol::rpc::codes::SESSION_IN_USE, format!("Session {session} already has a live connection receiving its frames"));
            return rpc_error(StatusCode::CONFLICT, err);
        }
    }
    let stopping = gw.drain.watch();
    let guard = StreamGuard { gw, session, tx };
    type State = (map_core::outbox::FrameRx, StreamGuard, tokio::sync::watch::Receiver<bool>);
    let frames = stream::unfold((rx, guard, stopping), |(mut rx, guard, mut stopping): State| async move {
        let chunk = tokio::select! {
            // Shutting down: the stream ends (the client reconnects elsewhere).
            _ = stopping.wait_for(|s| *s) => return None,
            frame = rx.recv() => {
                let frame = frame?;
                let mut out = Vec::with_capacity(frame.as_str().len() + 24);
                out.extend_from_slice(b"event: message\ndata: ");
                out.extend_from_slice(&frame.single_line());
                out.extend_from_slice(b"\n\n");
                Bytes::from(out)
            }
            _ = tokio::time::sleep(Duration::from_secs(15)) => Bytes::from_static(b": keepalive\n\n"),
        };
        Some((Ok::<_, Infallible>(BodyFrame::data(chunk)), (rx, guard, stopping)))
    });
    let mut resp = Response::new(boxed(StreamBody::new(frames)));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    resp
}
