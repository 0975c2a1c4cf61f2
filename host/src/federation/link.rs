//! This gateway's connection to one peer: a `gateway` participant of the
//! peer system (`map/connect`, then `map/federation/connect`, answering an
//! `authRequired` challenge once), kept up with backoff. While it is up it
//! carries the queued messages in order (`map/federation/route`), mirrors
//! the agents the peer shows this system, and re-emits the imported event
//! types.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{Peer, System};
use crate::acp::link::{self as map_client, Bounds, Link, MapError};
use map_core::events::{NewEvent, Source};
use map_protocol::rpc::{codes, RpcError};

/// Waits between attempts: doubling from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_LAST: Duration = Duration::from_secs(30);
/// One call to the peer may take this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages sent per read of the outbox.
const BATCH: u32 = 64;
/// A held message refused for want of its agent is tried again this often...
const REFUSED_RETRY: Duration = Duration::from_secs(1);
/// ...for this long after its recipient's first refusal.
const REFUSED_GRACE: Duration = Duration::from_secs(30);
/// How often the mirror of the peer's agents is read again.
const MIRROR_EVERY: Duration = Duration::from_secs(5);
/// The peer's agents' lifecycle events, which change the mirror.
const AGENT_EVENTS: [&str; 3] = ["agent_registered", "agent_unregistered", "agent_updated"];

/// Keep the link to `peer` up for as long as the system runs.
pub async fn keep(system: Weak<System>, peer: Arc<Peer>) {
    let mut wait = BACKOFF_FIRST;
    loop {
        let Some(s) = system.upgrade() else { return };
        let (max_bytes, endpoint) = (s.gateway.upgrade().map_or(1 << 20, |g| g.config.server.max_message_bytes), peer.config.endpoint.clone());
        drop(s);
        let outcome = match map_client::websocket(&endpoint, Bounds { max_frame_bytes: max_bytes, call_timeout: CALL_TIMEOUT }, peer.trust.as_ref()).await {
            Ok((link, notes)) => serve(&system, &peer, link, notes, &mut wait).await,
            Err(e) => Err(format!("{e:#}")),
        };
        let was_linked = peer.linked.swap(false, Ordering::AcqRel);
        peer.mirror.lock().clear();
        if let Some(s) = system.upgrade() {
            let why = outcome.err().unwrap_or_else(|| "the connection closed".into());
            if was_linked {
                s.emit("federation_disconnected", json!({"systemId": peer.config.system_id, "direction": "outbound", "endpoint": endpoint, "reason": why}));
            }
            tracing::info!(
                system = s.config.system_id,
                peer = peer.config.system_id,
                reason = why,
                retry_in_ms = wait.as_millis() as u64,
                "federation link down"
            );
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(BACKOFF_LAST);
    }
}

fn error_text(e: &MapError) -> String {
    e.get("message").and_then(Value::as_str).unwrap_or("no message").to_string()
}

/// Join the peer as its `gateway` participant and as system `own`; `true`
/// when the session of an earlier link was resumed (its subscriptions too).
async fn join(system: &System, peer: &Peer, link: &Link) -> Result<bool, String> {
    let own = &system.config.system_id;
    let auth = peer.config.auth.as_ref().map_or(Value::Null, |a| a.expose().clone());
    let mut connect = json!({"protocolVersion": 1, "participantType": "gateway", "name": own});
    if !auth.is_null() {
        connect["auth"] = auth.clone();
    }
    if let Some(token) = peer.resume.lock().clone() {
        connect["resumeToken"] = json!(token);
    }
    let session = link.call("map/connect", connect).await.map_err(|e| format!("map/connect: {}", error_text(&e)))?;
    *peer.resume.lock() = session["resumeToken"].as_str().map(String::from);
    let resumed = session["reconnected"] == true;
    let mut params = json!({"systemId": own, "endpoint": system.config.endpoint, "systemInfo": {"name": own, "version": env!("CARGO_PKG_VERSION")}});
    for attempt in 0..2 {
        let answer = link.call("map/federation/connect", params.clone()).await.map_err(|e| format!("map/federation/connect: {}", error_text(&e)))?;
        if answer["connected"] == true {
            return Ok(resumed);
        }
        let challenge = answer.pointer("/authRequired/challenge").cloned();
        if attempt == 1 || auth.is_null() || challenge.is_none() {
            return Err(format!(
                "system {} did not accept this system's credentials: {}",
                peer.config.system_id,
                answer.pointer("/error/message").and_then(Value::as_str).unwrap_or("authentication required")
            ));
        }
        // The second round: credentials with the peer's challenge.
        params["auth"] = json!({"method": auth["method"], "credentials": auth.get("credential").or(auth.get("credentials")).or(auth.get("token")).cloned()});
        params["authContext"] = json!({"challenge": challenge});
    }
    Err("unreachable".into())
}

/// One connection's life: join, mirror, subscribe, then carry messages and
/// events until it breaks. `Ok` only if the peer closed it.
async fn serve(system: &Weak<System>, peer: &Arc<Peer>, link: Link, mut notes: mpsc::Receiver<Value>, wait: &mut Duration) -> Result<(), String> {
    {
        let s = system.upgrade().ok_or("stopping")?;
        let resumed = join(&s, peer, &link).await?;
        // The agents' events where the peer shows them (it may not: then the
        // mirror is read again every MIRROR_EVERY), and the imported types;
        // a resumed session has its subscriptions already.
        if !resumed {
            let agents = json!({"filter": {"eventTypes": AGENT_EVENTS}});
            let _ = link.call("map/subscribe", agents).await;
        }
        if !resumed && !peer.config.import_events.is_empty() {
            let imports = json!({"filter": {"eventTypes": peer.config.import_events}});
            link.call("map/subscribe", imports).await.map_err(|e| format!("map/subscribe: {}", error_text(&e)))?;
        }
        refresh_mirror(peer, &link).await?;
        // Agents register again once a link is back: refusals count afresh.
        peer.refused.lock().clear();
        peer.linked.store(true, Ordering::Release);
        *wait = BACKOFF_FIRST;
        s.emit("federation_connected", json!({"systemId": peer.config.system_id, "direction": "outbound", "endpoint": peer.config.endpoint}));
    }
    let mut mirror_due = tokio::time::interval(MIRROR_EVERY);
    loop {
        let retry = drain(system, peer, &link).await?;
        tokio::select! {
            _ = peer.wake.notified() => {}
            _ = tokio::time::sleep(retry.unwrap_or(MIRROR_EVERY)), if retry.is_some() => {}
            _ = mirror_due.tick() => refresh_mirror(peer, &link).await?,
            note = notes.recv() => match note {
                None => return Ok(()),
                Some(n) if n["method"] == "map/event" => {
                    let event = &n["params"]["event"];
                    let kind = event["type"].as_str().unwrap_or_default();
                    if AGENT_EVENTS.contains(&kind) {
                        refresh_mirror(peer, &link).await?;
                    }
                    if imported(&peer.config.import_events, kind) {
                        let s = system.upgrade().ok_or("stopping")?;
                        reemit(&s, peer, event);
                    }
                }
                Some(_) => {}
            },
        }
    }
}

/// Send what waits for the peer, oldest first and each recipient's in
/// order. A message the peer refuses while its sender waits for the answer
/// is that sender's error. One that was held (its sender heard `queued`) and
/// is refused because its agent is not there (yet: agents register again
/// after a restart) is tried again every `REFUSED_RETRY`, holding back the
/// later ones for the same recipient only; `REFUSED_GRACE` after that
/// recipient's first refusal since the link came up, its messages are
/// dropped with `federation_message_failed`. `Some(wait)`: try again after it.
async fn drain(system: &Weak<System>, peer: &Peer, link: &Link) -> Result<Option<Duration>, String> {
    let (mut after, mut held_back) = (None::<String>, HashSet::new());
    loop {
        let batch = peer.outbox.oldest(after.as_deref(), BATCH).await.map_err(|e| format!("reading the outbox: {e}"))?;
        let Some((last, _)) = batch.last() else { break };
        after = Some(last.clone());
        let s = system.upgrade().ok_or("stopping")?;
        for (key, entry) in batch {
            let to = entry.envelope["payload"]["to"].to_string();
            if held_back.contains(&to) {
                continue;
            }
            let id = entry.envelope["payload"]["id"].as_str().unwrap_or_default().to_string();
            let answer = match attempt(&s, peer, link, &entry, &id, &to).await? {
                Attempt::Answered(answer) => answer,
                Attempt::Later => {
                    held_back.insert(to);
                    continue;
                }
            };
            peer.outbox.remove(&key).await.map_err(|e| format!("updating the outbox: {e}"))?;
            if answer.is_ok() {
                peer.refused.lock().remove(&to);
            }
            if let Some(waiter) = peer.waiting.lock().remove(&id) {
                let _ = waiter.send(answer);
            }
        }
    }
    // Only recipients still waiting keep their first refusal's time.
    peer.refused.lock().retain(|to, _| held_back.contains(to));
    Ok((!held_back.is_empty()).then_some(REFUSED_RETRY))
}

enum Attempt {
    /// The message's outcome: it leaves the outbox.
    Answered(Result<Value, RpcError>),
    /// Held back: try again later.
    Later,
}

/// One message's route to the peer (or its expiry); `recipient` keys its
/// recipient's refusals.
async fn attempt(s: &System, peer: &Peer, link: &Link, entry: &super::outbox::Entry, id: &str, recipient: &str) -> Result<Attempt, String> {
    let now = map_protocol::ids::now_ms();
    let to = &entry.envelope["payload"]["to"];
    if now.saturating_sub(entry.queued_at) > s.config.buffer_ttl_secs.saturating_mul(1000) {
        s.emit("federation_message_expired", json!({"systemId": peer.config.system_id, "messageId": id, "to": to, "queuedAt": entry.queued_at}));
        let why = format!("the message waited longer than {} s for system {}", s.config.buffer_ttl_secs, peer.config.system_id);
        return Ok(Attempt::Answered(Err(RpcError::new(codes::FEDERATION_UNAVAILABLE, why))));
    }
    let params = json!({"systemId": peer.config.system_id, "envelope": entry.envelope});
    let refusal = match link.call("map/federation/route", params).await {
        Ok(answer) => return Ok(Attempt::Answered(Ok(answer))),
        // A refusal is the message's answer; a broken link is not.
        Err(e) if e.get("code").and_then(Value::as_i64).is_some_and(|c| c != -32603) => {
            RpcError { code: e["code"].as_i64().unwrap_or(-32603), message: error_text(&e), data: e.get("data").cloned() }
        }
        Err(e) => return Err(format!("map/federation/route: {}", error_text(&e))),
    };
    let held = !peer.waiting.lock().contains_key(id);
    if held && refusal.code == codes::FEDERATION_ROUTE_REJECTED {
        let first = *peer.refused.lock().entry(recipient.to_string()).or_insert(now);
        if now.saturating_sub(first) < REFUSED_GRACE.as_millis() as u64 {
            return Ok(Attempt::Later);
        }
    }
    if held {
        s.emit(
            "federation_message_failed",
            json!({"systemId": peer.config.system_id, "messageId": id, "to": to, "code": refusal.code, "reason": refusal.message}),
        );
    }
    Ok(Attempt::Answered(Err(refusal)))
}

/// The agents the peer shows this system, listed here as `<peer>:agent:<id>`.
async fn refresh_mirror(peer: &Peer, link: &Link) -> Result<(), String> {
    let listed = link.call("map/agents/list", json!({"limit": 1000})).await.map_err(|e| format!("map/agents/list: {}", error_text(&e)))?;
    let system = &peer.config.system_id;
    let agents = listed["agents"].as_array().cloned().unwrap_or_default();
    let mirror = agents
        .into_iter()
        .filter_map(|mut a| {
            let id = a["id"].as_str()?.to_string();
            a["id"] = json!(format!("{system}:agent:{id}"));
            let mut metadata = a.get("metadata").filter(|m| m.is_object()).cloned().unwrap_or_else(|| json!({}));
            metadata["_federatedFrom"] = json!(system);
            metadata["_originalId"] = json!(id);
            a["metadata"] = metadata;
            Some(a)
        })
        .collect();
    *peer.mirror.lock() = mirror;
    Ok(())
}

fn imported(patterns: &[String], kind: &str) -> bool {
    patterns.iter().any(|p| p == kind || p.strip_suffix('*').is_some_and(|prefix| kind.starts_with(prefix)))
}

/// An event of the peer's, for this system's subscribers: its type and
/// data, with `system` naming the peer.
fn reemit(system: &System, peer: &Peer, event: &Value) {
    let Some(tenant) = system.tenant.upgrade() else { return };
    let mut data = event.get("data").filter(|d| d.is_object()).cloned().unwrap_or_else(|| json!({}));
    data["system"] = json!(peer.config.system_id);
    data["remoteEventId"] = event.get("id").cloned().unwrap_or(Value::Null);
    let kind = event["type"].as_str().unwrap_or_default().to_string();
    let source = Source { agent_id: None, participant_id: Some(format!("system:{}", peer.config.system_id)), scope_id: None };
    tenant.emit(NewEvent::new(kind, source, data));
}
