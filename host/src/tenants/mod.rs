//! Tenants and the credentials that lead into them. A tenant is a wall:
//! each has its own directory and fabric, so nothing is shared across tenants.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub mod jwt;
pub mod throttle;

use crate::config::{Config, LimitsConfig};
use crate::core::fabric::{Fabric, LocalFabric};
use crate::core::registry::Registry;
use crate::plugins::TenantPlugins;
use crate::rpc::{codes, RpcError};

pub struct Tenant {
    pub id: String,
    pub registry: Mutex<Registry>,
    pub fabric: Arc<dyn Fabric>,
    plugins: RwLock<Arc<TenantPlugins>>,
    /// Which sends the observers may want (see `may_observe`), kept beside
    /// the set so a send without interest skips the lock.
    observed: AtomicU8,
}

const OBSERVE_NONE: u8 = 0;
const OBSERVE_WITH_META: u8 = 1;
const OBSERVE_ALL: u8 = 2;

impl Tenant {
    pub fn new(id: &str, limits: &LimitsConfig) -> Tenant {
        Tenant {
            id: id.to_string(),
            registry: Mutex::new(Registry::default()),
            fabric: Arc::new(LocalFabric::new(limits.replay_events, limits.replay_bytes)),
            plugins: RwLock::new(Arc::new(TenantPlugins::default())),
            observed: AtomicU8::new(OBSERVE_NONE),
        }
    }

    /// The tenant's current plugin set (a snapshot: a swap does not affect it).
    pub fn plugins(&self) -> Arc<TenantPlugins> {
        self.plugins.read().clone()
    }

    pub fn set_plugins(&self, set: TenantPlugins) {
        let mut current = self.plugins.write();
        let observed = match (set.observes_any(false), set.observes_any(true)) {
            (true, _) => OBSERVE_ALL,
            (false, true) => OBSERVE_WITH_META,
            _ => OBSERVE_NONE,
        };
        self.observed.store(observed, Ordering::Relaxed);
        *current = Arc::new(set);
    }

    /// Whether an observer may want a send (with or without `meta`); when
    /// true, `plugins().observes(meta)` decides.
    pub fn may_observe(&self, has_meta: bool) -> bool {
        match self.observed.load(Ordering::Relaxed) {
            OBSERVE_ALL => true,
            OBSERVE_WITH_META => has_meta,
            _ => false,
        }
    }
}

pub struct Tenants {
    by_id: HashMap<String, Arc<Tenant>>,
    /// (auth method, SHA-256 of the credential) → who it is. Looked up by
    /// digest, so the lookup's timing says nothing about a guessed secret.
    credentials: HashMap<(&'static str, [u8; 32]), Authenticated>,
    anonymous: Option<String>,
    pub anonymous_remote: bool,
    /// Signs and checks the access tokens `map/auth/refresh` issues, and checks tenants' JWTs.
    pub tokens: jwt::Tokens,
    /// Failed authentications by source address.
    pub throttle: throttle::Throttle,
}

/// Who a credential is: a principal in a tenant.
#[derive(Clone)]
pub struct Authenticated {
    pub tenant: Arc<Tenant>,
    pub principal: Arc<str>,
}

/// The principal of peers admitted without credentials.
pub const ANONYMOUS: &str = "anonymous";

/// Auth methods a connecting peer may name; `x-` methods are accepted as names.
pub const KNOWN_METHODS: &[&str] = &["none", "api-key", "bearer", "mtls", "did:wba"];

fn digest(secret: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes()).into()
}

impl Tenants {
    pub fn from_config(config: &Config) -> anyhow::Result<Tenants> {
        let mut by_id = HashMap::new();
        let mut credentials = HashMap::new();
        for t in &config.tenants {
            let tenant = Arc::new(Tenant::new(&t.id, &config.limits));
            by_id.insert(t.id.clone(), tenant.clone());
            for (method, list) in [("api-key", &t.api_keys), ("bearer", &t.bearer_tokens)] {
                for (i, c) in list.iter().enumerate() {
                    let principal: Arc<str> = c.principal().map(Into::into).unwrap_or_else(|| format!("{}/{method}/{i}", t.id).into());
                    credentials.insert((method, digest(c.secret())), Authenticated { tenant: tenant.clone(), principal });
                }
            }
        }
        let anonymous = Some(config.auth.anonymous_tenant.clone()).filter(|t| !t.is_empty());
        Ok(Tenants {
            by_id,
            credentials,
            anonymous,
            anonymous_remote: config.auth.anonymous_remote,
            tokens: jwt::Tokens::from_config(config)?,
            throttle: throttle::Throttle::new(config.auth.failures_per_minute),
        })
    }

    pub fn get(&self, id: &str) -> Option<Arc<Tenant>> {
        self.by_id.get(id).cloned()
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.by_id.values()
    }

    /// Who a peer that presents no credentials is, if it may come in.
    pub fn anonymous(&self, loopback: bool) -> Option<Authenticated> {
        if loopback || self.anonymous_remote {
            let tenant = self.anonymous.as_deref().and_then(|t| self.get(t))?;
            Some(Authenticated { tenant, principal: ANONYMOUS.into() })
        } else {
            None
        }
    }

    /// Methods a peer can use here, for `authRequired.methods`.
    pub fn offered_methods(&self) -> Vec<&'static str> {
        let mut m: Vec<&'static str> = self.credentials.keys().map(|(k, _)| *k).collect();
        m.push("bearer");
        m.sort();
        m.dedup();
        m
    }

    /// Map `auth {method, credential}` to a principal: a configured key or
    /// token, an access token this gateway issued, or a JWT a tenant trusts.
    pub fn authenticate(&self, method: &str, credential: Option<&str>) -> Result<Authenticated, RpcError> {
        if !KNOWN_METHODS.contains(&method) && !method.starts_with("x-") {
            return Err(RpcError::invalid_params(format!("Unknown auth method {method:?}")));
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
            let (tenant, principal) = self.tokens.verify(credential, |id| self.get(id))?;
            return Ok(Authenticated { tenant, principal: principal.into() });
        }
        Err(RpcError::new(codes::AUTH_FAILED, "Invalid credential"))
    }
}
