//! An issuer's signing keys fetched from its JWK Set (at a URL, or named by
//! its OpenID Connect discovery document) and cached: fetched again when
//! older than `refresh_ms` or when a token names a `kid` the set lacks (at
//! most once per `min_interval_ms`), kept through an outage of the issuer
//! for `max_stale_ms` after the last fetch. Only keys for the one pinned
//! algorithm are kept. The core has no HTTP client: the binary installs one
//! with [`set_client`] (`map-gateway`'s `token_client`).

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{StatusCode, Uri};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use parking_lot::Mutex;
use serde_json::Value;

use map_config::JwksConfig;

pub use crate::credentials::Failure;

/// GETs a JSON document: the status and body of the answer, within `timeout`.
pub trait KeyClient: Send + Sync {
    fn get<'a>(&'a self, uri: &'a Uri, timeout: Duration) -> BoxFuture<'a, Result<(StatusCode, Bytes), Failure>>;
}

static CLIENT: OnceLock<Box<dyn KeyClient>> = OnceLock::new();

/// Install the process's key client (the first call wins).
pub fn set_client(client: Box<dyn KeyClient>) {
    let _ = CLIENT.set(client);
}

async fn get_json(uri: &str, timeout: Duration) -> Result<Value, String> {
    let uri: Uri = uri.parse().map_err(|_| format!("{uri:?} is not a URL"))?;
    let client = CLIENT.get().ok_or("this process has no HTTP client for key sets")?;
    match client.get(&uri, timeout).await {
        Ok((status, body)) if status.is_success() => serde_json::from_slice(&body).map_err(|_| format!("{uri} answered no JSON")),
        Ok((status, _)) => Err(format!("{uri} answered HTTP {}", status.as_u16())),
        Err(Failure::Unreachable(why)) => Err(format!("{uri}: {why}")),
        Err(Failure::TooLarge) => Err(format!("{uri} answered too large a document")),
    }
}

/// One issuer's key set.
pub struct KeySet {
    config: JwksConfig,
    algorithm: Algorithm,
    state: Mutex<State>,
    /// One fetch at a time; callers that waited on it find its keys.
    fetching: Mutex<()>,
}

#[derive(Default)]
struct State {
    keys: Vec<(Option<String>, DecodingKey)>,
    fetched: Option<Instant>,
    attempted: Option<Instant>,
    error: Option<String>,
}

impl KeySet {
    pub fn new(config: JwksConfig, algorithm: Algorithm) -> KeySet {
        KeySet { config, algorithm, state: Mutex::new(State::default()), fetching: Mutex::new(()) }
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// Whether the set should be fetched now for a token naming `kid`.
    fn wants_fetch(&self, s: &State, kid: Option<&str>) -> bool {
        if s.attempted.is_some_and(|t| t.elapsed() < Self::ms(self.config.min_interval_ms)) {
            return false;
        }
        let old = s.fetched.is_none_or(|t| t.elapsed() >= Self::ms(self.config.refresh_ms));
        old || kid.is_some_and(|kid| !s.keys.iter().any(|(k, _)| k.as_deref() == Some(kid)))
    }

    /// The keys a token with this `kid` may be signed with (every key when
    /// it names none), fetching the set first when it is old or lacks the
    /// `kid`. `Err`: the set could not be had, and why.
    pub fn keys_for(&self, kid: Option<&str>) -> Result<Vec<DecodingKey>, String> {
        if self.wants_fetch(&self.state.lock(), kid) {
            let _one = self.fetching.lock();
            // Another caller may have fetched while this one waited.
            if self.wants_fetch(&self.state.lock(), kid) {
                let fetched = wait(self.fetch());
                let mut s = self.state.lock();
                s.attempted = Some(Instant::now());
                match fetched {
                    Ok(keys) => {
                        (s.keys, s.fetched, s.error) = (keys, Some(Instant::now()), None);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "fetching an issuer's key set failed; the keys fetched before stay in use");
                        s.error = Some(e);
                    }
                }
            }
        }
        let s = self.state.lock();
        let why = || s.error.clone().unwrap_or_default();
        match s.fetched {
            None => return Err(format!("the issuer's keys could not be fetched ({})", why())),
            Some(t) if t.elapsed() >= Self::ms(self.config.max_stale_ms) => {
                return Err(format!("the issuer's keys could not be fetched for {} s ({})", t.elapsed().as_secs(), why()));
            }
            Some(_) => {}
        }
        Ok(s.keys.iter().filter(|(k, _)| kid.is_none() || k.as_deref() == kid).map(|(_, key)| key.clone()).collect())
    }

    async fn fetch(&self) -> Result<Vec<(Option<String>, DecodingKey)>, String> {
        let timeout = Self::ms(self.config.timeout_ms.max(1));
        let url = if self.config.oidc_issuer.is_empty() {
            self.config.url.clone()
        } else {
            let issuer = self.config.oidc_issuer.trim_end_matches('/');
            let discovery = get_json(&format!("{issuer}/.well-known/openid-configuration"), timeout).await?;
            if discovery.get("issuer").and_then(Value::as_str).map(|i| i.trim_end_matches('/')) != Some(issuer) {
                return Err(format!("the discovery document of {issuer} names another issuer"));
            }
            discovery.get("jwks_uri").and_then(Value::as_str).ok_or_else(|| format!("the discovery document of {issuer} has no jwks_uri"))?.to_string()
        };
        let set = get_json(&url, timeout).await?;
        let listed = set.get("keys").and_then(Value::as_array).ok_or_else(|| format!("{url} is not a JWK set"))?;
        let keys: Vec<_> = listed.iter().filter_map(|k| self.usable(k)).collect();
        tracing::info!(url = %url, keys = keys.len(), listed = listed.len(), "fetched an issuer's key set");
        Ok(keys)
    }

    /// A listed key if it signs with the pinned algorithm: its type fits it,
    /// its `alg` (when given) is it, its `use` (when given) is `sig`. A
    /// symmetric (`oct`) key is never taken from a key set.
    fn usable(&self, value: &Value) -> Option<(Option<String>, DecodingKey)> {
        let jwk: Jwk = serde_json::from_value(value.clone()).ok()?;
        if jwk.common.key_algorithm.is_some_and(|a| a.to_string() != format!("{:?}", self.algorithm)) {
            return None;
        }
        if jwk.common.public_key_use.as_ref().is_some_and(|u| *u != PublicKeyUse::Signature) {
            return None;
        }
        let fits = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => {
                matches!(self.algorithm, Algorithm::RS256 | Algorithm::RS384 | Algorithm::RS512 | Algorithm::PS256 | Algorithm::PS384 | Algorithm::PS512)
            }
            AlgorithmParameters::EllipticCurve(_) => matches!(self.algorithm, Algorithm::ES256 | Algorithm::ES384),
            AlgorithmParameters::OctetKeyPair(_) => self.algorithm == Algorithm::EdDSA,
            AlgorithmParameters::OctetKey(_) => false,
        };
        let key = DecodingKey::from_jwk(&jwk).ok().filter(|_| fits)?;
        Some((jwk.common.key_id, key))
    }
}

/// Run a fetch to its end from synchronous code: on a multi-threaded
/// runtime the worker hands its other tasks on while it waits; elsewhere on
/// a runtime of its own.
fn wait<F: Future + Send>(fetch: F) -> F::Output
where
    F::Output: Send,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(|| h.block_on(fetch)),
        Ok(_) => std::thread::scope(|s| s.spawn(|| own_runtime().block_on(fetch)).join().expect("the key fetch does not panic")),
        Err(_) => own_runtime().block_on(fetch),
    }
}

fn own_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime for a key fetch")
}
