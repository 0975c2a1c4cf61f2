//! Session resume over WebSocket: `map/disconnect` hands out a resume token;
//! a later `map/connect` with it gets the same session, its agents, its
//! subscriptions and whatever was sent meanwhile.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// A deadline for a one-second resume window to close and the session to
/// expire: generous, since the wait ends as soon as the event comes.
const WINDOW_CLOSED: Duration = Duration::from_secs(15);

#[tokio::test]
async fn disconnect_then_resume_on_a_new_socket_delivers_what_was_missed() {
    let gw = Gateway::start();
    let (mut first, hello) = gw.ws_connected("agent", None).await;
    let session = hello["sessionId"].as_str().unwrap().to_string();
    let participant = hello["participantId"].as_str().unwrap().to_string();
    first.call_ok("map/agents/register", json!({"agentId": "resumer"})).await;
    let sub = first.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["agent_registered"]}})).await;
    let sub_id = sub["subscriptionId"].as_str().unwrap().to_string();

    // An event before the disconnect is numbered 1.
    let (mut other, other_hello) = gw.ws_connected("client", None).await;
    other.call_ok("map/agents/register", json!({"agentId": "before-1"})).await;
    let ev = first.notification("map/event", WAIT).await.expect("event before disconnect");
    assert_eq!(ev["params"]["sequenceNumber"], 1);

    let bye = first.call_ok("map/disconnect", json!({"reason": "network change"})).await;
    assert_eq!(bye["success"], true, "{bye}");
    let token = bye["resumeToken"].as_str().expect("map/disconnect returns a resumeToken").to_string();
    assert!(!token.is_empty());
    // The old socket no longer speaks for the session.
    let resp = first.call("map/agents/list", json!({})).await;
    assert_eq!(err_code(&resp), 1000, "{resp}");
    first.close().await;

    // While disconnected the agent still exists, and a message to it is accepted.
    let got = other.call_ok("map/agents/get", json!({"agentId": "resumer"})).await;
    assert_eq!(got["agent"]["id"], "resumer");
    let sent = other.call_ok("map/send", json!({"to": {"agent": "resumer"}, "payload": {"missed": true}})).await;
    assert_eq!(sent["delivered"], json!(["resumer"]));
    other.call_ok("map/agents/register", json!({"agentId": "while-away"})).await;

    // Resume on a new socket.
    let mut second = gw.ws().await;
    let again = second.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent", "resumeToken": token})).await;
    assert_eq!(again["sessionId"], session.as_str(), "{again}");
    assert_eq!(again["participantId"], participant.as_str(), "{again}");
    assert_eq!(again["reconnected"], true, "{again}");
    assert_eq!(again["ownedAgents"], json!(["resumer"]), "{again}");
    let new_token = again["resumeToken"].as_str().expect("a fresh resumeToken");
    assert!(!new_token.is_empty());

    let note = second.notification("map/message", WAIT).await.expect("the message sent while disconnected arrives after the resume");
    let m = &note["params"]["message"];
    assert_eq!(m["id"], sent["messageId"]);
    assert_eq!(m["payload"], json!({"missed": true}));
    // `from` is the sending session's agent (its first), not its participant id.
    assert_eq!(m["from"], "before-1");
    assert_ne!(m["from"], other_hello["participantId"]);
    assert_eq!(m["to"], json!({"agent": "resumer"}));

    // The subscription came back too, without a gap in its numbering.
    let (ev, _) = second.notification_where(WAIT, |n| n["method"] == "map/event" && n["params"]["event"]["data"]["agent"]["id"] == "while-away").await;
    let ev = ev.expect("the event raised while disconnected");
    assert_eq!(ev["params"]["subscriptionId"], sub_id.as_str());
    assert_eq!(ev["params"]["sequenceNumber"], 2);

    // And the session works as before.
    let list = second.call_ok("map/agents/list", json!({"filter": {"ownerId": participant}})).await;
    assert_eq!(list["agents"].as_array().unwrap().len(), 1);
    other.call_ok("map/agents/register", json!({"agentId": "after"})).await;
    let (ev, _) = second.notification_where(WAIT, |n| n["method"] == "map/event" && n["params"]["event"]["data"]["agent"]["id"] == "after").await;
    assert_eq!(ev.expect("live event after resume")["params"]["sequenceNumber"], 3);
    let sent = other.call_ok("map/send", json!({"to": "resumer", "payload": "live"})).await;
    assert_eq!(sent["delivered"], json!(["resumer"]));
    let note = second.notification("map/message", WAIT).await.expect("live message after resume");
    assert_eq!(note["params"]["message"]["payload"], "live");
}

#[tokio::test]
async fn dropped_socket_can_be_resumed_with_the_connect_token() {
    let gw = Gateway::start();
    let (first, hello) = gw.ws_connected("agent", None).await;
    let token = hello["resumeToken"].as_str().expect("map/connect hands out a resumeToken").to_string();
    let session = hello["sessionId"].clone();
    let mut first = first;
    first.call_ok("map/agents/register", json!({"agentId": "dropped"})).await;
    let (mut other, _) = gw.ws_connected("client", None).await;
    other.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["participant_disconnected"]}})).await;
    drop(first); // no map/disconnect: the socket just goes away
                 // Once the gateway has noticed, what is sent waits for the resume.
    let (gone, _) =
        other.notification_where(WAIT, |n| n["method"] == "map/event" && n["params"]["event"]["data"]["participantId"] == hello["participantId"]).await;
    gone.expect("participant_disconnected for the dropped socket");

    let sent = other.call_ok("map/send", json!({"to": {"agent": "dropped"}, "payload": 7})).await;
    assert_eq!(sent["delivered"], json!(["dropped"]));

    let mut second = gw.ws().await;
    let again = second.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": token})).await;
    assert_eq!(again["sessionId"], session);
    assert_eq!(again["reconnected"], true);
    assert_eq!(again["ownedAgents"], json!(["dropped"]));
    let note = second.notification("map/message", WAIT).await.expect("message sent while the socket was gone");
    assert_eq!(note["params"]["message"]["payload"], 7);
}

#[tokio::test]
async fn unknown_resume_token_starts_a_fresh_session() {
    let gw = Gateway::start();
    let mut ws = gw.ws().await;
    let r = ws.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": "no-such-token"})).await;
    assert!(r["sessionId"].is_string());
    assert_ne!(r["reconnected"], true, "{r}");
    let owned_empty = r.get("ownedAgents").is_none_or(|o| o.as_array().is_some_and(|a| a.is_empty()));
    assert!(owned_empty, "{r}");
}

#[tokio::test]
async fn unregister_policy_releases_agents_on_disconnect() {
    let gw = Gateway::start();
    let mut ws = gw.ws().await;
    ws.call_ok("map/connect", json!({"protocolVersion": 1, "disconnectPolicy": {"agentBehavior": "unregister"}})).await;
    ws.call_ok("map/agents/register", json!({"agentId": "ephemeral"})).await;
    let bye = ws.call_ok("map/disconnect", json!({})).await;
    let token = bye["resumeToken"].as_str().unwrap().to_string();
    let (mut other, _) = gw.ws_connected("client", None).await;
    let resp = other.call("map/agents/get", json!({"agentId": "ephemeral"})).await;
    assert_eq!(err_code(&resp), 2001, "{resp}");
    let mut back = gw.ws().await;
    let again = back.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": token})).await;
    assert_eq!(again["reconnected"], true);
    assert_eq!(again["ownedAgents"], json!([]));
}

#[tokio::test]
async fn resume_after_the_window_closes_fails_and_agents_are_gone() {
    let gw = Gateway::start_config("resume_window_secs = 1", "");
    let (mut ws, hello) = gw.ws_connected("agent", None).await;
    ws.call_ok("map/agents/register", json!({"agentId": "short-lived"})).await;
    let (mut other, _) = gw.ws_connected("client", None).await;
    other.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["agent_unregistered"]}})).await;
    let bye = ws.call_ok("map/disconnect", json!({})).await;
    let token = bye["resumeToken"].as_str().unwrap().to_string();
    // The session expires (token first, then its agents) when the window closes.
    let (expired, _) =
        other.notification_where(WINDOW_CLOSED, |n| n["method"] == "map/event" && n["params"]["event"]["data"]["agentId"] == "short-lived").await;
    assert_eq!(expired.expect("agent_unregistered when the resume window closes")["params"]["event"]["data"]["reason"], "resume window closed");

    let resp = other.call("map/agents/get", json!({"agentId": "short-lived"})).await;
    assert_eq!(err_code(&resp), 2001, "grace period over: {resp}");
    let mut late = gw.ws().await;
    let r = late.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": token})).await;
    assert_ne!(r["sessionId"], hello["sessionId"], "{r}");
    assert_ne!(r["reconnected"], true, "{r}");
}

#[tokio::test]
async fn orphaned_agents_can_be_reclaimed() {
    let gw = Gateway::start_config("resume_window_secs = 1", "");
    let mut ws = gw.ws().await;
    ws.call_ok(
        "map/connect",
        json!({"protocolVersion": 1, "participantType": "agent", "participantId": "orphan-owner", "disconnectPolicy": {"agentBehavior": "orphan"}}),
    )
    .await;
    ws.call_ok("map/agents/register", json!({"agentId": "orphan-me"})).await;
    let (mut other, _) = gw.ws_connected("client", None).await;
    other.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["agent_orphaned"]}})).await;
    ws.call_ok("map/disconnect", json!({})).await;
    let (orphaned, _) = other.notification_where(WINDOW_CLOSED, |n| n["method"] == "map/event" && n["params"]["event"]["data"]["agentId"] == "orphan-me").await;
    let orphaned = orphaned.expect("agent_orphaned at the goodbye");
    assert_eq!(orphaned["params"]["event"]["data"]["previousOwner"], "orphan-owner", "{orphaned}");

    let got = other.call_ok("map/agents/get", json!({"agentId": "orphan-me"})).await;
    assert_eq!(got["agent"]["state"], "orphaned", "{got}");
    assert_eq!(got["agent"]["ownerId"], Value::Null, "owned by nobody: {got}");

    let mut heir = gw.ws().await;
    let hello = heir.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent", "reclaimAgents": ["orphan-me"]})).await;
    // The SDK types reclaimedAgents as Agent[].
    assert_eq!(hello["reclaimedAgents"][0]["id"], "orphan-me", "map/connect with reclaimAgents must report reclaimedAgents: {hello}");
    assert_eq!(hello["reclaimedAgents"].as_array().map(Vec::len), Some(1), "{hello}");
    let got = other.call_ok("map/agents/get", json!({"agentId": "orphan-me"})).await;
    assert_eq!(got["agent"]["ownerId"], hello["participantId"], "{got}");
    let sent = other.call_ok("map/send", json!({"to": {"agent": "orphan-me"}, "payload": "yours now"})).await;
    assert_eq!(sent["delivered"], json!(["orphan-me"]));
    let note = heir.notification("map/message", WAIT).await.expect("the reclaiming session receives the agent's messages");
    assert_eq!(note["params"]["message"]["payload"], "yours now");
}

#[tokio::test]
async fn each_resume_hands_out_a_token_for_the_next_one() {
    let gw = Gateway::start();
    let (mut ws, hello) = gw.ws_connected("agent", None).await;
    ws.call_ok("map/agents/register", json!({"agentId": "twice"})).await;
    let token1 = ws.call_ok("map/disconnect", json!({})).await["resumeToken"].as_str().unwrap().to_string();
    let mut ws2 = gw.ws().await;
    let r2 = ws2.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": token1})).await;
    assert_eq!(r2["sessionId"], hello["sessionId"]);
    let token2 = ws2.call_ok("map/disconnect", json!({})).await["resumeToken"].as_str().unwrap().to_string();
    let mut ws3 = gw.ws().await;
    let r3 = ws3.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": token2})).await;
    assert_eq!(r3["sessionId"], hello["sessionId"]);
    assert_eq!(r3["reconnected"], true);
    assert_eq!(r3["ownedAgents"], json!(["twice"]));
}
