//! A peer's gateway session here: `map/federation/connect` and
//! `map/federation/route`, in every form the specification and the SDK use.

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::replies::Registration;
use super::{tokens, Peer, System};
use map_core::send::{Outgoing, Remote, Sent};
use map_core::Active;
use map_protocol::rpc::{codes, RpcError};

/// A challenge is good for this long (milliseconds).
const CHALLENGE_TTL_MS: u64 = 5 * 60 * 1000;
/// A routed message keeps its id here; a longer one is refused.
const MAX_MESSAGE_ID: usize = 256;

fn gateway_only(active: &Active, method: &str) -> Result<(), RpcError> {
    match active.participant_type.as_str() {
        "gateway" | "system" => Ok(()),
        other => Err(RpcError::new(codes::PERMISSION_DENIED, format!("{method} is for gateway and system participants, not {other}"))),
    }
}

fn text<'a>(params: &'a Value, key: &str) -> Option<&'a str> {
    params.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// `map_chal_` and a ULID: its first ten characters are its time.
fn challenge() -> String {
    format!("map_chal_{}", map_protocol::ids::ulid())
}

fn challenge_ok(c: &str) -> bool {
    let Some(ulid) = c.strip_prefix("map_chal_").filter(|u| u.len() == 26) else { return false };
    let at = ulid[..10].bytes().try_fold(0u64, |acc, b| {
        let v = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".iter().position(|x| *x == b.to_ascii_uppercase())? as u64;
        Some(acc * 32 + v)
    });
    at.is_some_and(|at| at <= map_protocol::ids::now_ms() && map_protocol::ids::now_ms() - at <= CHALLENGE_TTL_MS)
}

/// The credential of an `auth` object: `credentials`, `credential` or `token`.
fn credential(auth: &Value) -> Option<&str> {
    ["credentials", "credential", "token"].iter().find_map(|k| auth.get(*k).and_then(Value::as_str))
}

/// `map/federation/connect`: the calling gateway is the peer `systemId`;
/// it is connected once it has authenticated as a principal of this tenant
/// (the one the peer's configuration names, if any).
pub fn connect(system: &System, active: &Active, params: Value) -> Result<Value, RpcError> {
    gateway_only(active, "map/federation/connect")?;
    let (Some(system_id), Some(endpoint)) = (text(&params, "systemId"), text(&params, "endpoint")) else {
        return Err(RpcError::invalid_params("systemId and endpoint are required"));
    };
    let peer = system.peer(system_id)?.clone();
    let gateway = system.gateway.upgrade().ok_or_else(|| RpcError::new(codes::FEDERATION_UNAVAILABLE, "the gateway is stopping"))?;
    let required = |why: Option<String>| {
        let mut answer = json!({"connected": false, "status": "disconnected",
            "authRequired": {"methods": gateway.tenants.offered_methods(), "challenge": challenge(), "required": true}});
        if let Some(why) = why {
            answer["error"] = json!({"code": codes::FEDERATION_AUTH_FAILED, "message": why});
        }
        Ok(answer)
    };
    let auth = params.get("auth").or_else(|| params.get("credentials")).filter(|a| a.is_object());
    let Some(auth) = auth else { return required(None) };
    if let Some(c) = params.pointer("/authContext/challenge").and_then(Value::as_str) {
        if !challenge_ok(c) {
            return required(Some("the challenge is not one of this system's, or is older than 5 minutes".into()));
        }
    }
    let method = auth.get("method").and_then(Value::as_str).unwrap_or_default();
    let secret = credential(auth);
    let principal = match gateway.tenants.authenticate(if method == "jwt" { "bearer" } else { method }, secret) {
        Ok(who) if Arc::ptr_eq(&who.tenant, &active.tenant) => who.principal,
        Ok(_) => return required(Some(format!("those credentials do not identify system {system_id} here"))),
        Err(e) => return required(Some(e.message)),
    };
    // A federated token also carries its hop count.
    if let Some(why) = secret.filter(|_| matches!(method, "bearer" | "jwt")).and_then(|t| tokens::hop_refusal(t, u64::from(system.config.max_hops))) {
        return required(Some(why));
    }
    if *principal != *peer.config.principal {
        return required(Some(format!("those credentials do not identify system {system_id} here")));
    }
    *peer.inbound.lock() = Some(active.session_id.clone());
    let now = map_protocol::ids::now_ms();
    system.emit("federation_connected", json!({"systemId": system_id, "direction": "inbound", "endpoint": endpoint, "principal": &*principal}));
    Ok(json!({
        "connected": true,
        "sessionId": active.session_id,
        "principal": {"id": &*principal},
        "systemInfo": {"name": system.config.system_id, "version": env!("CARGO_PKG_VERSION"), "endpoint": system.config.endpoint,
                       "capabilities": {"federation": {"canFederate": true, "maxHops": system.config.max_hops}}},
        "peer": {"systemId": system_id, "endpoint": endpoint, "status": "connected", "connectedAt": now, "lastActivity": now},
    }))
}

/// The message and its routing, from any of the three request shapes.
struct Routed {
    message: Value,
    source: Option<String>,
    target: String,
    hops: u64,
    max_hops: u64,
    path: Vec<String>,
}

fn parse_route(system: &System, params: &Value) -> Result<Routed, RpcError> {
    let system_id = text(params, "systemId").ok_or_else(|| RpcError::invalid_params("systemId is required"))?.to_string();
    let default_max = u64::from(system.config.max_hops);
    if let Some(envelope) = params.get("envelope") {
        let f = envelope.get("federation").ok_or_else(|| RpcError::invalid_params("envelope.federation is required"))?;
        let (Some(source), Some(target), Some(hops)) = (text(f, "sourceSystem"), text(f, "targetSystem"), f.get("hopCount").and_then(Value::as_u64)) else {
            return Err(RpcError::invalid_params("envelope.federation needs sourceSystem, targetSystem and a numeric hopCount"));
        };
        let path = f.get("path").and_then(Value::as_array).map(|p| p.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default();
        // The envelope may lower the limit, not raise it.
        let max_hops = f.get("maxHops").and_then(Value::as_u64).map_or(default_max, |m| m.min(default_max));
        let message = envelope.get("payload").cloned().ok_or_else(|| RpcError::invalid_params("envelope.payload (the message) is required"))?;
        return Ok(Routed { message, source: Some(source.into()), target: target.into(), hops, max_hops, path });
    }
    let (message, max_hops) = match (params.get("message"), params.get("payload")) {
        (Some(m), _) => (m.clone(), default_max),
        (None, Some(p)) => (p.clone(), params.get("maxHops").and_then(Value::as_u64).map_or(default_max, |m| m.min(default_max))),
        (None, None) => return Err(RpcError::invalid_params("one of envelope, message or payload is required")),
    };
    Ok(Routed { message, source: None, target: system_id, hops: 0, max_hops, path: Vec::new() })
}

/// The peer this session speaks for, if it connected as one.
fn peer_of<'a>(system: &'a System, active: &Active) -> Option<&'a Arc<Peer>> {
    system.peers.values().find(|p| p.inbound.lock().as_deref() == Some(active.session_id.as_str()))
}

/// `map/federation/route`: deliver to an agent of this system, or carry on
/// to the next system; loops and spoofed origins are refused.
pub async fn route(system: &Arc<System>, active: &Active, params: Value) -> Result<Value, RpcError> {
    gateway_only(active, "map/federation/route")?;
    let r = parse_route(system, &params)?;
    let own = system.config.system_id.as_str();
    if r.hops >= r.max_hops {
        return Err(RpcError::new(codes::FEDERATION_MAX_HOPS, format!("The message has made {} hops, the most allowed is {}", r.hops, r.max_hops)));
    }
    if r.path.iter().any(|p| p == own) || r.source.as_deref() == Some(own) && r.target != own {
        return Err(RpcError::new(codes::FEDERATION_LOOP, format!("The message has passed through system {own} already")));
    }
    // Only a session that connected as a peer routes, as that peer.
    let Some(peer) = peer_of(system, active) else {
        return Err(RpcError::new(codes::FEDERATION_AUTH_FAILED, "This session has not connected as a system: call map/federation/connect first"));
    };
    throttle(peer, system.config.routes_per_second)?;
    if r.target == peer.config.system_id {
        return Err(RpcError::new(codes::FEDERATION_LOOP, format!("System {} routed a message to itself through {own}", peer.config.system_id)));
    }
    // A session may speak for the peer it connected as, not for another one.
    if let Some(source) = r.source.as_deref().filter(|s| *s != peer.config.system_id && system.peers.contains_key(*s)) {
        return Err(RpcError::new(codes::FEDERATION_ROUTE_REJECTED, format!("This session speaks for system {}, not {source}", peer.config.system_id)));
    }
    let message_id = match r.message.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
        Some(id) if id.len() > MAX_MESSAGE_ID => return Err(RpcError::invalid_params(format!("a message id is at most {MAX_MESSAGE_ID} bytes"))),
        Some(id) => id.to_string(),
        None => map_protocol::ids::prefixed_at("msg").0,
    };
    if r.target == own {
        return deliver(system, active, peer, &r, message_id).await;
    }
    // On to the next system: its own hop, this system on the path.
    let next = system.peer(&r.target)?.clone();
    let mut path = r.path.clone();
    path.push(own.to_string());
    // The message goes on under the id it has here.
    let mut message = r.message;
    if let Some(m) = message.as_object_mut() {
        m.insert("id".into(), json!(message_id));
    }
    let envelope = json!({"payload": message, "federation": {
        "sourceSystem": r.source.clone().unwrap_or_else(|| peer.config.system_id.clone()),
        "targetSystem": r.target, "hopCount": r.hops + 1, "maxHops": r.max_hops, "path": path, "originTimestamp": map_protocol::ids::now_ms(),
    }});
    let answer = system.carry(&next, message_id.clone(), envelope).await?;
    Ok(json!({"routed": answer["routed"] == true, "messageId": message_id, "queued": answer["queued"] == true}))
}

/// Hand a routed message to the agent it names, if this system exposes that
/// agent to the peer; the sender shows as `<system>:agent:<id>`.
async fn deliver(system: &System, active: &Active, peer: &Arc<Peer>, r: &Routed, message_id: String) -> Result<Value, RpcError> {
    let to = &r.message["to"];
    let agent = to.get("agent").and_then(Value::as_str).or_else(|| to.as_str().map(|s| s.strip_prefix("agent:").unwrap_or(s))).unwrap_or_default();
    let agent = agent.strip_prefix(&format!("{}:agent:", system.config.system_id)).unwrap_or(agent).to_string();
    let source = r.source.clone().unwrap_or_else(|| peer.config.system_id.clone());
    let not_here =
        || RpcError::new(codes::FEDERATION_ROUTE_REJECTED, format!("System {} has no agent {agent:?} that it shows to {source}", system.config.system_id));
    if !reachable(active, peer, &agent, &source).await {
        return Err(not_here());
    }
    if peer.seen.lock().contains(&message_id) {
        return Ok(json!({"routed": true, "messageId": message_id, "duplicate": true}));
    }
    let from = r.message.get("from").and_then(Value::as_str).unwrap_or("gateway");
    let remote_from = if from.contains(":agent:") { from.to_string() } else { format!("{source}:agent:{from}") };
    let to_text = serde_json::to_string(&json!({"agent": agent})).expect("JSON");
    let to_raw: Box<RawValue> = RawValue::from_string(to_text).expect("JSON");
    let payload = r.message.get("payload").map(|p| RawValue::from_string(p.to_string()).expect("JSON"));
    let meta = r.message.get("meta").and_then(Value::as_object).cloned();
    let remote = Remote { from: &remote_from, id: &message_id };
    let msg = Outgoing { to: &to_raw, payload: payload.as_deref(), meta, from: None, hops: 0, remote: Some(remote) };
    let sent = match active.tenant.send(active, msg) {
        Ok(Sent::Now(text)) => text,
        Ok(Sent::Later(later)) => later.await?,
        Err(e) if e.code == codes::ADDRESS_NOT_FOUND => return Err(not_here()),
        Err(e) => return Err(e),
    };
    peer.seen.lock().note(&message_id);
    let sent: Value = serde_json::from_str(&sent).unwrap_or(Value::Null);
    Ok(json!({"routed": true, "messageId": message_id, "delivered": sent["delivered"]}))
}

/// Whether the peer may route to `agent`: it is shown to the peer, or it
/// wrote to the peer lately (and the message comes from the peer itself,
/// not from a system behind it).
async fn reachable(active: &Active, peer: &Peer, agent: &str, source: &str) -> bool {
    let who = match active.tenant.registry.lock().agents.get(agent) {
        None => return false,
        Some(a) if peer.exposure.admits(a) => return true,
        Some(a) => Registration::of(a),
    };
    if source != peer.config.system_id {
        return false;
    }
    peer.replies.allows(&who).await.unwrap_or_else(|e| {
        tracing::warn!(peer = peer.config.system_id, agent, error = %e, "reading a reply grant failed: the route is refused");
        false
    })
}

/// A token bucket per peer: `rate` routes a second, bursts of as many.
fn throttle(peer: &Peer, rate: u32) -> Result<(), RpcError> {
    let rate = f64::from(rate);
    let mut bucket = peer.allowance.lock();
    let now = std::time::Instant::now();
    bucket.0 = (bucket.0 + now.duration_since(bucket.1).as_secs_f64() * rate).min(rate);
    bucket.1 = now;
    if bucket.0 >= 1.0 {
        bucket.0 -= 1.0;
        return Ok(());
    }
    let retry = ((1.0 - bucket.0) / rate * 1000.0).ceil() as u64;
    Err(RpcError::new(codes::RESOURCE_EXHAUSTED, format!("System {} routes more than {rate} messages a second; slow down", peer.config.system_id))
        .with_data(json!({"retryAfterMs": retry})))
}
