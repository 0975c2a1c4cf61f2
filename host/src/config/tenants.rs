//! Tenants and the credentials that lead into them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TenantConfig {
    pub id: String,
    /// Credentials of `map/connect` `auth {method: "api-key"}` that land in this tenant.
    pub api_keys: Vec<Credential>,
    /// Credentials of `auth {method: "bearer"}` that land in this tenant.
    pub bearer_tokens: Vec<Credential>,
    /// `auth {method: "none"}` lands in this tenant as this principal, and
    /// `none` is offered in `authRequired.methods`. Absent: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub none_principal: Option<String>,
    /// Plugins enabled for this tenant. Absent: all configured plugins.
    pub plugins: Option<Vec<String>>,
    /// Per-plugin configuration overriding the plugin's own `config` keys.
    pub plugin_config: BTreeMap<String, serde_json::Value>,
    /// Bearer tokens that are JWTs issued by someone else, checked with this key.
    pub jwt: Option<JwtConfig>,
    /// Hosts each plugin may reach over HTTP for this tenant, besides the
    /// plugin's own `outbound_hosts` (same form).
    pub outbound_hosts: BTreeMap<String, Vec<String>>,
}

/// How a tenant checks JWT bearer tokens: signature, expiry, audience, issuer.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct JwtConfig {
    /// HS256/384/512: the shared secret.
    pub secret: String,
    /// RS*/ES*/PS*/EdDSA: a PEM public key file.
    pub public_key_file: PathBuf,
    /// `HS256` (default), `RS256`, `ES256`, … the only algorithm accepted.
    pub algorithm: String,
    /// Required `aud`; empty: not checked.
    pub audience: String,
    /// Required `iss`; empty: not checked.
    pub issuer: String,
    /// The claim naming the principal (default `sub`).
    pub principal_claim: String,
}

/// A configured secret: `"the-key"`, or `{ secret = "the-key", principal = "alice" }`
/// to name the principal it authenticates (default `<tenant>/<method>/<index>`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Credential {
    Secret(String),
    WithPrincipal {
        #[serde(alias = "key", alias = "token")]
        secret: String,
        principal: Option<String>,
    },
}

impl Credential {
    pub fn secret(&self) -> &str {
        match self {
            Credential::Secret(s) | Credential::WithPrincipal { secret: s, .. } => s,
        }
    }

    pub fn principal(&self) -> Option<&str> {
        match self {
            Credential::WithPrincipal { principal: Some(p), .. } => Some(p),
            _ => None,
        }
    }
}
