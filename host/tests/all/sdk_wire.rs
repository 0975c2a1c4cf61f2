//! What the MAP SDK's clients and its conformance suite read on the wire:
//! event types spelled as the subscription's filter names them (live,
//! replayed on subscribe, and in `map/replay`), pausing and resuming a
//! subscription, suspend then resume, a taken participant id, the message
//! in `message_delivered`, unsubscribing after `map/disconnect`, and a
//! scope's `parentId`; agents' capability descriptors and environments,
//! and finding agents by them.

use crate::common;

use common::*;
use serde_json::{json, Value};

/// The `map/event` params of one subscription among `frames`.
fn events_of<'a>(frames: &'a [Value], sub: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["method"] == "map/event" && f["params"]["subscriptionId"] == sub).map(|f| &f["params"]).collect()
}

/// Subscribe with this filter; returns the subscription id.
async fn subscribe(ws: &mut Ws, filter: Value) -> String {
    ws.call_ok("map/subscribe", json!({"filter": filter})).await["subscriptionId"].as_str().expect("subscriptionId").to_string()
}

/// Notifications until one of subscription `sub` satisfies `pred`; all of them, that one last.
async fn until_event(ws: &mut Ws, sub: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    let (hit, mut seen) = ws.notification_where(WAIT, |f| f["method"] == "map/event" && f["params"]["subscriptionId"] == sub && pred(&f["params"])).await;
    seen.push(hit.unwrap_or_else(|| panic!("{what}: not among {seen:?}")));
    seen
}

#[tokio::test]
async fn event_types_are_spelled_as_the_subscription_names_them() {
    let gw = Gateway::start();
    let (mut watcher, _) = gw.ws_connected("client", None).await;
    let dotted = subscribe(&mut watcher, json!({"eventTypes": ["agent.registered", "session.connected", "scope.created"]})).await;
    let snake = subscribe(&mut watcher, json!({"eventTypes": ["agent_registered", "participant_connected"]})).await;
    let wildcard = subscribe(&mut watcher, json!({"eventTypes": ["agent.*", "session.*"]})).await;
    let everything = subscribe(&mut watcher, json!({})).await;

    let (mut agent, hello) = gw.ws_connected("agent", None).await;
    let participant = hello["participantId"].as_str().unwrap().to_string();
    agent.call_ok("map/agents/register", json!({"agentId": "speller", "scopes": ["spelling-room"]})).await;
    agent.call_ok("map/agents/update", json!({"agentId": "speller", "state": "busy"})).await;
    let mut frames = until_event(&mut watcher, &everything, "the state change, last of all", |p| p["event"]["type"] == "agent_state_changed").await;
    frames.extend(watcher.drain(QUIET).await);

    let types = |sub: &str| events_of(&frames, sub).iter().map(|p| p["event"]["type"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    let connected = |sub: &str| {
        events_of(&frames, sub)
            .iter()
            .filter(|p| p["event"]["data"]["participantId"] == participant.as_str())
            .map(|p| p["event"]["type"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(connected(&dotted), ["session.connected"]);
    assert_eq!(connected(&snake), ["participant_connected"]);
    assert_eq!(connected(&wildcard), ["session.connected"]);
    assert_eq!(connected(&everything), ["participant_connected"]);
    let of_agent = |sub: &str| types(sub).into_iter().filter(|t| t.starts_with("agent") || t.starts_with("scope")).collect::<Vec<_>>();
    assert_eq!(of_agent(&dotted), ["scope.created", "agent.registered"]);
    assert_eq!(of_agent(&snake), ["agent_registered"]);
    assert_eq!(of_agent(&wildcard), ["agent.registered", "agent.state.changed"]);
    assert_eq!(of_agent(&everything), ["scope_created", "agent_registered", "scope_member_joined", "agent_state_changed"]);

    // map/replay spells by its own filter; without one, as emitted.
    let replayed = |page: &Value| page["events"].as_array().unwrap().iter().map(|e| e["event"]["type"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    let page = watcher.call_ok("map/replay", json!({"filter": {"eventTypes": ["agent.registered", "scope_created"]}})).await;
    assert_eq!(replayed(&page), ["scope_created", "agent.registered"]);
    let page = watcher.call_ok("map/replay", json!({"filter": {"eventTypes": ["agent.*"]}})).await;
    assert_eq!(replayed(&page), ["agent.registered", "agent.state.changed"]);
    let page = watcher.call_ok("map/replay", json!({})).await;
    assert!(replayed(&page).contains(&"agent_registered".to_string()), "{page}");

    // A subscription that starts in the past spells the past the same way.
    let (mut late, _) = gw.ws_connected("client", None).await;
    let past = late.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["agent.registered"]}, "replayFrom": 0})).await["subscriptionId"]
        .as_str()
        .unwrap()
        .to_string();
    let seen = until_event(&mut late, &past, "the replayed registration", |p| p["event"]["data"]["agentId"] == "speller").await;
    assert_eq!(events_of(&seen, &past).last().unwrap()["event"]["type"], "agent.registered");
}

#[tokio::test]
async fn a_paused_subscription_holds_its_events_until_resumed() {
    let gw = Gateway::start();
    let (mut watcher, hello) = gw.ws_connected("client", None).await;
    assert_eq!(hello["capabilities"]["streaming"]["supportsPause"], true, "{hello}");
    let sub = subscribe(&mut watcher, json!({"eventTypes": ["agent_registered"]})).await;
    let other = subscribe(&mut watcher, json!({"eventTypes": ["agent_registered"]})).await;
    let paused = watcher.call_ok("map/subscriptions/pause", json!({"subscriptionId": sub})).await;
    assert_eq!(paused, json!({"success": true, "subscriptionId": sub, "paused": true}));

    let (mut agent, _) = gw.ws_connected("agent", None).await;
    for i in 0..3 {
        agent.call_ok("map/agents/register", json!({"agentId": format!("held-{i}")})).await;
    }
    // The other subscription goes on; the paused one sends nothing.
    until_event(&mut watcher, &other, "the third registration on the running subscription", |p| p["event"]["data"]["agentId"] == "held-2").await;
    assert!(events_of(&watcher.drain(QUIET).await, &sub).is_empty(), "a paused subscription sends nothing");

    let resumed = watcher.call_ok("map/subscriptions/resume", json!({"subscriptionId": sub})).await;
    assert_eq!(resumed["paused"], false);
    agent.call_ok("map/agents/register", json!({"agentId": "after"})).await;
    let seen = until_event(&mut watcher, &sub, "the registration after the resume", |p| p["event"]["data"]["agentId"] == "after").await;
    let got: Vec<(u64, &str)> =
        events_of(&seen, &sub).iter().map(|p| (p["sequenceNumber"].as_u64().unwrap(), p["event"]["data"]["agentId"].as_str().unwrap())).collect();
    assert_eq!(got, [(1, "held-0"), (2, "held-1"), (3, "held-2"), (4, "after")], "held events first, in order, numbered without a gap");

    // The SDK server's names, and their refusals.
    watcher.call_ok("map/pause", json!({"subscriptionId": sub})).await;
    agent.call_ok("map/agents/register", json!({"agentId": "late"})).await;
    assert!(events_of(&watcher.drain(QUIET).await, &sub).is_empty());
    watcher.call_ok("map/resume", json!({"subscriptionId": sub})).await;
    let seen = until_event(&mut watcher, &sub, "the event held by map/pause", |p| p["event"]["data"]["agentId"] == "late").await;
    assert_eq!(events_of(&seen, &sub).last().unwrap()["sequenceNumber"], 5);
    for method in ["map/subscriptions/pause", "map/resume"] {
        let r = watcher.call(method, json!({"subscriptionId": "sub-nope"})).await;
        assert_error(&r, &r["id"].clone(), -32602, "protocol");
        let r = watcher.call(method, json!({})).await;
        assert_error(&r, &r["id"].clone(), -32602, "protocol");
    }
    // Another session cannot pause it.
    let (mut stranger, _) = gw.ws_connected("client", None).await;
    let r = stranger.call("map/subscriptions/pause", json!({"subscriptionId": sub})).await;
    assert_eq!(err_code(&r), -32602, "{r}");
}

#[tokio::test]
async fn a_paused_subscription_past_its_buffer_loses_events_and_says_so() {
    let gw = Gateway::start_with(65536, "[limits]\noutbox_frames = 4\n");
    let (mut watcher, _) = gw.ws_connected("client", None).await;
    let sub = subscribe(&mut watcher, json!({"eventTypes": ["agent_registered"]})).await;
    watcher.call_ok("map/subscriptions/pause", json!({"subscriptionId": sub})).await;
    let (mut agent, _) = gw.ws_connected("agent", None).await;
    for i in 0..7 {
        agent.call_ok("map/agents/register", json!({"agentId": format!("burst-{i}")})).await;
    }
    watcher.call_ok("map/subscriptions/resume", json!({"subscriptionId": sub})).await;
    // The notice goes out at once if there is room, else before the next event.
    agent.call_ok("map/agents/register", json!({"agentId": "next"})).await;
    let seen = until_event(&mut watcher, &sub, "the event after the resume", |p| p["event"]["data"]["agentId"] == "next").await;
    let got = events_of(&seen, &sub);
    let numbers: Vec<u64> = got.iter().map(|p| p["sequenceNumber"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6], "{got:?}");
    let held: Vec<&str> = got[..4].iter().map(|p| p["event"]["data"]["agentId"].as_str().unwrap()).collect();
    assert_eq!(held, ["burst-0", "burst-1", "burst-2", "burst-3"], "the buffer holds four");
    let overflow = &got[4]["event"];
    assert_eq!(overflow["type"], "subscription.overflow", "{got:?}");
    assert_eq!(overflow["data"]["eventsDropped"], 3);
    // The lost ones are named, and map/replay fills the gap.
    let page = watcher.call_ok("map/replay", json!({"filter": {"eventTypes": ["agent_registered"]}})).await;
    let ids: Vec<(&str, &str)> =
        page["events"].as_array().unwrap().iter().map(|e| (e["eventId"].as_str().unwrap(), e["event"]["data"]["agentId"].as_str().unwrap())).collect();
    let id_of = |agent: &str| ids.iter().find(|(_, a)| *a == agent).unwrap().0;
    assert_eq!(overflow["data"]["oldestDropped"], id_of("burst-4"));
    assert_eq!(overflow["data"]["newestDropped"], id_of("burst-6"));
}

#[tokio::test]
async fn resume_restores_the_state_before_suspend_and_registered_comes_back_idle() {
    let gw = Gateway::start();
    let (mut agent, _) = gw.ws_connected("agent", None).await;
    agent.call_ok("map/agents/register", json!({"agentId": "fresh"})).await;
    agent.call_ok("map/agents/register", json!({"agentId": "worker"})).await;
    agent.call_ok("map/agents/update", json!({"agentId": "worker", "state": "busy"})).await;
    let (mut controller, _) = gw.ws_connected("client", None).await;
    for (id, before, after) in [("fresh", "registered", "idle"), ("worker", "busy", "busy")] {
        let got = controller.call_ok("map/agents/get", json!({"agentId": id})).await;
        assert_eq!(got["agent"]["state"], before);
        let suspended = controller.call_ok("map/agents/suspend", json!({"agentId": id})).await;
        assert_eq!(suspended["agent"]["state"], "suspended");
        let resumed = controller.call_ok("map/agents/resume", json!({"agentId": id})).await;
        assert_eq!(resumed["agent"]["state"], after, "{id}");
        let stopped = controller.call_ok("map/agents/stop", json!({"agentId": id})).await;
        assert_eq!(stopped["agent"]["state"], "stopped");
    }
}

#[tokio::test]
async fn a_participant_id_in_use_already_exists() {
    let gw = Gateway::start();
    let mut first = gw.ws().await;
    first.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent", "participantId": "fixed-id"})).await;
    first.call_ok("map/agents/register", json!({"agentId": "fixed-id"})).await;
    let mut second = gw.ws().await;
    let r = second.call("map/connect", json!({"protocolVersion": 1, "participantType": "agent", "participantId": "fixed-id"})).await;
    assert_error(&r, &r["id"].clone(), 3000, "agent");
    assert!(err(&r)["message"].as_str().unwrap().contains("already exists"), "{r}");
    // Connected under another id, registering the same agent id says so too.
    second.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent"})).await;
    let r = second.call("map/agents/register", json!({"agentId": "fixed-id"})).await;
    assert_error(&r, &r["id"].clone(), 3000, "agent");
    assert!(err(&r)["message"].as_str().unwrap().contains("already exists"), "{r}");
}

#[tokio::test]
async fn message_delivered_carries_the_message() {
    // The SDK's ACP stream reads an agent's answers from `message_delivered`.
    let gw = Gateway::start();
    let (mut watcher, _) = gw.ws_connected("client", None).await;
    let sub = subscribe(&mut watcher, json!({"eventTypes": ["message_delivered"]})).await;
    let (mut agent, _) = gw.ws_connected("agent", None).await;
    agent.call_ok("map/agents/register", json!({"agentId": "answerer"})).await;
    let (mut client, hello) = gw.ws_connected("client", None).await;
    let client_id = hello["participantId"].as_str().unwrap().to_string();
    let payload = json!({"acp": {"jsonrpc": "2.0", "id": 1, "result": {"ok": true}}, "nested": [1, null, "x"]});
    let sent =
        agent.call_ok("map/send", json!({"to": {"participant": client_id}, "payload": payload, "meta": {"correlationId": "corr-1", "protocol": "acp"}})).await;
    let frames = until_event(&mut watcher, &sub, "message_delivered", |p| p["event"]["data"]["messageId"] == sent["messageId"]).await;
    let data = &frames.last().unwrap()["params"]["event"]["data"];
    assert_eq!(data["from"], "answerer");
    assert_eq!(data["delivered"], json!([client_id]));
    assert_eq!(data["deliveredTo"], json!([client_id]));
    assert_eq!(data["correlationId"], "corr-1");
    assert_eq!(data["payload"], payload);
    assert!(data["timestamp"].as_u64().is_some(), "{data}");
    let message = &data["message"];
    assert_eq!(message["id"], sent["messageId"]);
    assert_eq!(message["payload"], payload);
    assert_eq!(message["meta"]["correlationId"], "corr-1");
    // What the recipient got is the same message.
    let (got, _) = client.notification_where(WAIT, |f| f["method"] == "map/message").await;
    assert_eq!(&got.expect("the message")["params"]["message"], message);
}

#[tokio::test]
async fn a_subscription_can_be_ended_after_the_goodbye() {
    // The SDK's clients close their streams (and unsubscribe) after map/disconnect.
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let sub = subscribe(&mut ws, json!({})).await;
    let bye = ws.call_ok("map/disconnect", json!({})).await;
    let token = bye["resumeToken"].as_str().unwrap().to_string();
    let answer = ws.call_ok("map/unsubscribe", json!({"subscriptionId": sub})).await;
    assert_eq!(answer["unsubscribed"], true);
    // Other methods still need a session.
    let refused = ws.call("map/agents/list", json!({})).await;
    assert_eq!(refused["error"]["code"], 1000, "{refused}");
    // Resumed, the session no longer has it.
    let resumed = ws.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": token})).await;
    assert_eq!(resumed["reconnected"], true, "{resumed}");
    let again = ws.call("map/unsubscribe", json!({"subscriptionId": sub})).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
}

#[tokio::test]
async fn a_scope_takes_its_parent_as_parent_or_parent_id() {
    let gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let root = ws.call_ok("map/scopes/create", json!({"name": "root"})).await;
    let root_id = root["scope"]["id"].as_str().unwrap().to_string();
    for field in ["parent", "parentId"] {
        let child = ws.call_ok("map/scopes/create", json!({"name": format!("by-{field}"), field: root_id})).await;
        let got = ws.call_ok("map/scopes/get", json!({"scopeId": child["scope"]["id"]})).await;
        assert_eq!(got["scope"]["parent"], root_id.as_str(), "{field}: {got}");
    }
}

/// The ids `map/agents/list` answers with these params, sorted.
async fn ids_listed(ws: &mut Ws, params: Value) -> Vec<String> {
    let mut ids: Vec<String> =
        ws.call_ok("map/agents/list", params).await["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn agents_keep_their_descriptor_and_environment_and_are_found_by_them() {
    let gw = Gateway::start();
    let (mut owner, _) = gw.ws_connected("agent", None).await;
    let reviewer = json!({
        "id": "urn:example:cap:review",
        "capabilities": [{"id": "code:review"}, {"id": "doc:summarize"}],
        "accepts": [{"contentType": "text/x-diff"}],
        "tags": ["review", "rust"],
    });
    let env = json!({"hosting": {"provider": "local"}, "resources": {"cpu": 2}});
    let r = owner.call_ok("map/agents/register", json!({"agentId": "reviewer", "capabilityDescriptor": reviewer, "environment": env})).await;
    assert_eq!(r["agent"]["capabilityDescriptor"], reviewer);
    assert_eq!(r["agent"]["environment"], env);
    owner.call_ok("map/agents/register", json!({"agentId": "writer", "capabilityDescriptor": {"capabilities": [{"id": "doc:write"}], "tags": ["rust"], "accepts": [{"contentType": "text/plain"}]}})).await;
    owner.call_ok("map/agents/register", json!({"agentId": "plain"})).await;

    let got = owner.call_ok("map/agents/get", json!({"agentId": "reviewer"})).await;
    assert_eq!(got["agent"]["capabilityDescriptor"], reviewer);
    assert_eq!(got["agent"]["environment"], env);

    let (mut client, _) = gw.ws_connected("client", None).await;
    assert_eq!(ids_listed(&mut client, json!({"filter": {"capabilityId": "doc:summarize"}})).await, ["reviewer"]);
    assert_eq!(ids_listed(&mut client, json!({"filter": {"tags": ["rust"]}})).await, ["reviewer", "writer"]);
    assert_eq!(ids_listed(&mut client, json!({"filter": {"tags": ["rust", "review"]}})).await, ["reviewer"], "every tag given");
    assert_eq!(ids_listed(&mut client, json!({"filter": {"accepts": "text/plain"}})).await, ["writer"]);
    assert_eq!(ids_listed(&mut client, json!({"capabilityId": "code:review"})).await, ["reviewer"], "the flat form");
    assert!(ids_listed(&mut client, json!({"filter": {"capabilityId": "none:such"}})).await.is_empty());
    assert_eq!(ids_listed(&mut client, json!({})).await, ["plain", "reviewer", "writer"]);

    // An update replaces the environment and descriptor; both must be objects.
    let updated =
        owner.call_ok("map/agents/update", json!({"agentId": "plain", "environment": {"region": "eu"}, "capabilityDescriptor": {"tags": ["new"]}})).await;
    assert_eq!(updated["agent"]["environment"], json!({"region": "eu"}));
    assert_eq!(ids_listed(&mut client, json!({"filter": {"tags": ["new"]}})).await, ["plain"]);
    let bad = owner.call("map/agents/register", json!({"agentId": "bad", "capabilityDescriptor": "reviewer"})).await;
    assert_eq!(err_code(&bad), -32602, "{bad}");
}
