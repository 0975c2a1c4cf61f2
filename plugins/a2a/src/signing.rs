//! Agent card signatures (A2A §8.4): JWS with a detached payload, the card
//! as A2A 1.0's AgentCard message reads it, without `signatures`, without
//! empty values, canonicalized (RFC 8785). The bridge signs the cards it
//! serves with an Ed25519 key (`EdDSA`), written as `map-gateway plugin
//! keygen` writes one (`ed25519-secret:<base64 seed>`), and checks a peer's
//! card against the public keys (`ed25519:<base64>`) its config names.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The fields of each message an AgentCard holds (A2A 1.0's proto, JSON
/// names): what a ProtoJSON parser keeps of a card, and so what is signed.
const CARD: [&str; 14] = [
    "name",
    "description",
    "supportedInterfaces",
    "provider",
    "version",
    "documentationUrl",
    "capabilities",
    "securitySchemes",
    "securityRequirements",
    "defaultInputModes",
    "defaultOutputModes",
    "skills",
    "signatures",
    "iconUrl",
];
const INTERFACE: [&str; 4] = ["url", "protocolBinding", "tenant", "protocolVersion"];
const CAPABILITIES: [&str; 4] = ["streaming", "pushNotifications", "extensions", "extendedAgentCard"];
const SKILL: [&str; 8] = ["id", "name", "description", "tags", "examples", "inputModes", "outputModes", "securityRequirements"];
const PROVIDER: [&str; 2] = ["url", "organization"];
const EXTENSION: [&str; 4] = ["uri", "description", "required", "params"];

fn keep(v: &Value, fields: &[&str]) -> Value {
    Value::Object(v.as_object().into_iter().flatten().filter(|(k, _)| fields.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn each(v: &Value, fields: &[&str]) -> Value {
    json!(v.as_array().into_iter().flatten().map(|x| keep(x, fields)).collect::<Vec<_>>())
}

/// Empty strings, lists and objects, and a non-optional `false`
/// (`AgentExtension.required`), are what ProtoJSON leaves out.
fn clean(v: Value) -> Option<Value> {
    match v {
        Value::Object(o) => {
            let out: Map<String, Value> = o.into_iter().filter_map(|(k, v)| clean(v).map(|v| (k, v))).collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(a) => {
            let out: Vec<Value> = a.into_iter().filter_map(clean).collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
        Value::String(s) if s.is_empty() => None,
        Value::Null => None,
        v => Some(v),
    }
}

/// The signed payload of a card: its 1.0 fields without `signatures`, cleaned, canonical.
pub fn payload(card: &Value) -> String {
    let mut c = keep(card, &CARD);
    c.as_object_mut().map(|o| o.remove("signatures"));
    for (field, fields) in [("supportedInterfaces", &INTERFACE[..]), ("skills", &SKILL[..])] {
        if c.get(field).is_some() {
            c[field] = each(&c[field], fields);
        }
    }
    if c.get("provider").is_some() {
        c["provider"] = keep(&c["provider"], &PROVIDER);
    }
    if c.get("capabilities").is_some() {
        c["capabilities"] = keep(&c["capabilities"], &CAPABILITIES);
        if c["capabilities"].get("extensions").is_some() {
            let mut ext = each(&c["capabilities"]["extensions"], &EXTENSION);
            for e in ext.as_array_mut().into_iter().flatten().filter_map(Value::as_object_mut) {
                if e.get("required") == Some(&json!(false)) {
                    e.remove("required");
                }
            }
            c["capabilities"]["extensions"] = ext;
        }
    }
    canonical(&clean(c).unwrap_or_else(|| json!({})))
}

/// RFC 8785: keys sorted (serde_json's map is ordered by key, and card keys
/// are ASCII, where byte order is UTF-16 order), no whitespace, strings
/// escaped as ECMAScript does. Numbers are written by serde_json, which
/// agrees with RFC 8785 for the integers cards hold.
fn canonical(v: &Value) -> String {
    v.to_string()
}

fn key_id(key: &VerifyingKey) -> String {
    let digest = Sha256::digest(key.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// A secret key as `plugin keygen` writes it.
pub fn secret_key(text: &str) -> Result<SigningKey, String> {
    let b64 = text.trim().strip_prefix("ed25519-secret:").ok_or("cardSigningKey must be written ed25519-secret:<base64> (map-gateway plugin keygen)")?;
    let seed: [u8; 32] = STANDARD.decode(b64).ok().and_then(|b| b.try_into().ok()).ok_or("cardSigningKey must be 32 bytes of base64")?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A public key as `plugin keygen` writes it.
pub fn public_key(text: &str) -> Result<VerifyingKey, String> {
    let b64 = text.trim().strip_prefix("ed25519:").ok_or("a card signer must be written ed25519:<base64>")?;
    let bytes: [u8; 32] = STANDARD.decode(b64).ok().and_then(|b| b.try_into().ok()).ok_or("a card signer must be 32 bytes of base64")?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| "a card signer is not an Ed25519 public key".to_string())
}

/// The card with one more signature, by `key`.
pub fn sign(card: &Value, key: &SigningKey) -> Value {
    let header = json!({"alg": "EdDSA", "typ": "JOSE", "kid": key_id(&key.verifying_key())});
    let protected = URL_SAFE_NO_PAD.encode(header.to_string());
    let input = format!("{protected}.{}", URL_SAFE_NO_PAD.encode(payload(card)));
    let signature = URL_SAFE_NO_PAD.encode(key.sign(input.as_bytes()).to_bytes());
    let mut out = card.clone();
    let mut list = out["signatures"].as_array().cloned().unwrap_or_default();
    list.push(json!({"protected": protected, "signature": signature}));
    out["signatures"] = json!(list);
    out
}

/// Whether one of the card's `EdDSA` signatures is by one of `signers`.
pub fn verify(card: &Value, signers: &[VerifyingKey]) -> Result<(), String> {
    let list = card["signatures"].as_array().filter(|l| !l.is_empty()).ok_or("the card is not signed")?;
    let payload = URL_SAFE_NO_PAD.encode(payload(card));
    for s in list.iter().take(8) {
        let (Some(protected), Some(sig)) = (s["protected"].as_str(), s["signature"].as_str()) else { continue };
        let header: Value = URL_SAFE_NO_PAD.decode(protected).ok().and_then(|h| serde_json::from_slice(&h).ok()).unwrap_or_default();
        // The algorithm is the key's, never the header's choice.
        if header["alg"] != "EdDSA" {
            continue;
        }
        let Some(sig) = URL_SAFE_NO_PAD.decode(sig).ok().and_then(|b| Signature::from_slice(&b).ok()) else { continue };
        let input = format!("{protected}.{payload}");
        if signers.iter().any(|k| k.verify(input.as_bytes(), &sig).is_ok()) {
            return Ok(());
        }
    }
    Err("no signature of the card is by a key its peer config names".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_card_verifies_with_its_key_only_and_not_once_changed() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
        let card = json!({"name": "A", "description": "", "version": "1.0.0", "skills": [], "url": "http://0.3/only",
                          "capabilities": {"streaming": true, "extensions": [{"uri": "x", "required": false}]}});
        let signed = sign(&card, &key);
        assert!(verify(&signed, &[key.verifying_key()]).is_ok());
        assert!(verify(&signed, &[other]).is_err());
        let mut changed = signed.clone();
        changed["name"] = json!("B");
        assert!(verify(&changed, &[key.verifying_key()]).is_err());
        // Fields outside A2A 1.0's AgentCard are outside the signature.
        let mut extra = signed.clone();
        extra["url"] = json!("http://elsewhere");
        assert!(verify(&extra, &[key.verifying_key()]).is_ok());
        assert_eq!(payload(&card), r#"{"capabilities":{"extensions":[{"uri":"x"}],"streaming":true},"name":"A","version":"1.0.0"}"#);
        assert!(verify(&card, &[key.verifying_key()]).is_err());
    }
}
