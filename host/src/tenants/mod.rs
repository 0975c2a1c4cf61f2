//! Tenants and the credentials that lead into them. A tenant is a wall:
//! each has its own directory and fabric, so nothing is shared across tenants.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::config::Config;
use crate::core::fabric::{Fabric, LocalFabric};
use crate::core::registry::Registry;
use crate::plugins::TenantPlugins;
use crate::rpc::{codes, RpcError};

pub struct Tenant {
    pub id: String,
    pub registry: Mutex<Registry>,
    pub fabric: Arc<dyn Fabric>,
    plugins: RwLock<Arc<TenantPlugins>>,
    /// Which sends the interceptors may want (see `may_observe`), kept beside
    /// the set so a send without interest skips the lock.
    observed: AtomicU8,
}

const OBSERVE_NONE: u8 = 0;
const OBSERVE_WITH_META: u8 = 1;
const OBSERVE_ALL: u8 = 2;

impl Tenant {
    pub fn new(id: &str, replay_events: usize) -> Tenant {
        Tenant {
            id: id.to_string(),
            registry: Mutex::new(Registry::default()),
            fabric: Arc::new(LocalFabric::new(replay_events)),
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

    /// Whether an interceptor may want a send (with or without `meta`); when
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
    /// (auth method, credential) → tenant id
    credentials: HashMap<(&'static str, String), String>,
    anonymous: Option<String>,
    pub anonymous_remote: bool,
}

/// Auth methods a connecting peer may name; `x-` methods are accepted as names.
pub const KNOWN_METHODS: &[&str] = &["none", "api-key", "bearer", "mtls", "did:wba"];

impl Tenants {
    pub fn from_config(config: &Config) -> Tenants {
        let mut by_id = HashMap::new();
        let mut credentials = HashMap::new();
        for t in &config.tenants {
            by_id.insert(t.id.clone(), Arc::new(Tenant::new(&t.id, config.limits.replay_events)));
            for k in &t.api_keys {
                credentials.insert(("api-key", k.clone()), t.id.clone());
            }
            for k in &t.bearer_tokens {
                credentials.insert(("bearer", k.clone()), t.id.clone());
            }
        }
        let anonymous = Some(config.auth.anonymous_tenant.clone()).filter(|t| !t.is_empty());
        Tenants { by_id, credentials, anonymous, anonymous_remote: config.auth.anonymous_remote }
    }

    pub fn get(&self, id: &str) -> Option<Arc<Tenant>> {
        self.by_id.get(id).cloned()
    }

    /// The tenant for a peer that presents no credentials, if that is allowed.
    pub fn anonymous(&self, loopback: bool) -> Option<Arc<Tenant>> {
        if loopback || self.anonymous_remote {
            self.anonymous.as_deref().and_then(|t| self.get(t))
        } else {
            None
        }
    }

    /// Methods a peer can use here, for `authRequired.methods`.
    pub fn offered_methods(&self) -> Vec<&'static str> {
        let mut m: Vec<&'static str> = self.credentials.keys().map(|(k, _)| *k).collect();
        m.sort();
        m.dedup();
        m
    }

    /// Map `auth {method, credential}` to a tenant.
    pub fn authenticate(&self, method: &str, credential: Option<&str>) -> Result<Arc<Tenant>, RpcError> {
        if !KNOWN_METHODS.contains(&method) && !method.starts_with("x-") {
            return Err(RpcError::invalid_params(format!("Unknown auth method {method:?}")));
        }
        let key = match method {
            "api-key" => "api-key",
            "bearer" => "bearer",
            _ => return Err(RpcError::new(codes::AUTH_FAILED, format!("Auth method {method:?} is not enabled on this gateway"))),
        };
        let credential = credential.filter(|c| !c.is_empty()).ok_or_else(|| RpcError::new(codes::AUTH_FAILED, "Missing credential"))?;
        self.credentials
            .get(&(key, credential.to_string()))
            .and_then(|t| self.get(t))
            .ok_or_else(|| RpcError::new(codes::AUTH_FAILED, "Invalid credential"))
    }
}
