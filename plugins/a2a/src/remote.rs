//! Reaching external A2A agents: the peers a tenant configures, their agent
//! cards (fetched, checked as untrusted input, cached with a TTL) and the
//! JSON-RPC calls made to them. A peer's credentials stay here: they go out
//! as request headers and never into answers, events, errors or the store.

use map_plugin_sdk::http::{self, Url};
use map_plugin_sdk::store::{keys, Collection};
use map_plugin_sdk::{ids, Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::settings::Settings;

/// `to` names no configured peer and is no http(s) URL.
pub const PEER_UNKNOWN: i64 = crate::ERRORS.code(93010);
/// The deployment does not let the plugin reach that host (`outbound_hosts`).
pub const HOST_NOT_ALLOWED: i64 = crate::ERRORS.code(93011);
/// No answer: connection, timeout, or a 5xx/408/429 (worth a retry).
pub const PEER_UNREACHABLE: i64 = crate::ERRORS.code(93012);
/// The agent card is missing, malformed, or has no JSON-RPC 1.0 interface.
pub const CARD_INVALID: i64 = crate::ERRORS.code(93013);
/// The remote agent answered with a JSON-RPC error.
pub const REMOTE_ERROR: i64 = crate::ERRORS.code(93014);
/// The peer refused the request at the HTTP level (401, 403, 404…).
pub const REMOTE_REFUSED: i64 = crate::ERRORS.code(93015);
/// The peer answered something that is not a valid A2A answer.
pub const REMOTE_INVALID: i64 = crate::ERRORS.code(93016);

/// Longest URL accepted (it is part of a store key).
pub const MAX_URL: usize = 400;
const MAX_CARD_BYTES: usize = 64 << 10;
const MAX_ANSWER_BYTES: usize = 1 << 20;
const MAX_HEADERS: usize = 16;

/// Where a call goes: the peer as callers see it (its name, or the URL
/// they gave) and what is sent with every request to it.
pub struct Target {
    pub peer: String,
    pub named: bool,
    card_url: String,
    headers: Vec<(String, String)>,
    /// The keys one of which must have signed the peer's card (`cardSigners`); none: unsigned cards do.
    signers: Vec<ed25519_dalek::VerifyingKey>,
}

/// A card's facts the bridge keeps.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Card {
    pub name: String,
    /// The JSON-RPC URL of its A2A 1.0 interface.
    pub rpc: String,
    /// The interface's tenant, sent back in each request.
    pub tenant: Option<String>,
    pub fetched_ms: u64,
}

/// Cards by `<peer name, or empty>/<card URL>`: what a peer shows with its
/// credentials is not served to callers that name only its URL.
const CARDS: Collection<Card> = Collection::new("remote-cards");

fn http_url(u: &str) -> bool {
    u.len() <= MAX_URL && u.chars().all(|c| c.is_ascii_graphic()) && split(u).is_some()
}

/// The URL split for a request: scheme and authority, then the exact path
/// and query (a trailing slash kept; `/` when there is none). `None` for
/// anything but http(s), and for a `user:password@` in it.
pub fn split(u: &str) -> Option<(Url, String)> {
    let (https, rest) = match u.strip_prefix("https://") {
        Some(r) => (true, r),
        None => (false, u.strip_prefix("http://")?),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let path = if tail.is_empty() {
        "/".to_string()
    } else if tail.starts_with('?') {
        format!("/{tail}")
    } else {
        tail.to_string()
    };
    Some((Url { https, authority: authority.to_string(), path: String::new() }, path))
}

/// A card URL as given (`….json`), or the well-known card of a base URL.
fn card_url(u: &str) -> String {
    if u.split(['?', '#']).next().unwrap_or_default().ends_with(".json") {
        u.to_string()
    } else {
        format!("{}{}", u.trim_end_matches('/'), crate::CARD)
    }
}

/// `to`: a peer of the tenant's configuration, or an http(s) URL (no credentials).
pub fn target(s: &Settings, to: &str) -> Result<Target> {
    if to.starts_with("http://") || to.starts_with("https://") {
        if !http_url(to) {
            return Err(Error::invalid_params(format!("to must be an http(s) URL of at most {MAX_URL} printable characters, without user:password@")));
        }
        return Ok(Target { peer: to.to_string(), named: false, card_url: card_url(to), headers: vec![], signers: vec![] });
    }
    let Some(conf) = s.peers.get(to) else {
        return Err(Error::new(
            PEER_UNKNOWN,
            format!("no A2A peer {to:?} in this tenant's configuration (plugin_config.a2a.peers), and it is not an http(s) URL"),
        )
        .with_details(json!({"to": to})));
    };
    peer(to, conf).map_err(|why| Error::new(PEER_UNKNOWN, format!("A2A peer {to:?} is misconfigured: {why}")).with_details(json!({"to": to})))
}

/// A configured peer `{url, headers?, bearer?, cardSigners?}`; the reason names fields, never values.
fn peer(name: &str, conf: &Value) -> std::result::Result<Target, String> {
    let o = conf.as_object().ok_or("it must be a table {url, headers?, bearer?, cardSigners?}")?;
    if let Some(k) = o.keys().find(|k| !["url", "headers", "bearer", "cardSigners"].contains(&k.as_str())) {
        return Err(format!("unknown field {k:?}"));
    }
    let url = o.get("url").and_then(Value::as_str).filter(|u| http_url(u)).ok_or(format!("url must be an http(s) URL of at most {MAX_URL} characters"))?;
    let mut headers = vec![];
    if let Some(h) = o.get("headers") {
        let h = h.as_object().filter(|h| h.len() <= MAX_HEADERS).ok_or(format!("headers must be a table of at most {MAX_HEADERS} strings"))?;
        for (k, v) in h {
            let ok_name = !k.is_empty() && k.len() <= 64 && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
            if !ok_name || ["host", "content-length", "content-type"].contains(&k.to_ascii_lowercase().as_str()) {
                return Err(format!("headers may not hold {k:?}"));
            }
            let v = v
                .as_str()
                .filter(|v| v.len() <= 4096 && !v.bytes().any(|b| b.is_ascii_control()))
                .ok_or(format!("headers.{k} must be a string of one line"))?;
            headers.push((k.to_ascii_lowercase(), v.to_string()));
        }
    }
    if let Some(b) = o.get("bearer") {
        let b =
            b.as_str().filter(|b| !b.is_empty() && b.len() <= 4096 && !b.bytes().any(|c| c.is_ascii_control())).ok_or("bearer must be a string of one line")?;
        headers.retain(|(k, _)| k != "authorization");
        headers.push(("authorization".into(), format!("Bearer {b}")));
    }
    let signers = match o.get("cardSigners") {
        None => vec![],
        Some(Value::Array(l)) if l.len() <= 16 => l
            .iter()
            .map(|k| {
                k.as_str()
                    .ok_or("cardSigners must be strings")
                    .and_then(|k| crate::signing::public_key(k).map_err(|_| "cardSigners must be ed25519:<base64> public keys"))
            })
            .collect::<std::result::Result<_, _>>()?,
        Some(_) => return Err("cardSigners must be a list of at most 16 public keys".into()),
    };
    Ok(Target { peer: name.to_string(), named: true, card_url: card_url(url), headers, signers })
}

/// Why a request to a peer failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The host is not in the plugin's `outbound_hosts`.
    Denied(String),
    /// No answer, or a 5xx/408/429.
    Unreachable(String),
    /// An HTTP status that refuses the request.
    Refused(u16),
    /// A JSON-RPC error.
    Remote { code: i64, message: String, data: Value },
    /// Not an answer of the protocol.
    Invalid(String),
}

impl Failure {
    /// Whether following a task goes on after it (the next poll may work).
    pub fn transient(&self) -> bool {
        match self {
            Failure::Unreachable(_) | Failure::Invalid(_) => true,
            Failure::Remote { code, .. } => *code == -32603,
            Failure::Denied(_) | Failure::Refused(_) => false,
        }
    }

    pub fn describe(&self, peer: &str) -> String {
        match self {
            Failure::Denied(host) => format!("the gateway may not reach {host} (not in the a2a plugin's outbound_hosts)"),
            Failure::Unreachable(why) => format!("A2A peer {peer} could not be reached: {why}"),
            Failure::Refused(status) => format!("A2A peer {peer} refused the request with HTTP {status}"),
            Failure::Remote { code, message, .. } => format!("A2A peer {peer} answered with error {code}: {message}"),
            Failure::Invalid(why) => format!("A2A peer {peer} gave an invalid answer: {why}"),
        }
    }

    pub fn into_error(self, peer: &str) -> Error {
        let message = self.describe(peer);
        match self {
            Failure::Denied(host) => Error::new(HOST_NOT_ALLOWED, message).with_details(json!({"peer": peer, "host": host})),
            Failure::Unreachable(_) => Error::new(PEER_UNREACHABLE, message).with_details(json!({"peer": peer})).retryable(),
            Failure::Refused(status) => Error::new(REMOTE_REFUSED, message).with_details(json!({"peer": peer, "status": status})),
            Failure::Remote { code, message: m, data } => {
                Error::new(REMOTE_ERROR, message).with_details(json!({"peer": peer, "code": code, "message": m, "data": data}))
            }
            Failure::Invalid(_) => Error::new(REMOTE_INVALID, message).with_details(json!({"peer": peer})),
        }
    }
}

/// One HTTP request to the peer, with its headers; the body when 2xx.
fn send(t: &Target, method: &str, url: &str, body: Option<&[u8]>, max: usize) -> std::result::Result<Vec<u8>, Failure> {
    let (u, path) = split(url).ok_or_else(|| Failure::Invalid(format!("{url} is not an http(s) URL")))?;
    let mut headers: Vec<(&str, &str)> = vec![("accept", "application/json"), ("a2a-version", crate::cards::PROTOCOL_VERSION)];
    headers.extend(t.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let (status, bytes) = http::request(method, &u, &path, &headers, body.map(|b| ("application/json", b)), max).map_err(|e| {
        if e.contains("HttpRequestDenied") {
            Failure::Denied(u.authority.clone())
        } else {
            Failure::Unreachable(e.chars().take(300).collect())
        }
    })?;
    match status {
        200..=299 => Ok(bytes),
        408 | 429 | 500..=599 => Err(Failure::Unreachable(format!("HTTP {status}"))),
        _ => Err(Failure::Refused(status)),
    }
}

fn text(v: &Value, max: usize) -> Option<String> {
    v.as_str().filter(|s| s.len() <= max).map(String::from)
}

/// The facts of an untrusted card: its name and its A2A 1.0 JSON-RPC interface.
pub fn parse_card(doc: &Value, now: u64) -> std::result::Result<Card, String> {
    let o = doc.as_object().ok_or("the card is not a JSON object")?;
    let name = match o.get("name") {
        None => String::new(),
        Some(n) => text(n, 256).ok_or("name must be a string of at most 256 bytes")?,
    };
    let list = match o.get("supportedInterfaces") {
        None => &vec![],
        Some(l) => l.as_array().filter(|l| l.len() <= 32).ok_or("supportedInterfaces must be a list of at most 32")?,
    };
    for (i, v) in list.iter().enumerate() {
        let field = |k: &str, max: usize| match v.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => text(x, max).map(Some).ok_or(format!("supportedInterfaces[{i}].{k} must be a string of at most {max} bytes")),
        };
        if !v.is_object() {
            return Err(format!("supportedInterfaces[{i}] must be an object"));
        }
        let (binding, version, url, tenant) = (field("protocolBinding", 64)?, field("protocolVersion", 32)?, field("url", 2048)?, field("tenant", 128)?);
        let v1 = version.as_deref().is_some_and(|v| v == "1" || v.starts_with("1."));
        if binding.as_deref() == Some("JSONRPC") && v1 {
            let url = url.filter(|u| http_url(u)).ok_or(format!("supportedInterfaces[{i}].url must be an http(s) URL of at most {MAX_URL} characters"))?;
            return Ok(Card { name, rpc: url, tenant: tenant.filter(|t| !t.is_empty()), fetched_ms: now });
        }
    }
    Err("the card offers no JSON-RPC interface for A2A 1.0 (supportedInterfaces: protocolBinding JSONRPC, protocolVersion 1.0)".into())
}

/// The peer's card, from the cache while it is younger than `cardTtlMs`.
pub fn card(t: &Target, s: &Settings) -> Result<Card> {
    let key = keys::join(&[keys::escape(if t.named { &t.peer } else { "" }), keys::escape(&t.card_url)]);
    let now = ids::now_ms();
    if let Some(c) = CARDS.get(&key)?.filter(|c| now.saturating_sub(c.fetched_ms) < s.card_ttl_ms) {
        return Ok(c);
    }
    let bytes = send(t, "GET", &t.card_url, None, MAX_CARD_BYTES).map_err(|f| match f {
        Failure::Refused(status @ (404 | 410)) => {
            Error::new(CARD_INVALID, format!("no agent card for A2A peer {} (HTTP {status})", t.peer)).with_details(json!({"peer": t.peer, "status": status}))
        }
        f => f.into_error(&t.peer),
    })?;
    let invalid =
        |why: String| Error::new(CARD_INVALID, format!("the agent card of A2A peer {} is unusable: {why}", t.peer)).with_details(json!({"peer": t.peer}));
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(format!("not JSON ({e})")))?;
    let c = parse_card(&doc, now).map_err(invalid)?;
    if !t.signers.is_empty() {
        crate::signing::verify(&doc, &t.signers).map_err(invalid)?;
    }
    CARDS.put(&key, &c)?;
    Ok(c)
}

/// One JSON-RPC call to the card's interface: its `result`.
pub fn call(t: &Target, card: &Card, method: &str, mut params: Value) -> std::result::Result<Value, Failure> {
    if let Some(tenant) = &card.tenant {
        params["tenant"] = json!(tenant);
    }
    let id = ids::new_id("rpc");
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let bytes = send(t, "POST", &card.rpc, Some(body.as_bytes()), MAX_ANSWER_BYTES)?;
    answer(&bytes, &id)
}

/// A JSON-RPC response: the result, or the error it carries.
pub fn answer(bytes: &[u8], id: &str) -> std::result::Result<Value, Failure> {
    let mut doc: Value = serde_json::from_slice(bytes).map_err(|e| Failure::Invalid(format!("not JSON ({e})")))?;
    if !doc.is_object() || doc["jsonrpc"] != "2.0" || (doc["id"] != id && !doc["id"].is_null()) {
        return Err(Failure::Invalid("not a JSON-RPC 2.0 response to the request".into()));
    }
    if let Some(e) = doc.get("error").filter(|e| !e.is_null()) {
        let code = e["code"].as_i64().ok_or_else(|| Failure::Invalid("an error without a numeric code".into()))?;
        let message: String = e["message"].as_str().unwrap_or_default().chars().take(1024).collect();
        let data = e.get("data").filter(|d| d.to_string().len() <= 4096).cloned().unwrap_or(Value::Null);
        return Err(Failure::Remote { code, message, data });
    }
    match doc.get_mut("result").map(Value::take) {
        Some(r) if !r.is_null() => Ok(r),
        _ => Err(Failure::Invalid("a response without a result".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_keeping_the_exact_path() {
        let (u, p) = split("http://127.0.0.1:8080/secure/").unwrap();
        assert_eq!((u.https, u.authority.as_str(), u.path.as_str(), p.as_str()), (false, "127.0.0.1:8080", "", "/secure/"));
        assert_eq!(split("https://a.example").unwrap().1, "/");
        assert_eq!(split("https://a.example?x=1#f").unwrap().1, "/?x=1");
        assert!(split("ftp://a").is_none());
        assert_eq!(card_url("http://h/a/"), "http://h/a/.well-known/agent-card.json");
        assert_eq!(card_url("http://h/card.json"), "http://h/card.json");
        assert!(!http_url("http://user:pw@h/") && !http_url("http://h/a b") && http_url("http://h:1/x"));
    }

    #[test]
    fn peers_keep_credentials_out_of_their_reasons() {
        let t = peer("p", &json!({"url": "http://h/a", "bearer": "s3cret", "headers": {"X-Key": "k"}})).unwrap();
        assert_eq!(t.headers, vec![("x-key".to_string(), "k".to_string()), ("authorization".to_string(), "Bearer s3cret".to_string())]);
        assert_eq!(t.card_url, "http://h/a/.well-known/agent-card.json");
        let why = peer("p", &json!({"url": "http://h", "headers": {"x": "bad\nvalue"}})).err().unwrap();
        assert!(!why.contains("bad"), "{why}");
        assert!(peer("p", &json!({"url": "file:///x"})).is_err());
        assert!(peer("p", &json!({"url": "http://h", "token": "t"})).is_err());
        assert!(peer("p", &json!({"url": "http://h", "headers": {"host": "x"}})).is_err());
    }

    #[test]
    fn cards_need_a_json_rpc_1_0_interface() {
        let card = json!({"name": "Helper", "supportedInterfaces": [
            {"url": "http://h/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://h/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://h/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "t1"},
        ]});
        let c = parse_card(&card, 7).unwrap();
        assert_eq!((c.name.as_str(), c.rpc.as_str(), c.tenant.as_deref(), c.fetched_ms), ("Helper", "http://h/rpc", Some("t1"), 7));
        assert!(parse_card(&json!({"supportedInterfaces": [{"url": "http://h", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]}), 0)
            .unwrap_err()
            .contains("no JSON-RPC"));
        assert!(parse_card(&json!({"supportedInterfaces": "x"}), 0).is_err());
        assert!(parse_card(&json!({"name": 5}), 0).is_err());
        assert!(parse_card(&json!([1]), 0).is_err());
        assert!(parse_card(&json!({"supportedInterfaces": [{"url": "file:///x", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}), 0).is_err());
    }

    #[test]
    fn answers_are_results_or_remote_errors() {
        assert_eq!(answer(br#"{"jsonrpc":"2.0","id":"r1","result":{"task":{}}}"#, "r1").unwrap(), json!({"task": {}}));
        let e = answer(br#"{"jsonrpc":"2.0","id":"r1","error":{"code":-32001,"message":"Task not found"}}"#, "r1").unwrap_err();
        assert_eq!(e, Failure::Remote { code: -32001, message: "Task not found".into(), data: Value::Null });
        assert!(!e.transient());
        assert!(matches!(answer(b"<html>", "r1"), Err(Failure::Invalid(_))));
        assert!(matches!(answer(br#"{"jsonrpc":"2.0","id":"other","result":{}}"#, "r1"), Err(Failure::Invalid(_))));
        assert!(Failure::Unreachable("x".into()).transient());
    }
}
