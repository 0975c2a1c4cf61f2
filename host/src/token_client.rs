//! The credentials broker's token client: one form POST to a token endpoint,
//! over the HTTP/1.1 client (rustls and the webpki roots for https) that
//! plugins' outbound requests use too.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::{BodyExt, Full, Limited};
use hyper::http::{header, Method, Request, StatusCode, Uri};
use wasmtime_wasi_http::{default_send_request, Error as HttpError, RequestOptions};

use map_core::credentials::{Failure, TokenClient};

/// Largest token response read.
const MAX_BODY: usize = 64 << 10;

/// Installs the client for every tenant's OAuth2 providers.
pub fn install() {
    map_core::credentials::set_token_client(Box::new(Hyper));
}

struct Hyper;

impl TokenClient for Hyper {
    fn post_form<'a>(&'a self, uri: &'a Uri, authorization: &'a str, form: String, timeout: Duration) -> BoxFuture<'a, Result<(StatusCode, Bytes), Failure>> {
        Box::pin(async move {
            match tokio::time::timeout(timeout, exchange(uri, authorization, form, timeout)).await {
                Ok(result) => result,
                Err(_) => Err(Failure::Unreachable(format!("no answer within {} ms", timeout.as_millis()))),
            }
        })
    }
}

async fn exchange(uri: &Uri, authorization: &str, form: String, timeout: Duration) -> Result<(StatusCode, Bytes), Failure> {
    let host = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let request = Request::builder()
        .method(Method::POST)
        .uri(uri.clone())
        .header(header::HOST, host)
        .header(header::AUTHORIZATION, authorization)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "application/json")
        .header(header::CONNECTION, "close")
        .body(Full::new(Bytes::from(form)).map_err(|never| -> HttpError { match never {} }))
        .map_err(|e| Failure::Unreachable(format!("the request could not be made: {e}")))?;
    let options = RequestOptions { connect_timeout: Some(timeout), first_byte_timeout: Some(timeout), between_bytes_timeout: Some(timeout) };
    let (response, connection) = default_send_request(request, Some(options)).await.map_err(|e: HttpError| Failure::Unreachable(e.to_string()))?;
    // The connection carries the body: it runs beside the read, and goes with it.
    let connection = tokio::spawn(connection);
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_BODY).collect().await;
    connection.abort();
    match body {
        Ok(body) => Ok((status, body.to_bytes())),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Failure::TooLarge),
        Err(e) => Err(Failure::Unreachable(format!("reading the answer: {e}"))),
    }
}
