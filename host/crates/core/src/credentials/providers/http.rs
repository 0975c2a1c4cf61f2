//! The one HTTP exchange providers make: a form POST to a token endpoint.
//! The core has no HTTP client of its own; the binary installs one with
//! [`set_client`] (`map-gateway`'s `token_client`), before tenants are built.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{StatusCode, Uri};

/// Why no usable answer came; the text names no part of the request.
pub enum Failure {
    /// No answer: refused, timed out, broken off.
    Unreachable(String),
    /// An answer too large to be a token.
    TooLarge,
}

/// POSTs a form with an `Authorization` header; the status and body of the
/// answer, all within `timeout`.
pub trait TokenClient: Send + Sync {
    fn post_form<'a>(&'a self, uri: &'a Uri, authorization: &'a str, form: String, timeout: Duration) -> BoxFuture<'a, Result<(StatusCode, Bytes), Failure>>;
}

static CLIENT: OnceLock<Box<dyn TokenClient>> = OnceLock::new();

/// Install the process's token client (the first call wins).
pub fn set_client(client: Box<dyn TokenClient>) {
    let _ = CLIENT.set(client);
}

pub async fn post_form(uri: &Uri, authorization: &str, form: String, timeout: Duration) -> Result<(StatusCode, Bytes), Failure> {
    match CLIENT.get() {
        Some(client) => client.post_form(uri, authorization, form, timeout).await,
        None => Err(Failure::Unreachable("this process has no HTTP client for token endpoints".into())),
    }
}
