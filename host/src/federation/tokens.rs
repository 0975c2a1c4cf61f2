//! Federated JWTs. A token from an issuer in `trusted_issuers` opens a
//! session like a tenant credential (the tenants module checks signature,
//! issuer, expiry, `aud` = this system, and takes `sub` as the principal);
//! at `map/federation/connect` its `map:federation` claim must also be
//! within the hop limit.

use jsonwebtoken::{DecodingKey, Validation};
use serde_json::Value;

/// Why a token's `map:federation` claim is refused, if it is: its hop count
/// has reached its own `maxHops` or this system's limit. Read without the
/// signature, which the authentication just before has checked.
pub fn hop_refusal(token: &str, max_hops: u64) -> Option<String> {
    let mut peek = Validation::new(jsonwebtoken::decode_header(token).ok()?.alg);
    peek.insecure_disable_signature_validation();
    peek.validate_exp = false;
    peek.validate_aud = false;
    peek.required_spec_claims.clear();
    let claims = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &DecodingKey::from_secret(&[]), &peek).ok()?.claims;
    let fed = claims.get("map:federation")?;
    let hops = fed.get("hopCount").and_then(Value::as_u64).unwrap_or(0);
    let limit = fed.get("maxHops").and_then(Value::as_u64).map_or(max_hops, |m| m.min(max_hops));
    (hops >= limit).then(|| format!("the token has made {hops} hops, the most allowed is {limit}"))
}
