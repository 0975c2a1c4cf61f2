//! The credentials that lead into tenants: configured keys and principals,
//! access tokens and JWTs (`jwt`, with issuers' key sets in `jwks`),
//! failed-login throttling (`throttle`).
//! Generic over what a tenant is (`T`), so it depends on nothing of the core.

use std::collections::HashMap;
use std::sync::Arc;

pub mod jwks;
pub mod jwt;
pub mod throttle;

use map_config::{Config, TenantConfig};
use map_protocol::rpc::{codes, RpcError};

pub struct Tenants<T> {
    by_id: HashMap<String, Arc<T>>,
    /// (auth method, SHA-256 of the credential) → who it is. Looked up by
    /// digest, so the lookup's timing says nothing about a guessed secret.
    credentials: HashMap<(&'static str, [u8; 32]), Authenticated<T>>,
    anonymous: Option<String>,
    pub anonymous_remote: bool,
    /// Who `auth {method: "none"}` is, where a tenant accepts it.
    none: Option<Authenticated<T>>,
    /// Signs and checks the access tokens `map/auth/refresh` issues, and checks tenants' JWTs.
    pub tokens: jwt::Tokens,
    /// Failed authentications by source address.
    pub throttle: throttle::Throttle,
}

/// Who a credential is: a principal in a tenant.
pub struct Authenticated<T> {
    pub tenant: Arc<T>,
    pub principal: Arc<str>,
    /// When the credential stops being accepted (Unix ms): a JWT's `exp`;
    /// none for keys and tokens that do not expire.
    pub expires_at: Option<u64>,
}

impl<T> Clone for Authenticated<T> {
    fn clone(&self) -> Self {
        Authenticated { tenant: self.tenant.clone(), principal: self.principal.clone(), expires_at: self.expires_at }
    }
}

/// The principal of peers admitted without credentials.
pub const ANONYMOUS: &str = "anonymous";

/// Auth methods a connecting peer may name; `x-` methods are accepted as names.
pub const KNOWN_METHODS: &[&str] = &["none", "api-key", "bearer", "mtls", "did:wba"];

fn digest(secret: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes()).into()
}

impl<T> Tenants<T> {
    /// The configured tenants, each made by `make`, and their credentials.
    pub fn from_config(config: &Config, make: impl Fn(&TenantConfig) -> T) -> anyhow::Result<Tenants<T>> {
        let mut by_id = HashMap::new();
        let mut credentials = HashMap::new();
        let mut none = None;
        for t in &config.tenants {
            let tenant = Arc::new(make(t));
            by_id.insert(t.id.clone(), tenant.clone());
            if let Some(principal) = &t.none_principal {
                none = Some(Authenticated { tenant: tenant.clone(), principal: principal.as_str().into(), expires_at: None });
            }
            for (method, list) in [("api-key", &t.api_keys), ("bearer", &t.bearer_tokens)] {
                for (i, c) in list.iter().enumerate() {
                    let principal: Arc<str> = c.principal().map(Into::into).unwrap_or_else(|| format!("{}/{method}/{i}", t.id).into());
                    credentials.insert((method, digest(c.secret())), Authenticated { tenant: tenant.clone(), principal, expires_at: None });
                }
            }
        }
        let anonymous = Some(config.auth.anonymous_tenant.clone()).filter(|t| !t.is_empty());
        Ok(Tenants {
            by_id,
            credentials,
            anonymous,
            anonymous_remote: config.auth.anonymous_remote,
            none,
            tokens: jwt::Tokens::from_config(config)?,
            throttle: throttle::Throttle::new(config.auth.failures_per_minute),
        })
    }

    pub fn get(&self, id: &str) -> Option<Arc<T>> {
        self.by_id.get(id).cloned()
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<T>> {
        self.by_id.values()
    }

    /// Who a peer that presents no credentials is, if it may come in.
    pub fn anonymous(&self, loopback: bool) -> Option<Authenticated<T>> {
        if loopback || self.anonymous_remote {
            let tenant = self.anonymous.as_deref().and_then(|t| self.get(t))?;
            Some(Authenticated { tenant, principal: ANONYMOUS.into(), expires_at: None })
        } else {
            None
        }
    }

    /// A tenant accepts `auth {method: "none"}` (elsewhere it means no credentials).
    pub fn accepts_none(&self) -> bool {
        self.none.is_some()
    }

    /// Methods a peer can use here, for `authRequired.methods`.
    pub fn offered_methods(&self) -> Vec<&'static str> {
        let mut m: Vec<&'static str> = self.credentials.keys().map(|(k, _)| *k).collect();
        m.push("bearer");
        if self.none.is_some() {
            m.push("none");
        }
        m.sort();
        m.dedup();
        m
    }

    /// Map `auth {method, credential}` to a principal: a configured key or
    /// token, an access token this gateway issued, or a JWT a tenant trusts.
    pub fn authenticate(&self, method: &str, credential: Option<&str>) -> Result<Authenticated<T>, RpcError> {
        if !KNOWN_METHODS.contains(&method) && !method.starts_with("x-") {
            return Err(RpcError::invalid_params(format!("Unknown auth method {method:?}")));
        }
        if let Some(none) = self.none.as_ref().filter(|_| method == "none") {
            return Ok(none.clone());
        }
        let key = match method {
            "api-key" => "api-key",
            "bearer" => "bearer",
            _ => return Err(RpcError::new(codes::AUTH_FAILED, format!("Auth method {method:?} is not enabled on this gateway"))),
        };
        let credential = credential.filter(|c| !c.is_empty()).ok_or_else(|| RpcError::new(codes::AUTH_FAILED, "Missing credential"))?;
        if let Some(found) = self.credentials.get(&(key, digest(credential))) {
            return Ok(found.clone());
        }
        if key == "bearer" && jwt::looks_like_jwt(credential) {
            let (tenant, principal, expires_at) = self.tokens.verify(credential, |id| self.get(id))?;
            return Ok(Authenticated { tenant, principal: principal.into(), expires_at: Some(expires_at) });
        }
        Err(RpcError::new(codes::AUTH_FAILED, "Invalid credential"))
    }
}
