//! Access tokens: the ones `map/auth/refresh` issues (HS256 JWTs signed with
//! the gateway's key) and the JWTs a tenant trusts from its own issuer,
//! checked with a fixed key or with the issuer's key set (`jwks`).

use std::sync::Arc;

use anyhow::Context;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use map_config::{Config, JwtConfig};

use super::jwks::KeySet;
use map_protocol::rpc::{codes, RpcError};

/// `iss` of the tokens this gateway issues.
pub const ISSUER: &str = "map-gateway";

#[derive(Serialize, Deserialize)]
struct Issued {
    iss: String,
    sub: String,
    tenant: String,
    iat: u64,
    exp: u64,
    jti: String,
}

struct TenantKey {
    tenant: String,
    key: Key,
    algorithm: Algorithm,
    /// The `iss` its tokens must carry, if one is required.
    issuer: Option<String>,
    validation: Validation,
    principal_claim: String,
}

enum Key {
    Fixed(DecodingKey),
    Fetched(Arc<KeySet>),
}

pub struct Tokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    ttl_secs: u64,
    tenants: Vec<TenantKey>,
}

/// Three base64url parts: worth checking as a JWT.
pub fn looks_like_jwt(s: &str) -> bool {
    s.split('.').count() == 3 && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn tenant_key(tenant: &str, j: &JwtConfig) -> anyhow::Result<TenantKey> {
    let fetched = j.jwks.as_ref();
    let alg_name = match j.algorithm.as_str() {
        "" if fetched.is_some() => "RS256",
        "" => "HS256",
        name => name,
    };
    let algorithm: Algorithm = alg_name.parse().with_context(|| format!("tenant {tenant}: unknown jwt.algorithm {alg_name:?}"))?;
    let hmac = matches!(algorithm, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512);
    let key = match fetched {
        // A key set holds public keys: a shared secret never comes from one.
        Some(_) if hmac => anyhow::bail!("tenant {tenant}: jwt.jwks needs a public-key algorithm (RS256, ES256, EdDSA, …), not {alg_name}"),
        Some(k) if k.url.is_empty() == k.oidc_issuer.is_empty() => anyhow::bail!("tenant {tenant}: jwt.jwks takes one of url and oidc_issuer"),
        Some(k) => Key::Fetched(Arc::new(KeySet::new(k.clone(), algorithm))),
        None if hmac => {
            anyhow::ensure!(j.secret.expose().len() >= 16, "tenant {tenant}: jwt.secret must be at least 16 bytes");
            Key::Fixed(DecodingKey::from_secret(j.secret.expose().as_bytes()))
        }
        None => Key::Fixed(pem_key(tenant, j, algorithm)?),
    };
    let mut validation = Validation::new(algorithm);
    validation.leeway = 30;
    if j.audience.is_empty() {
        validation.validate_aud = false;
    } else {
        validation.set_audience(&[&j.audience]);
    }
    // An OpenID Connect issuer's tokens carry it as `iss`.
    let issuer = Some(j.issuer.clone()).filter(|i| !i.is_empty()).or_else(|| fetched.map(|k| k.oidc_issuer.clone()).filter(|i| !i.is_empty()));
    if let Some(issuer) = &issuer {
        validation.set_issuer(&[issuer]);
    }
    let principal_claim = if j.principal_claim.is_empty() { "sub".into() } else { j.principal_claim.clone() };
    Ok(TenantKey { tenant: tenant.to_string(), key, algorithm, issuer, validation, principal_claim })
}

fn pem_key(tenant: &str, j: &JwtConfig, algorithm: Algorithm) -> anyhow::Result<DecodingKey> {
    let pem = std::fs::read(&j.public_key_file).with_context(|| format!("tenant {tenant}: reading jwt.public_key_file {}", j.public_key_file.display()))?;
    Ok(match algorithm {
        Algorithm::RS256 | Algorithm::RS384 | Algorithm::RS512 | Algorithm::PS256 | Algorithm::PS384 | Algorithm::PS512 => DecodingKey::from_rsa_pem(&pem)?,
        Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(&pem)?,
        _ => DecodingKey::from_ed_pem(&pem)?,
    })
}

fn rejected(e: jsonwebtoken::errors::Error) -> RpcError {
    match e.kind() {
        jsonwebtoken::errors::ErrorKind::ExpiredSignature => RpcError::new(codes::TOKEN_EXPIRED, "Token expired"),
        _ => RpcError::new(codes::AUTH_FAILED, "Invalid credential"),
    }
}

/// A validated token's `exp` (seconds, required by the validation) in Unix ms.
fn exp_ms(claims: &serde_json::Map<String, Value>) -> u64 {
    claims.get("exp").and_then(Value::as_f64).map_or(0, |s| (s * 1000.0) as u64)
}

impl Tokens {
    pub fn from_config(config: &Config) -> anyhow::Result<Tokens> {
        let secret = if config.auth.token_secret.is_empty() {
            map_protocol::ids::secret().into_bytes()
        } else {
            anyhow::ensure!(config.auth.token_secret.expose().len() >= 16, "auth.token_secret must be at least 16 bytes");
            config.auth.token_secret.expose().clone().into_bytes()
        };
        let mut tenants: Vec<TenantKey> = config.tenants.iter().filter_map(|t| t.jwt.as_ref().map(|j| tenant_key(&t.id, j))).collect::<anyhow::Result<_>>()?;
        // Issuers of federated tokens: for this system (`aud`), as `sub`.
        for t in &config.tenants {
            let Some(f) = &t.federation else { continue };
            for i in &f.trusted_issuers {
                let j = JwtConfig {
                    secret: i.secret.clone(),
                    public_key_file: i.public_key_file.clone(),
                    jwks: i.jwks.clone(),
                    algorithm: i.algorithm.clone(),
                    audience: f.system_id.clone(),
                    issuer: i.issuer.clone(),
                    principal_claim: "sub".into(),
                };
                tenants.push(tenant_key(&t.id, &j).with_context(|| format!("federation.trusted_issuers {}", i.issuer))?);
            }
        }
        Ok(Tokens {
            encoding: EncodingKey::from_secret(&secret),
            decoding: DecodingKey::from_secret(&secret),
            ttl_secs: config.auth.token_ttl_secs.max(1),
            tenants,
        })
    }

    /// A fresh access token for a principal: `(token, expiresAt in ms)`.
    pub fn issue(&self, tenant: &str, principal: &str) -> (String, u64) {
        let now = map_protocol::ids::now_ms() / 1000;
        let claims =
            Issued { iss: ISSUER.into(), sub: principal.into(), tenant: tenant.into(), iat: now, exp: now + self.ttl_secs, jti: map_protocol::ids::secret() };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding).expect("HS256 signing does not fail");
        (token, claims.exp * 1000)
    }

    /// The tenant and principal a JWT names, and its `exp` in Unix ms, once
    /// its signature, expiry, audience and issuer hold.
    pub fn verify<T>(&self, token: &str, tenant_by_id: impl Fn(&str) -> Option<Arc<T>>) -> Result<(Arc<T>, String, u64), RpcError> {
        let mut own = Validation::new(Algorithm::HS256);
        own.set_issuer(&[ISSUER]);
        own.validate_aud = false;
        match jsonwebtoken::decode::<Issued>(token, &self.decoding, &own) {
            Ok(data) => {
                let tenant = tenant_by_id(&data.claims.tenant).ok_or_else(|| RpcError::new(codes::AUTH_FAILED, "Invalid credential"))?;
                return Ok((tenant, data.claims.sub, data.claims.exp * 1000));
            }
            Err(e) if matches!(e.kind(), jsonwebtoken::errors::ErrorKind::ExpiredSignature) => return Err(rejected(e)),
            Err(_) => {}
        }
        let mut last = RpcError::new(codes::AUTH_FAILED, "Invalid credential");
        let Ok(header) = jsonwebtoken::decode_header(token) else { return Err(last) };
        let issuer = unverified_issuer(token);
        for k in &self.tenants {
            // A token of another algorithm or issuer is not this key's: no fetch for it.
            if header.alg != k.algorithm || k.issuer.as_ref().is_some_and(|i| issuer.as_deref() != Some(i)) {
                continue;
            }
            let keys = match &k.key {
                Key::Fixed(key) => vec![key.clone()],
                Key::Fetched(set) => match set.keys_for(header.kid.as_deref()) {
                    Ok(keys) => keys,
                    Err(why) => {
                        last = RpcError::new(codes::AUTH_FAILED, format!("The token cannot be checked: {why}"));
                        continue;
                    }
                },
            };
            for key in &keys {
                match jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, key, &k.validation) {
                    Ok(data) => {
                        let principal = data.claims.get(&k.principal_claim).and_then(Value::as_str).filter(|p| !p.is_empty());
                        let principal =
                            principal.ok_or_else(|| RpcError::new(codes::AUTH_FAILED, format!("The token has no {:?} claim", k.principal_claim)))?;
                        let tenant = tenant_by_id(&k.tenant).ok_or_else(|| RpcError::new(codes::AUTH_FAILED, "Invalid credential"))?;
                        return Ok((tenant, principal.to_string(), exp_ms(&data.claims)));
                    }
                    Err(e) => {
                        if matches!(e.kind(), jsonwebtoken::errors::ErrorKind::ExpiredSignature) {
                            last = rejected(e);
                        }
                    }
                }
            }
        }
        Err(last)
    }
}

/// The `iss` a token claims, read before its signature is checked (to pick
/// the key that checks it).
fn unverified_issuer(token: &str) -> Option<String> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?;
    serde_json::from_slice::<Value>(&bytes).ok()?.get("iss")?.as_str().map(str::to_string)
}
