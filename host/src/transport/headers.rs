//! What a request's headers say: its credentials, whether its origin may
//! use the MAP endpoints, its trace context, and so who calls.

use std::net::SocketAddr;

use hyper::StatusCode;

use map_core::{Authenticated, Gateway};
use map_protocol::rpc::RpcError;

/// Credentials a transport may carry outside `map/connect`.
pub(crate) fn header_credentials(headers: &hyper::HeaderMap) -> Option<(String, String)> {
    if let Some(v) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(("api-key".into(), v.trim().to_string()));
    }
    let auth = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let token = auth.strip_prefix("Bearer ").or_else(|| auth.strip_prefix("bearer "))?;
    Some(("bearer".into(), token.trim().to_string()))
}

/// A browser request from this gateway's own origin: `Origin` names the host
/// the request was sent to.
fn same_origin(headers: &hyper::HeaderMap, origin: &str) -> bool {
    let host = headers.get(hyper::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    !host.is_empty() && authority.is_some_and(|a| a.eq_ignore_ascii_case(host))
}

/// The request's `Origin`, when it is a cross-origin browser request.
pub(crate) fn foreign_origin(headers: &hyper::HeaderMap) -> Option<String> {
    let origin = headers.get(hyper::header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("null");
    (!same_origin(headers, origin)).then(|| origin.to_string())
}

/// Whether a request may use the MAP endpoints: not from a browser, from
/// the gateway's own origin, or from an origin the configuration allows.
pub(crate) fn origin_allowed(allowed: &[String], headers: &hyper::HeaderMap) -> bool {
    match foreign_origin(headers) {
        None => true,
        Some(o) => o != "null" && allowed.iter().any(|a| a == "*" || a.eq_ignore_ascii_case(&o)),
    }
}

/// A peer on this machine.
pub(crate) fn is_loopback(peer: &SocketAddr) -> bool {
    peer.ip().is_loopback() || matches!(peer.ip(), std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
}

/// W3C trace context headers (`traceparent`, `tracestate`), when present.
pub(super) fn trace_headers(headers: &hyper::HeaderMap) -> (Option<String>, Option<String>) {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    (get("traceparent"), get("tracestate"))
}

/// Who an HTTP request is: its `Authorization` / `X-Api-Key` credentials,
/// or the anonymous tenant. `Ok(None)`: no credentials and none needed is not allowed.
pub(crate) fn caller(gw: &Gateway, peer: SocketAddr, headers: &hyper::HeaderMap) -> Result<Option<Authenticated>, (StatusCode, RpcError)> {
    let Some((method, secret)) = header_credentials(headers) else {
        return Ok(gw.tenants.anonymous(is_loopback(&peer)));
    };
    match gw.check_credential(Some(peer.ip()), &method, Some(&secret)) {
        Ok(who) => Ok(Some(who)),
        Err(e) if e.code == map_protocol::rpc::codes::RESOURCE_EXHAUSTED => Err((StatusCode::TOO_MANY_REQUESTS, e)),
        Err(e) => Err((StatusCode::UNAUTHORIZED, e)),
    }
}
