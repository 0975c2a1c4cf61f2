//! Plain HTTP responses every endpoint builds: a body type, a full body,
//! a JSON error, 405.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::json;

/// The body of every response the HTTP routes build. Only a plugin's
/// streaming body can fail (then the client sees the stream cut, not ended).
pub type Body = UnsyncBoxBody<Bytes, map_plugin_host::StreamError>;

/// A body that cannot fail, as a `Body`.
pub(super) fn boxed(body: impl http_body::Body<Data = Bytes, Error = Infallible> + Send + 'static) -> Body {
    body.map_err(|never| match never {}).boxed_unsync()
}

/// A response with this whole body.
pub(super) fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(boxed(Full::new(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `{"error": message}` with this status.
pub(super) fn error_json(status: StatusCode, message: &str) -> Response<Body> {
    full(status, "application/json", json!({"error": message}).to_string())
}

pub(super) fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = full(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "method not allowed\n");
    r.headers_mut().insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
    r
}
