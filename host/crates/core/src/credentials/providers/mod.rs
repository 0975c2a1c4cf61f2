//! Where credentials come from: a provider hands out the credential for a
//! scope it serves (`static_secrets`: from the configuration; `oauth2`:
//! from a token endpoint).

pub mod http;
mod oauth2;
mod static_secrets;

use futures_util::future::BoxFuture;
use serde_json::Value;

use map_config::ProviderConfig;

/// A credential handed out. Its material (`credential`) goes to the caller
/// only: never into events or logs, so there is no `Debug`.
pub struct Issued {
    /// `bearer_token`, `api_key` or `aws_credentials`.
    pub credential_type: String,
    pub credential: Value,
    /// Unix milliseconds.
    pub expires_at: Option<u64>,
}

/// Why a provider gave nothing. The text names no secret.
#[derive(Debug)]
pub enum ProviderError {
    /// It cannot be reached, or has nothing for the scope (11002).
    Unavailable(String),
    /// It answered, but not with a credential (11003).
    Failed(String),
}

pub trait Provider: Send + Sync {
    /// `static` or `oauth2`.
    fn kind(&self) -> &'static str;

    /// The credential for a scope this provider serves.
    fn issue<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Issued, ProviderError>>;
}

/// A provider as configured; `Err` when a secret it names cannot be read.
pub fn build(config: &ProviderConfig) -> anyhow::Result<Box<dyn Provider>> {
    Ok(match config {
        ProviderConfig::Static(c) => Box::new(static_secrets::StaticSecrets::new(c)?),
        ProviderConfig::Oauth2(c) => Box::new(oauth2::OAuth2::new(c)?),
    })
}
