//! Tenants and the credentials that lead into them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::secret::{PluginSettings, Secret};

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
    pub plugin_config: BTreeMap<String, PluginSettings>,
    /// Bearer tokens that are JWTs issued by someone else, checked with this key.
    pub jwt: Option<JwtConfig>,
    /// Hosts each plugin may reach over HTTP for this tenant, besides the
    /// plugin's own `outbound_hosts` (same form).
    pub outbound_hosts: BTreeMap<String, Vec<String>>,
    /// MAP federation: this tenant as a system, and the systems it connects to.
    pub federation: Option<FederationConfig>,
    /// The credentials broker (`cred/*`): providers and grants per principal.
    pub credentials: Option<super::credentials::CredentialsConfig>,
    /// The principals that may call `map/permissions/update`, whatever their
    /// participant type; empty: any `system` participant may (a claim the
    /// caller makes at `map/connect`, so name them where that matters).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub admin_principals: Vec<String>,
    /// Agent-level permission templates (MAP's `AgentPermissions`): what
    /// every agent, and agents of each role, may see, message and accept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_permissions: Option<AgentPermissionsConfig>,
    /// Public keys (`ed25519:<base64>`) this tenant's plugins must be signed by.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plugin_signers: Vec<String>,
    /// Versions of plugins this tenant keeps while others move on: plugin
    /// name → a component file or an `oci://` source (settings otherwise the plugin's own).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub plugin_versions: BTreeMap<String, String>,
}

/// `[tenants.agent_permissions]`: `default` and `roles.<role>` in the SDK's
/// `AgentPermissions` shape (`canSee`, `canMessage`, `acceptsFrom`).
/// Keys set here are the operator's: only an admin may override them on an agent.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct AgentPermissionsConfig {
    pub default: serde_json::Value,
    pub roles: BTreeMap<String, serde_json::Value>,
}

/// A tenant as a system of a federation (docs/wire/federation.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FederationConfig {
    /// This system's id as peers know it (no `:`).
    pub system_id: String,
    /// Where peers reach this gateway (`ws://…/map`), told to them at connect.
    pub endpoint: String,
    /// A routed message that has made this many hops is refused (5011).
    pub max_hops: u32,
    /// Messages held for one peer while it is unreachable, by count and bytes;
    /// beyond either, new messages are refused (5000).
    pub buffer_messages: usize,
    pub buffer_bytes: usize,
    /// A held message older than this is dropped and reported (`federation_message_expired`).
    pub buffer_ttl_secs: u64,
    /// Routes one peer may make per second (a burst of as many); beyond: 4000 with `retryAfterMs`.
    pub routes_per_second: u32,
    /// A local agent that writes to a peer may be answered by it this long
    /// after its last message there (while it stays registered), though it
    /// is not shown to it; 0: only shown agents are reachable.
    pub reply_window_secs: u64,
    /// Issuers of federated JWTs this system trusts (`map/federation/connect`
    /// with `{method: "bearer" | "jwt", token}`): the token's `aud` must name
    /// this system, its `sub` a peer's principal, and its `map:federation`
    /// hop count must be under its (and this system's) hop limit.
    pub trusted_issuers: Vec<TrustedIssuer>,
    pub peers: Vec<PeerConfig>,
}

/// An issuer of federated JWTs and the key its tokens are checked with.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TrustedIssuer {
    /// The `iss` it signs as.
    pub issuer: String,
    /// `HS256` (default), `RS256`, `ES256`, `EdDSA`, …
    pub algorithm: String,
    /// HS*: the shared secret (at least 16 bytes).
    pub secret: Secret,
    /// Others: a PEM public key file, or `jwks`.
    pub public_key_file: PathBuf,
    /// The issuer's keys fetched from its key set instead of a fixed key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks: Option<JwksConfig>,
}

impl Default for FederationConfig {
    fn default() -> Self {
        FederationConfig {
            system_id: String::new(),
            endpoint: String::new(),
            max_hops: 10,
            buffer_messages: 1000,
            buffer_bytes: 10 << 20,
            buffer_ttl_secs: 3600,
            routes_per_second: 500,
            reply_window_secs: 3600,
            trusted_issuers: Vec::new(),
            peers: Vec::new(),
        }
    }
}

/// Another system this tenant federates with.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct PeerConfig {
    pub system_id: String,
    /// Where this gateway connects to reach it (`ws://…/map` or
    /// `wss://…/map`); empty: the peer connects here, and messages to it
    /// wait for that.
    pub endpoint: String,
    /// With a `wss://` endpoint: the PEM file of the CAs the peer's
    /// certificate is checked against; empty: the system's root certificates.
    pub ca_file: PathBuf,
    /// What this gateway presents to the peer: `map/connect` and
    /// `map/federation/connect` `auth` (`{method, credential}`).
    pub auth: Option<Secret<serde_json::Value>>,
    /// The principal the peer authenticates as here (a credential of this
    /// tenant names it). Its sessions are walled: they federate, and read
    /// only what `expose` shows.
    pub principal: String,
    /// What this system shows the peer.
    pub expose: ExposeConfig,
    /// Event types of the peer's that this system subscribes to and re-emits
    /// to its own subscribers (with `system` in their data).
    pub import_events: Vec<String>,
}

/// What one peer may see and reach: agents (`none`, `tagged`, `all`) and
/// event types; nothing else leaves the tenant.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExposeConfig {
    pub agents: String,
    /// With `agents = "tagged"`: agents whose `capabilityDescriptor.tags` or
    /// `metadata.tags` hold one of these.
    pub tags: Vec<String>,
    /// Scope ids the peer may list.
    pub scopes: Vec<String>,
    /// Event types the peer may subscribe to (exact, or `prefix.*`).
    pub events: Vec<String>,
}

impl Default for ExposeConfig {
    fn default() -> Self {
        ExposeConfig { agents: "none".into(), tags: Vec::new(), scopes: Vec::new(), events: Vec::new() }
    }
}

/// How a tenant checks JWT bearer tokens: signature, expiry, audience, issuer.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct JwtConfig {
    /// HS256/384/512: the shared secret.
    pub secret: Secret,
    /// RS*/ES*/PS*/EdDSA: a PEM public key file, or `jwks`.
    pub public_key_file: PathBuf,
    /// RS*/ES*/PS*/EdDSA: the issuer's keys fetched from its key set
    /// (a JWKS URL or an OpenID Connect issuer) instead of a fixed key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks: Option<JwksConfig>,
    /// `HS256` (default; `RS256` with `jwks`), `RS256`, `ES256`, … the only algorithm accepted.
    pub algorithm: String,
    /// Required `aud`; empty: not checked.
    pub audience: String,
    /// Required `iss`; empty: not checked.
    pub issuer: String,
    /// The claim naming the principal (default `sub`).
    pub principal_claim: String,
}

/// Where an issuer's signing keys are fetched from, and how long they are
/// trusted: one of `url` and `oidc_issuer`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct JwksConfig {
    /// The JWK Set document (`https://idp.example/.well-known/jwks.json`).
    pub url: String,
    /// An OpenID Connect issuer: its discovery document
    /// (`<oidc_issuer>/.well-known/openid-configuration`) names the key set,
    /// and tokens must carry it as `iss`.
    pub oidc_issuer: String,
    /// Keys fetched longer ago than this are fetched again before use.
    pub refresh_ms: u64,
    /// A token whose `kid` is not in the set fetches it again, at most once
    /// in this long (the same bound holds for retries while the issuer is down).
    pub min_interval_ms: u64,
    /// While the issuer cannot be reached, the keys last fetched keep
    /// working until this long after that fetch; then its tokens are refused.
    pub max_stale_ms: u64,
    /// How long one fetch may take.
    pub timeout_ms: u64,
}

impl Default for JwksConfig {
    fn default() -> Self {
        JwksConfig { url: String::new(), oidc_issuer: String::new(), refresh_ms: 300_000, min_interval_ms: 10_000, max_stale_ms: 3_600_000, timeout_ms: 5000 }
    }
}

/// A configured secret: `"the-key"`, or `{ secret = "the-key", principal = "alice" }`
/// to name the principal it authenticates (default `<tenant>/<method>/<index>`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Credential {
    Secret(Secret),
    WithPrincipal {
        #[serde(alias = "key", alias = "token")]
        secret: Secret,
        principal: Option<String>,
    },
}

impl Credential {
    pub fn secret(&self) -> &str {
        match self {
            Credential::Secret(s) | Credential::WithPrincipal { secret: s, .. } => s.expose(),
        }
    }

    pub fn principal(&self) -> Option<&str> {
        match self {
            Credential::WithPrincipal { principal: Some(p), .. } => Some(p),
            _ => None,
        }
    }
}
