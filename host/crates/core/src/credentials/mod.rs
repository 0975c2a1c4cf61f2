//! A tenant's credentials broker: grants say which principal may have which
//! scope on which resource (`grants`); providers hand the credentials out
//! (`providers`). It knows principals, not sessions: the core's `cred/*`
//! methods check the caller and emit the events. No credential material is
//! ever logged here, nor in the errors it returns.

mod grants;
mod providers;

pub use providers::http::{set_client as set_token_client, Failure, TokenClient};
pub use providers::Issued;

use map_config::{pattern_matches, CredentialsConfig};
use providers::{Provider, ProviderError};

pub struct Broker {
    tenant: String,
    grants: grants::Grants,
    /// Each provider with the scopes it serves (no scope served twice).
    providers: Vec<Entry>,
}

struct Entry {
    name: String,
    scopes: Vec<String>,
    provider: Box<dyn Provider>,
}

/// Why no credential was handed out. The text names no secret.
pub enum Refused {
    /// No grant covers the request (11001).
    Denied(String),
    /// The provider cannot be reached or has nothing for the scope (11002).
    Unavailable(String),
    /// The provider failed otherwise (11003).
    Failed(String),
}

impl Broker {
    /// A tenant's broker as configured; `Err` names a secret that cannot be read.
    pub fn from_config(tenant: &str, config: &CredentialsConfig) -> anyhow::Result<Broker> {
        let mut providers = Vec::new();
        for ((name, scopes), p) in config.provider_scopes().into_iter().zip(config.providers.values()) {
            let provider = providers::build(p).map_err(|e| anyhow::anyhow!("tenant {tenant:?}: credentials provider {name:?}: {e}"))?;
            providers.push(Entry { name: name.to_string(), scopes: scopes.into_iter().map(String::from).collect(), provider });
        }
        Ok(Broker { tenant: tenant.to_string(), grants: grants::Grants::new(&config.grants), providers })
    }

    /// The credential for `scope` on `resource`, if a grant gives it to `principal`.
    pub async fn get(&self, principal: &str, scope: &str, resource: &str) -> Result<Issued, Refused> {
        if let Some(why) = self.grants.refusal(principal, scope, resource) {
            tracing::info!(tenant = self.tenant, principal, scope, resource, why, "credential denied");
            return Err(Refused::Denied(why));
        }
        let Some(entry) = self.providers.iter().find(|e| e.scopes.iter().any(|p| pattern_matches(p, scope))) else {
            return Err(Refused::Unavailable(format!("no provider serves scope {scope:?}")));
        };
        match entry.provider.issue(scope).await {
            Ok(issued) => {
                tracing::debug!(
                    tenant = self.tenant,
                    principal,
                    scope,
                    resource,
                    provider = entry.name,
                    credential_type = issued.credential_type,
                    "credential issued"
                );
                Ok(issued)
            }
            Err(e) => {
                tracing::warn!(tenant = self.tenant, principal, scope, provider = entry.name, kind = entry.provider.kind(), error = ?e, "credentials provider failed");
                Err(match e {
                    ProviderError::Unavailable(why) => Refused::Unavailable(format!("provider {}: {why}", entry.name)),
                    ProviderError::Failed(why) => Refused::Failed(format!("provider {}: {why}", entry.name)),
                })
            }
        }
    }

    /// The scope patterns granted to `principal`, each with its resource patterns.
    pub fn granted(&self, principal: &str) -> Vec<(String, Vec<String>)> {
        self.grants.of(principal)
    }

    /// The providers' names.
    pub fn providers(&self) -> Vec<&str> {
        self.providers.iter().map(|e| e.name.as_str()).collect()
    }
}
