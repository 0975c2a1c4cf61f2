//! The core's HTTP client: the credentials broker's form POST to a token
//! endpoint and the GET of an issuer's key set or discovery document, over
//! the HTTP/1.1 client (rustls and the webpki roots for https) that plugins'
//! outbound requests use too.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::{BodyExt, Full, Limited};
use hyper::http::{header, Method, Request, StatusCode, Uri};
use wasmtime_wasi_http::{default_send_request, Error as HttpError, RequestOptions};

use map_core::credentials::{Failure, TokenClient};
use map_core::tenants::jwks::KeyClient;

/// Largest token response read.
const MAX_BODY: usize = 64 << 10;
/// Largest key set or discovery document read.
const MAX_DOCUMENT: usize = 1 << 20;

/// Installs the client for every tenant's OAuth2 providers and JWT issuers' key sets.
pub fn install() {
    map_core::credentials::set_token_client(Box::new(Hyper));
    map_core::tenants::jwks::set_client(Box::new(Hyper));
}

struct Hyper;

impl TokenClient for Hyper {
    fn post_form<'a>(&'a self, uri: &'a Uri, authorization: &'a str, form: String, timeout: Duration) -> BoxFuture<'a, Result<(StatusCode, Bytes), Failure>> {
        let headers = [(header::AUTHORIZATION, authorization), (header::CONTENT_TYPE, "application/x-www-form-urlencoded")];
        Box::pin(async move { within(timeout, exchange(uri, Method::POST, &headers, Bytes::from(form), timeout, MAX_BODY)).await })
    }
}

impl KeyClient for Hyper {
    fn get<'a>(&'a self, uri: &'a Uri, timeout: Duration) -> BoxFuture<'a, Result<(StatusCode, Bytes), Failure>> {
        Box::pin(async move { within(timeout, exchange(uri, Method::GET, &[], Bytes::new(), timeout, MAX_DOCUMENT)).await })
    }
}

async fn within<T>(timeout: Duration, f: impl std::future::Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    match tokio::time::timeout(timeout, f).await {
        Ok(result) => result,
        Err(_) => Err(Failure::Unreachable(format!("no answer within {} ms", timeout.as_millis()))),
    }
}

async fn exchange(
    uri: &Uri,
    method: Method,
    headers: &[(header::HeaderName, &str)],
    body: Bytes,
    timeout: Duration,
    max: usize,
) -> Result<(StatusCode, Bytes), Failure> {
    let host = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let mut request = Request::builder().method(method).uri(uri.clone()).header(header::HOST, host);
    for (name, value) in headers {
        request = request.header(name, *value);
    }
    let request = request
        .header(header::ACCEPT, "application/json")
        .header(header::CONNECTION, "close")
        .body(Full::new(body).map_err(|never| -> HttpError { match never {} }))
        .map_err(|e| Failure::Unreachable(format!("the request could not be made: {e}")))?;
    let options = RequestOptions { connect_timeout: Some(timeout), first_byte_timeout: Some(timeout), between_bytes_timeout: Some(timeout) };
    let (response, connection) = default_send_request(request, Some(options)).await.map_err(|e: HttpError| Failure::Unreachable(e.to_string()))?;
    // The connection carries the body: it runs beside the read, and goes with it.
    let connection = tokio::spawn(connection);
    let status = response.status();
    let body = Limited::new(response.into_body(), max).collect().await;
    connection.abort();
    match body {
        Ok(body) => Ok((status, body.to_bytes())),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Failure::TooLarge),
        Err(e) => Err(Failure::Unreachable(format!("reading the answer: {e}"))),
    }
}
