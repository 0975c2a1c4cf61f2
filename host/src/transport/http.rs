//! HTTP: `POST /map/rpc` (and the draft's `/map/batch`), `GET /map/events`
//! as Server-Sent Events, `GET /healthz`, and the WebSocket upgrade.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame as BodyFrame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::headers::{caller, foreign_origin, origin_allowed, trace_headers};
use super::reply::{error_json, full, method_not_allowed, Body};
use map_core::{Conn, Gateway, StreamRefused};
use map_protocol::rpc::{encode_error, RpcError};

/// Header naming the session of an HTTP request (returned by `map/connect`).
pub const SESSION_HEADER: &str = "map-session-id";

fn rpc_error(status: StatusCode, err: RpcError) -> Response<Body> {
    full(status, "application/json", encode_error(&Value::Null, &err))
}

/// What the host answers itself under a plugin's prefix, before or instead
/// of the plugin: `{error, message, status_code}`, the shape HTTP plugins
/// such as MAMP use for their own errors.
fn plugin_refusal(status: StatusCode, error: &str, message: &str) -> Response<Body> {
    full(status, "application/json", json!({"error": error, "message": message, "status_code": status.as_u16()}).to_string())
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
        _ => plugin_http(gw, peer, req).await,
    })
}

/// A path under an HTTP plugin's prefix, for the tenant the credentials
/// (`X-Api-Key`, `Authorization: Bearer`) name, or the anonymous tenant.
async fn plugin_http(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let tenant = match caller(&gw, peer, req.headers()) {
        Ok(who) => who,
        Err((status, e)) => {
            let error = match status {
                StatusCode::TOO_MANY_REQUESTS => "rate_limited",
                StatusCode::FORBIDDEN => "forbidden",
                _ => "unauthorized",
            };
            return plugin_refusal(status, error, &e.message);
        }
    };
    let path = req.uri().path().to_string();
    let route = tenant.as_ref().and_then(|t| map_plugin_host::of(&t.tenant).http_route(&path).map(|(tp, rest)| (tp, rest.to_string())));
    let Some((plugin, rest)) = route else {
        // Credentials only matter for a path some tenant's plugin serves.
        let served_somewhere = gw.tenants.all().any(|t| map_plugin_host::of(t).http_route(&path).is_some());
        return match tenant {
            None if served_somewhere => {
                plugin_refusal(StatusCode::UNAUTHORIZED, "unauthorized", "credentials required (Authorization: Bearer <key> or X-Api-Key)")
            }
            _ => full(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
        };
    };
    let (parent, state) = trace_headers(req.headers());
    let span = map_observe::telemetry::inbound("http", &path, tenant.as_ref().map_or("", |t| t.tenant.id.as_str()), parent.as_deref(), state.as_deref());
    let method = req.method().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let headers = plugin_headers(req.headers(), tenant.as_ref().map_or(map_core::tenants::ANONYMOUS, |t| &t.principal), peer);
    let limit = gw.config.server.max_message_bytes;
    let linger = req.extensions().get::<super::Linger>().cloned();
    let body = match read_body(req.into_body(), limit).await {
        Ok(b) => b.to_vec(),
        Err(BodyError::TooLarge) => {
            let refusal =
                plugin_refusal(StatusCode::PAYLOAD_TOO_LARGE, "message_too_large", &format!("the body is larger than the gateway's limit of {limit} bytes"));
            return refusing_body(refusal, linger);
        }
        Err(BodyError::Unreadable) => return plugin_refusal(StatusCode::BAD_REQUEST, "invalid_request", "could not read the body"),
    };
    let request = map_plugin_host::HttpRequest { method, path: rest, query, headers, body };
    match tracing::Instrument::instrument(plugin.call_http(request), span).await {
        Ok(answer) => plugin_response(answer),
        Err(e) => {
            let (status, error) = match e.code == map_protocol::rpc::codes::RESOURCE_EXHAUSTED {
                true => (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable"),
                false => (StatusCode::BAD_GATEWAY, "plugin_failed"),
            };
            let mut body = json!({"error": error, "message": e.message, "status_code": status.as_u16()});
            if let Some(details) = e.data {
                body["details"] = details;
            }
            full(status, "application/json", body.to_string())
        }
    }
}

/// The request's headers as the plugin sees them: the client's, less any
/// `x-map-*` it sent, plus who the gateway found it to be
/// (`x-map-principal`) and where it came from (`x-map-client-address`), so
/// that a plugin can tell senders apart without reading credentials.
fn plugin_headers(headers: &hyper::HeaderMap, principal: &str, peer: SocketAddr) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = headers
        .iter()
        .filter(|(k, _)| !k.as_str().starts_with("x-map-"))
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    out.push(("x-map-principal".into(), principal.to_string()));
    out.push(("x-map-client-address".into(), peer.ip().to_string()));
    out
}

/// A plugin's HTTP answer as sent: a status that is not one is 500, and
/// headers that are not HTTP headers are left out.
pub(crate) fn plugin_response(answer: map_plugin_host::HttpResponse) -> Response<Body> {
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

enum BodyError {
    TooLarge,
    Unreadable,
}

/// Read a body up to `limit` bytes, for at most 5 s. One declared larger,
/// or that grows larger, is refused at once.
async fn read_body(mut body: Incoming, limit: usize) -> Result<Bytes, BodyError> {
    if hyper::body::Body::size_hint(&body).lower() > limit as u64 {
        return Err(BodyError::TooLarge);
    }
    let mut out = Vec::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return Err(BodyError::Unreadable) };
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > limit {
                    return Err(BodyError::TooLarge);
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.map_err(|_| BodyError::Unreadable)??;
    Ok(Bytes::from(out))
}

/// The answer to a body over the limit closes the connection, which reads
/// on (and discards) what the peer still sends so the answer is not lost
/// to a reset.
fn refusing_body(mut resp: Response<Body>, linger: Option<super::Linger>) -> Response<Body> {
    if let Some(linger) = linger {
        linger.set();
    }
    resp.headers_mut().insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    resp
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
    let mut resp = Response::new(StreamBody::new(frames).boxed());
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    resp
}
