//! HTTP: `POST /map/rpc` (and the draft's `/map/batch`), `GET /map/events`
//! as Server-Sent Events, `GET /healthz`, and the WebSocket upgrade.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame as BodyFrame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::core::{Conn, Gateway};
use crate::rpc::{encode_error, RpcError};

pub type Body = BoxBody<Bytes, Infallible>;

/// Header naming the session of an HTTP request (returned by `map/connect`).
pub const SESSION_HEADER: &str = "map-session-id";

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn rpc_error(status: StatusCode, err: RpcError) -> Response<Body> {
    full(status, "application/json", encode_error(&Value::Null, &err))
}

pub async fn route(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    if super::ws::is_upgrade(&req) {
        return Ok(super::ws::upgrade(gw, peer, req));
    }
    Ok(match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => full(StatusCode::OK, "application/json", json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}).to_string()),
        (&Method::POST, "/map/rpc" | "/map/batch") => rpc(gw, peer, req).await,
        (&Method::GET, "/map/events") => events(gw, req),
        (_, "/admin/reload" | "/admin/plugins") => admin(gw, peer, req).await,
        (_, "/map/rpc" | "/map/batch" | "/map/events" | "/healthz") => full(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "method not allowed\n"),
        _ => plugin_http(gw, peer, req).await,
    })
}

/// `POST /admin/reload` re-reads the configuration and swaps plugins;
/// `GET /admin/plugins` lists what is loaded. Bearer `admin.token`, or loopback when none is set.
async fn admin(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let token = &gw.config.admin.token;
    let allowed = if token.is_empty() {
        super::is_loopback(&peer)
    } else {
        super::header_credentials(req.headers()).is_some_and(|(kind, t)| kind == "bearer" && t == *token)
    };
    if !allowed {
        return full(StatusCode::UNAUTHORIZED, "application/json", json!({"error": "admin token required"}).to_string());
    }
    let Some(host) = &gw.plugins else {
        return full(StatusCode::CONFLICT, "application/json", json!({"error": "this gateway runs without plugins"}).to_string());
    };
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/admin/reload") => match gw.reload().await {
            Ok(status) => full(StatusCode::OK, "application/json", status.to_string()),
            Err(e) => full(StatusCode::UNPROCESSABLE_ENTITY, "application/json", json!({"error": format!("{e:#}")}).to_string()),
        },
        (&Method::GET, "/admin/plugins") => full(StatusCode::OK, "application/json", host.status().await.to_string()),
        _ => full(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "method not allowed\n"),
    }
}

/// A path under an HTTP plugin's prefix, for the tenant the credentials
/// (`X-Api-Key`, `Authorization: Bearer`) name, or the anonymous tenant.
async fn plugin_http(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let tenant = match super::header_credentials(req.headers()) {
        Some((method, secret)) => match gw.tenants.authenticate(&method, Some(&secret)) {
            Ok(t) => Some(t),
            Err(_) => return full(StatusCode::UNAUTHORIZED, "application/json", json!({"error": "invalid credentials"}).to_string()),
        },
        None => gw.tenants.anonymous(super::is_loopback(&peer)),
    };
    let path = req.uri().path().to_string();
    let route = tenant.as_ref().and_then(|t| t.plugins().http_route(&path).map(|(tp, rest)| (tp, rest.to_string())));
    let Some((plugin, rest)) = route else {
        return match tenant {
            None => full(StatusCode::UNAUTHORIZED, "application/json", json!({"error": "credentials required"}).to_string()),
            Some(_) => full(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
        };
    };
    let method = req.method().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let headers = req.headers().iter().filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string()))).collect();
    let limit = gw.config.server.max_message_bytes;
    let body = match Limited::new(req.into_body(), limit).collect().await {
        Ok(b) => b.to_bytes().to_vec(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return full(StatusCode::PAYLOAD_TOO_LARGE, "text/plain", "body too large\n"),
        Err(_) => return full(StatusCode::BAD_REQUEST, "text/plain", "could not read the body\n"),
    };
    let request = crate::plugins::HttpRequest { method, path: rest, query, headers, body };
    match plugin.call_http(request).await {
        Ok(answer) => {
            let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut resp = Response::new(Full::new(Bytes::from(answer.body)).boxed());
            *resp.status_mut() = status;
            for (k, v) in answer.headers {
                if let (Ok(k), Ok(v)) = (hyper::header::HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(&v)) {
                    resp.headers_mut().append(k, v);
                }
            }
            resp
        }
        Err(e) => {
            let status = if e.code == crate::rpc::codes::RESOURCE_EXHAUSTED { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::BAD_GATEWAY };
            full(status, "application/json", json!({"error": e.message, "details": e.data}).to_string())
        }
    }
}

fn session_of(req: &Request<Incoming>) -> Option<String> {
    if let Some(v) = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        return Some(v.to_string());
    }
    req.uri().query()?.split('&').find_map(|kv| kv.strip_prefix("sessionId=")).map(String::from)
}

async fn rpc(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let limit = gw.config.server.max_message_bytes;
    let session = session_of(&req);
    let preset = super::header_credentials(req.headers());
    let body = match Limited::new(req.into_body(), limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let err = RpcError::invalid_request(format!("Invalid Request: body exceeds the limit of {limit} bytes"));
            return rpc_error(StatusCode::PAYLOAD_TOO_LARGE, err);
        }
        Err(_) => return full(StatusCode::BAD_REQUEST, "text/plain", "could not read the body\n"),
    };
    // Notifications raised while handling go nowhere: this request has no stream.
    let (tx, _rx) = mpsc::channel(1);
    let mut conn = Conn::new(tx, super::is_loopback(&peer), "http");
    conn.preset_auth = preset;
    conn.streams = false;
    if let Some(id) = &session {
        if !gw.bind_session(&mut conn, id) {
            let err = RpcError::new(crate::rpc::codes::SESSION_NOT_FOUND, format!("Session not found or expired: {id}"));
            return rpc_error(StatusCode::NOT_FOUND, err);
        }
    }
    let answer = gw.handle_frame(&mut conn, &body).await;
    // Notifications for the caller wait for its event stream, after this answer.
    if let crate::core::ConnState::Active(active) = &conn.state {
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
    tx: mpsc::Sender<crate::core::outbox::Frame>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.gw.stream_closed(&self.session, &self.tx);
    }
}

fn events(gw: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let Some(session) = session_of(&req) else {
        return rpc_error(StatusCode::UNAUTHORIZED, RpcError::new(crate::rpc::codes::AUTH_REQUIRED, format!("Name the session in the {SESSION_HEADER} header")));
    };
    let (tx, rx) = mpsc::channel(gw.config.limits.outbox_frames);
    if !gw.attach_stream(&session, tx.clone()) {
        let err = RpcError::new(crate::rpc::codes::SESSION_NOT_FOUND, format!("Session not found or expired: {session}"));
        return rpc_error(StatusCode::NOT_FOUND, err);
    }
    let guard = StreamGuard { gw, session, tx };
    let frames = stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let chunk = tokio::select! {
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
        Some((Ok::<_, Infallible>(BodyFrame::data(chunk)), (rx, guard)))
    });
    let mut resp = Response::new(StreamBody::new(frames).boxed());
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    resp
}
