//! Tenant isolation: credentials pick a tenant, and nothing crosses between tenants.

use crate::common;

use common::*;
use serde_json::{json, Value};

fn agent_ids(list: &Value) -> Vec<String> {
    list["agents"].as_array().expect("agents").iter().map(|a| a["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn credentials_pick_the_tenant() {
    let gw = Gateway::start();
    let (_acme, hello) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    assert_eq!(hello["principal"]["claims"]["tenant"], "acme", "{hello}");
    assert!(hello.get("authRequired").is_none(), "{hello}");
    // The schema's `token` is accepted like the SDK's `credential`.
    let (_globex, hello) = gw.ws_connected("agent", Some(json!({"method": "api-key", "token": "globex-key"}))).await;
    assert_eq!(hello["principal"]["claims"]["tenant"], "globex", "{hello}");
    // No credentials on loopback: the anonymous tenant.
    let (_anon, hello) = gw.ws_connected("client", None).await;
    assert_eq!(hello["principal"]["claims"]["tenant"], "default", "{hello}");
}

/// A connect answered with `authRequired` and why the credential was refused (the SDK's shape).
fn assert_refused(resp: &Value, code: &str) {
    let r = ok(resp);
    assert_eq!(r["authRequired"]["required"], true, "{r}");
    assert!(r["authRequired"]["methods"].as_array().is_some_and(|m| m.contains(&json!("api-key"))), "{r}");
    assert_eq!(r["error"]["code"], code, "{r}");
    assert!(r["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
    assert!(r.get("principal").is_none() && r.get("resumeToken").is_none(), "no session yet: {r}");
}

#[tokio::test]
async fn a_refused_credential_asks_for_auth_again_and_an_unknown_method_is_32602() {
    let gw = Gateway::start();
    let mut ws = gw.ws().await;
    let resp = ws.call("map/connect", json!({"protocolVersion": 1, "auth": {"method": "api-key", "credential": "not-a-key"}})).await;
    assert_refused(&resp, "invalid_credentials");
    // Empty credential.
    let resp = ws.call("map/connect", json!({"protocolVersion": 1, "auth": {"method": "api-key", "credential": ""}})).await;
    assert_refused(&resp, "invalid_credentials");
    // A key of one tenant presented as a bearer token is not valid.
    let resp = ws.call("map/connect", json!({"protocolVersion": 1, "auth": {"method": "bearer", "credential": "acme-key"}})).await;
    assert_refused(&resp, "invalid_credentials");
    // A method the protocol knows and this gateway does not offer.
    let resp = ws.call("map/connect", json!({"protocolVersion": 1, "auth": {"method": "mtls"}})).await;
    assert_refused(&resp, "method_not_supported");
    // Unknown auth method: invalid params.
    let resp = ws.call("map/connect", json!({"protocolVersion": 1, "auth": {"method": "kerberos", "credential": "x"}})).await;
    assert_error(&resp, &resp["id"].clone(), -32602, "protocol");
    // A failed connect leaves the connection unconnected.
    let resp = ws.call("map/agents/list", json!({})).await;
    assert_eq!(err_code(&resp), 1000, "{resp}");
    // And it can still connect properly.
    let hello = ws.call_ok("map/connect", json!({"protocolVersion": 1, "auth": api_key("acme-key")})).await;
    assert_eq!(hello["principal"]["claims"]["tenant"], "acme");
}

#[tokio::test]
async fn acme_cannot_see_or_message_globex_agents() {
    let gw = Gateway::start();
    let (mut acme, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    let (mut globex, _) = gw.ws_connected("agent", Some(api_key("globex-key"))).await;
    let (mut anon, _) = gw.ws_connected("agent", None).await;
    acme.call_ok("map/agents/register", json!({"agentId": "acme-1", "role": "worker"})).await;
    globex.call_ok("map/agents/register", json!({"agentId": "globex-1", "role": "worker"})).await;
    anon.call_ok("map/agents/register", json!({"agentId": "default-1", "role": "worker"})).await;

    assert_eq!(agent_ids(&acme.call_ok("map/agents/list", json!({})).await), ["acme-1"]);
    assert_eq!(agent_ids(&acme.call_ok("map/agents/list", json!({"filter": {"roles": ["worker"]}})).await), ["acme-1"]);
    assert_eq!(agent_ids(&globex.call_ok("map/agents/list", json!({})).await), ["globex-1"]);
    assert_eq!(agent_ids(&anon.call_ok("map/agents/list", json!({})).await), ["default-1"]);

    let resp = acme.call("map/agents/get", json!({"agentId": "globex-1"})).await;
    assert_error(&resp, &resp["id"].clone(), 2001, "routing");
    let resp = acme.call("map/send", json!({"to": {"agent": "globex-1"}, "payload": "leak?"})).await;
    assert_error(&resp, &resp["id"].clone(), 2001, "routing");
    let resp = acme.call("map/send", json!({"to": "globex-1", "payload": "leak?"})).await;
    assert_error(&resp, &resp["id"].clone(), 2001, "routing");
    let resp = acme.call("map/send", json!({"to": {"agents": ["globex-1"]}, "payload": "leak?"})).await;
    assert_error(&resp, &resp["id"].clone(), 2001, "routing");
    // Group addresses reach only the sender's tenant: acme has no other agent,
    // so each reaches no one.
    for to in [json!({"broadcast": true}), json!({"role": "worker"}), json!({"participants": "all"})] {
        let resp = acme.call_ok("map/send", json!({"to": to, "payload": "leak?"})).await;
        assert_eq!(resp["delivered"], json!([]), "{to}: {resp}");
    }
    // Acme cannot control a globex agent either.
    let resp = acme.call("map/agents/stop", json!({"agentId": "globex-1"})).await;
    assert_eq!(err_code(&resp), 2001, "{resp}");
    let resp = acme.call("map/inject", json!({"agentId": "globex-1", "content": "x"})).await;
    assert_eq!(err_code(&resp), 2001, "{resp}");
    // Scopes are per tenant too.
    globex.call_ok("map/scopes/create", json!({"scopeId": "gx-scope"})).await;
    globex.call_ok("map/scopes/join", json!({"scopeId": "gx-scope", "agentId": "globex-1"})).await;
    let scopes = acme.call_ok("map/scopes/list", json!({})).await;
    assert_eq!(scopes["scopes"], json!([]), "{scopes}");
    let resp = acme.call("map/scopes/get", json!({"scopeId": "gx-scope"})).await;
    assert_eq!(err_code(&resp), 2002, "{resp}");
    let resp = acme.call("map/send", json!({"to": {"scope": "gx-scope"}, "payload": "leak?"})).await;
    assert_eq!(err_code(&resp), 2002, "{resp}");
    let resp = acme.call("map/scopes/join", json!({"scopeId": "gx-scope", "agentId": "acme-1"})).await;
    assert_eq!(err_code(&resp), 2002, "{resp}");
    // The structure graph shows acme only.
    let graph = acme.call_ok("map/structure/graph", json!({})).await;
    let nodes: Vec<&str> = graph["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["acme-1"]);

    // Globex received nothing of all that; globex-1 still exists and is untouched.
    assert!(globex.drain(QUIET).await.iter().all(|n| n["method"] != "map/message"), "no message crossed");
    let got = globex.call_ok("map/agents/get", json!({"agentId": "globex-1"})).await;
    assert_eq!(got["agent"]["state"], "registered");

    // The same agent id can exist in two tenants independently.
    let r = acme.call_ok("map/agents/register", json!({"agentId": "globex-1"})).await;
    assert_eq!(r["agent"]["id"], "globex-1");
    let sent = acme.call_ok("map/send", json!({"to": {"agent": "globex-1"}, "from": "acme-1", "payload": "to my own"})).await;
    assert_eq!(sent["delivered"], json!(["globex-1"]));
    let note = acme.notification("map/message", WAIT).await.expect("acme's own globex-1 gets it");
    assert_eq!(note["params"]["message"]["payload"], "to my own");
    assert!(globex.notification("map/message", QUIET).await.is_none(), "the globex agent of the same id must not get it");
}

#[tokio::test]
async fn catch_all_subscription_sees_only_its_tenant() {
    let gw = Gateway::start();
    let (mut acme, acme_hello) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    let (mut globex, globex_hello) = gw.ws_connected("agent", Some(api_key("globex-key"))).await;
    let acme_participant = acme_hello["participantId"].as_str().unwrap().to_string();
    let globex_participant = globex_hello["participantId"].as_str().unwrap().to_string();

    let sub = acme.call_ok("map/subscribe", json!({})).await;
    let sub_id = sub["subscriptionId"].as_str().expect("subscriptionId").to_string();

    // Globex does all kinds of things.
    globex.call_ok("map/agents/register", json!({"agentId": "gx-a"})).await;
    globex.call_ok("map/agents/register", json!({"agentId": "gx-b"})).await;
    globex.call_ok("map/send", json!({"to": {"agent": "gx-b"}, "from": "gx-a", "payload": "internal"})).await;
    globex.call_ok("map/agents/update", json!({"agentId": "gx-a", "state": "busy"})).await;
    globex.call_ok("map/scopes/create", json!({"scopeId": "gx-scope"})).await;
    let (globex2, _) = gw.ws_connected("client", Some(api_key("globex-key"))).await;
    globex2.close().await;

    // Then acme does one thing; its event is the fence.
    acme.call_ok("map/agents/register", json!({"agentId": "acme-fence"})).await;
    let (fence, before) = acme.notification_where(WAIT, |n| n["method"] == "map/event" && n["params"]["event"]["data"]["agent"]["id"] == "acme-fence").await;
    let fence = fence.expect("acme's own agent_registered event");
    assert_eq!(fence["params"]["subscriptionId"], sub_id.as_str());
    assert_eq!(fence["params"]["event"]["type"], "agent_registered");
    // Nothing that came before it is about globex: with no foreign events the fence is event 1.
    for n in &before {
        let text = n.to_string();
        assert!(!text.contains("gx-") && !text.contains(&globex_participant), "globex event leaked into acme: {text}");
    }
    assert_eq!(fence["params"]["sequenceNumber"], before.iter().filter(|n| n["method"] == "map/event").count() as u64 + 1);
    assert_eq!(fence["params"]["sequenceNumber"], 1, "acme's only event so far; events before it: {before:?}");
    // `source` is the agent that caused the event; its owner is in the flat data.
    assert_eq!(fence["params"]["event"]["source"], "acme-fence");
    assert_eq!(fence["params"]["event"]["data"]["ownerId"], acme_participant.as_str());
    // And nothing comes after it either.
    for n in acme.drain(QUIET).await {
        let text = n.to_string();
        assert!(!text.contains("gx-") && !text.contains(&globex_participant), "globex event leaked into acme: {text}");
    }
}

#[tokio::test]
async fn replay_in_acme_shows_no_globex_events() {
    let gw = Gateway::start();
    let (mut acme, acme_hello) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    let (mut globex, globex_hello) = gw.ws_connected("agent", Some(api_key("globex-key"))).await;
    let globex_participant = globex_hello["participantId"].as_str().unwrap().to_string();
    acme.call_ok("map/agents/register", json!({"agentId": "acme-r"})).await;
    globex.call_ok("map/agents/register", json!({"agentId": "gx-r1"})).await;
    globex.call_ok("map/agents/register", json!({"agentId": "gx-r2"})).await;
    globex.call_ok("map/send", json!({"to": {"agent": "gx-r2"}, "payload": "secret"})).await;

    let page = acme.call_ok("map/replay", json!({"limit": 1000})).await;
    let events = page["events"].as_array().expect("events");
    assert!(!events.is_empty());
    assert_eq!(page["hasMore"], false);
    for e in events {
        let text = e.to_string();
        assert!(!text.contains("gx-r") && !text.contains(&globex_participant) && !text.contains("secret"), "globex event in acme's replay: {text}");
        assert!(e["eventId"].is_string() && e["event"]["type"].is_string(), "{e}");
    }
    // Acme's own history is there: its participant connected, its agent registered.
    let types: Vec<&str> = events.iter().map(|e| e["event"]["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"participant_connected"), "{types:?}");
    let registered: Vec<&str> =
        events.iter().filter(|e| e["event"]["type"] == "agent_registered").map(|e| e["event"]["data"]["agent"]["id"].as_str().unwrap()).collect();
    assert_eq!(registered, ["acme-r"]);
    let acme_connected =
        events.iter().filter(|e| e["event"]["type"] == "participant_connected").all(|e| e["event"]["data"]["participantId"] == acme_hello["participantId"]);
    assert!(acme_connected, "{events:?}");

    // A subscription replaying from the beginning of time sees acme's past only.
    let sub = acme.call_ok("map/subscribe", json!({"replayFrom": 0})).await;
    let sub_id = sub["subscriptionId"].as_str().unwrap().to_string();
    acme.call_ok("map/agents/register", json!({"agentId": "acme-fence"})).await;
    let (fence, before) = acme.notification_where(WAIT, |n| n["method"] == "map/event" && n["params"]["event"]["data"]["agent"]["id"] == "acme-fence").await;
    assert!(fence.is_some(), "fence event");
    let replayed: Vec<&Value> = before.iter().filter(|n| n["params"]["subscriptionId"] == sub_id.as_str()).collect();
    assert!(replayed.iter().any(|n| n["params"]["event"]["data"]["agent"]["id"] == "acme-r"), "acme's past is replayed: {before:?}");
    for n in &before {
        let text = n.to_string();
        assert!(!text.contains("gx-r") && !text.contains(&globex_participant) && !text.contains("secret"), "globex event replayed into acme: {text}");
    }

    // Globex's replay has its own events and none of acme's.
    let page = globex.call_ok("map/replay", json!({"filter": {"eventTypes": ["agent_registered"]}})).await;
    let registered: Vec<&str> = page["events"].as_array().unwrap().iter().map(|e| e["event"]["data"]["agent"]["id"].as_str().unwrap()).collect();
    assert_eq!(registered, ["gx-r1", "gx-r2"]);
}

#[tokio::test]
async fn same_participant_id_in_two_tenants_does_not_collide() {
    let gw = Gateway::start();
    let mut a = gw.ws().await;
    let hello_a = a.call_ok("map/connect", json!({"protocolVersion": 1, "participantId": "shared-name", "auth": api_key("acme-key")})).await;
    assert_eq!(hello_a["participantId"], "shared-name");
    let mut g = gw.ws().await;
    let hello_g = g.call_ok("map/connect", json!({"protocolVersion": 1, "participantId": "shared-name", "auth": api_key("globex-key")})).await;
    assert_eq!(hello_g["participantId"], "shared-name");
    assert_ne!(hello_a["sessionId"], hello_g["sessionId"]);
    // Addressing the participant from globex reaches only globex's.
    let (mut g2, _) = gw.ws_connected("client", Some(api_key("globex-key"))).await;
    let sent = g2.call_ok("map/send", json!({"to": {"participant": "shared-name"}, "payload": "hi"})).await;
    assert_eq!(sent["delivered"], json!(["shared-name"]));
    assert!(g.notification("map/message", WAIT).await.is_some(), "globex's shared-name gets it");
    assert!(a.notification("map/message", QUIET).await.is_none(), "acme's shared-name must not");
}

#[tokio::test]
async fn resume_token_does_not_cross_tenants() {
    let gw = Gateway::start();
    let (mut acme, hello) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    acme.call_ok("map/agents/register", json!({"agentId": "acme-owned"})).await;
    let bye = acme.call_ok("map/disconnect", json!({})).await;
    let token = bye["resumeToken"].as_str().expect("resumeToken").to_string();
    let mut thief = gw.ws().await;
    let r = thief.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": token, "auth": api_key("globex-key")})).await;
    assert_ne!(r["sessionId"], hello["sessionId"], "a globex credential must not resume an acme session: {r}");
    assert_ne!(r["reconnected"], true, "{r}");
    assert_eq!(r["principal"]["claims"]["tenant"], "globex");
    let resp = thief.call("map/agents/get", json!({"agentId": "acme-owned"})).await;
    assert_eq!(err_code(&resp), 2001, "{resp}");
}

/// Tenants with no anonymous access: credentials are required.
const CLOSED: &str = r#"
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
"#;

#[tokio::test]
async fn without_anonymous_access_connect_asks_for_auth_until_authenticate() {
    let gw = Gateway::start_with(65536, CLOSED);
    let mut ws = gw.ws().await;
    let hello = ws.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent"})).await;
    let required = &hello["authRequired"];
    assert_eq!(required["required"], true, "{hello}");
    assert!(required["methods"].as_array().is_some_and(|m| m.contains(&json!("api-key"))), "{hello}");
    // Every other method answers 1000 until map/authenticate succeeds.
    for (method, params) in [("map/agents/list", json!({})), ("map/agents/register", json!({"agentId": "early"})), ("map/subscribe", json!({}))] {
        let resp = ws.call(method, params).await;
        assert_error(&resp, &resp["id"].clone(), 1000, "auth");
    }
    let resp = ws.call("map/authenticate", json!({"method": "api-key", "credential": "wrong"})).await;
    assert_error(&resp, &resp["id"].clone(), 1001, "auth");
    let resp = ws.call("map/agents/list", json!({})).await;
    assert_eq!(err_code(&resp), 1000, "still unauthenticated: {resp}");
    let auth = ws.call_ok("map/authenticate", json!({"method": "api-key", "credential": "acme-key"})).await;
    assert_eq!(auth["success"], true, "{auth}");
    assert_eq!(auth["principal"]["claims"]["tenant"], "acme", "{auth}");
    ws.call_ok("map/agents/register", json!({"agentId": "authed"})).await;
    // It landed in acme: globex cannot see it, acme can.
    let (mut globex, _) = gw.ws_connected("client", Some(api_key("globex-key"))).await;
    let resp = globex.call("map/agents/get", json!({"agentId": "authed"})).await;
    assert_eq!(err_code(&resp), 2001, "{resp}");
    let (mut acme, _) = gw.ws_connected("client", Some(api_key("acme-key"))).await;
    let got = acme.call_ok("map/agents/get", json!({"agentId": "authed"})).await;
    assert_eq!(got["agent"]["id"], "authed");
}

#[tokio::test]
async fn http_credentials_in_headers_pick_the_tenant() {
    let gw = Gateway::start_with(65536, CLOSED);
    let body = request(1, "map/connect", json!({"protocolVersion": 1})).to_string();
    let resp = http(&gw.addr(), "POST", "/map/rpc", &[("Content-Type", "application/json"), ("X-Api-Key", "globex-key")], body.as_bytes()).await;
    assert_eq!(resp.status, 200);
    let v = resp.json();
    assert_eq!(ok(&v)["principal"]["claims"]["tenant"], "globex", "{v}");
    assert!(resp.header("map-session-id").is_some());
    let resp = http(&gw.addr(), "POST", "/map/rpc", &[("Content-Type", "application/json"), ("X-Api-Key", "nope")], body.as_bytes()).await;
    assert_eq!(resp.status, 200);
    assert_refused(&resp.json(), "invalid_credentials");
    assert!(resp.header("map-session-id").is_none(), "no session for a refused connect");
}

/// `none` leads into acme, as a named principal.
const NONE_TO_ACME: &str = r#"
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
none_principal = "acme-guest"
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
"#;

#[tokio::test]
async fn auth_method_none_leads_into_the_tenant_that_accepts_it() {
    let gw = Gateway::start_with(65536, NONE_TO_ACME);
    let mut ws = gw.ws().await;
    let hello = ws.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent"})).await;
    let methods = hello["authRequired"]["methods"].as_array().cloned().unwrap_or_default();
    assert!(methods.contains(&json!("none")) && methods.contains(&json!("api-key")), "{hello}");
    let auth = ws.call_ok("map/authenticate", json!({"method": "none"})).await;
    assert_eq!(auth["success"], true, "{auth}");
    assert_eq!(auth["principal"]["id"], "acme-guest", "{auth}");
    assert_eq!(auth["principal"]["claims"]["tenant"], "acme", "{auth}");
    ws.call_ok("map/agents/register", json!({"agentId": "guest-agent"})).await;
    // Straight from map/connect, too.
    let (mut guest, hello) = gw.ws_connected("client", Some(json!({"method": "none"}))).await;
    assert_eq!(hello["principal"]["id"], "acme-guest", "{hello}");
    assert_eq!(hello["principal"]["claims"]["tenant"], "acme", "{hello}");
    assert!(hello.get("authRequired").is_none(), "{hello}");
    let got = guest.call_ok("map/agents/get", json!({"agentId": "guest-agent"})).await;
    assert_eq!(got["agent"]["id"], "guest-agent");

    // Off by default: not offered, and `none` is no credential at all.
    let closed = Gateway::start_with(65536, CLOSED);
    let mut ws = closed.ws().await;
    let hello = ws.call_ok("map/connect", json!({"protocolVersion": 1, "auth": {"method": "none"}})).await;
    assert!(!hello["authRequired"]["methods"].as_array().unwrap().contains(&json!("none")), "{hello}");
    assert!(hello.get("error").is_none(), "{hello}");
    let resp = ws.call("map/authenticate", json!({"method": "none"})).await;
    assert_error(&resp, &resp["id"].clone(), 1001, "auth");
    let open = Gateway::start();
    let (_anon, hello) = open.ws_connected("client", Some(json!({"method": "none"}))).await;
    assert_eq!(hello["principal"]["id"], "anonymous", "{hello}");
    assert_eq!(hello["principal"]["claims"]["tenant"], "default", "{hello}");
}
