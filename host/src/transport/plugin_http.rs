//! Paths under a plugin's HTTP prefix: the tenant from the credentials,
//! then the plugin's `http-handler` (the body read whole, one answer) or its
//! `wasi:http/incoming-handler` (both bodies streamed as they come).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, HOST};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::body::{read_body, refusing_body, BodyError};
use super::headers::{caller, trace_headers};
use super::reply::{boxed, full, Body};
use map_core::Gateway;
use map_plugin_host::RequestBody;
use map_protocol::rpc::RpcError;

/// What the host answers itself under a plugin's prefix, before or instead
/// of the plugin: `{error, message, status_code}`, the shape HTTP plugins
/// such as MAMP use for their own errors.
fn plugin_refusal(status: StatusCode, error: &str, message: &str) -> Response<Body> {
    full(status, "application/json", json!({"error": error, "message": message, "status_code": status.as_u16()}).to_string())
}

/// A path under an HTTP plugin's prefix, for the tenant the credentials
/// (`X-Api-Key`, `Authorization: Bearer`) name, or the anonymous tenant.
pub(super) async fn serve(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
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
    let principal = tenant.as_ref().map_or(map_core::tenants::ANONYMOUS, |t| &t.principal);
    let limit = gw.config.server.max_message_bytes;
    if plugin.plugin.exports.incoming() {
        let request = streamed_request(req, &rest, principal, peer, limit);
        return match tracing::Instrument::instrument(plugin.serve_http(request), span).await {
            Ok(resp) => resp.map(BodyExt::boxed_unsync),
            Err(e) => plugin_error(e),
        };
    }
    let method = req.method().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let headers = plugin_headers(req.headers(), principal, peer);
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
        Err(e) => plugin_error(e),
    }
}

/// A call that failed before its answer: 503 when the plugin was busy, else 502.
fn plugin_error(e: RpcError) -> Response<Body> {
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

/// The request as a `wasi:http` plugin sees it: the path below its prefix
/// (`rest`) with the query, the headers of `plugin_headers` (a `host`
/// always among them), and the body as it arrives, up to `limit` bytes.
fn streamed_request(req: Request<Incoming>, rest: &str, principal: &str, peer: SocketAddr, limit: usize) -> Request<RequestBody> {
    let (parts, body) = req.into_parts();
    let target = match parts.uri.query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_string(),
    };
    let mut headers = parts.headers;
    let ours: Vec<HeaderName> = headers.keys().filter(|k| k.as_str().starts_with("x-map-")).cloned().collect();
    for k in ours {
        headers.remove(k);
    }
    if let Ok(v) = HeaderValue::from_str(principal) {
        headers.insert("x-map-principal", v);
    }
    headers.insert("x-map-client-address", HeaderValue::from_str(&peer.ip().to_string()).expect("an address is a header value"));
    if !headers.contains_key(HOST) {
        headers.insert(HOST, HeaderValue::from_static("localhost"));
    }
    let body = Limited::new(body, limit).map_err(|e| match e.downcast::<hyper::Error>() {
        Ok(e) => wasmtime_wasi_http::Error::from(*e),
        Err(_) => wasmtime_wasi_http::Error::HttpRequestBodySize(None),
    });
    let mut request = Request::new(body.boxed_unsync());
    *request.method_mut() = parts.method;
    *request.uri_mut() = target.parse().unwrap_or_else(|_| hyper::Uri::from_static("/"));
    *request.headers_mut() = headers;
    request
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
    let mut resp = Response::new(boxed(Full::new(Bytes::from(answer.body))));
    *resp.status_mut() = status;
    for (k, v) in answer.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(&v)) {
            resp.headers_mut().append(k, v);
        }
    }
    resp
}
