//! The admin API against the real binary: what it lists after known
//! traffic, who may use it, and ending a session from it.

use crate::common;

use common::*;
use serde_json::{json, Value};

const ADMIN: (&str, &str) = ("authorization", "Bearer s3cret-admin");

fn config() -> String {
    format!("[admin]\ntoken = \"s3cret-admin\"\n{TENANTS}")
}

async fn admin_get(gw: &Gateway, path: &str) -> Value {
    let r = http(&gw.addr(), "GET", path, &[ADMIN], b"").await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

fn ids(list: &Value, key: &str) -> Vec<String> {
    list[key].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn the_admin_api_lists_tenants_sessions_agents_scopes_and_subscriptions() {
    let gw = Gateway::start_with(65536, &config());
    let (mut boss, hello) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    let boss_session = hello["sessionId"].as_str().unwrap().to_string();
    boss.call_ok("map/agents/register", json!({"agentId": "boss", "name": "Boss"})).await;
    boss.call_ok("map/agents/register", json!({"agentId": "worker", "parent": "boss"})).await;
    boss.call_ok("map/scopes/create", json!({"scopeId": "crew", "name": "Crew"})).await;
    boss.call_ok("map/scopes/join", json!({"scopeId": "crew", "agentId": "worker"})).await;
    let (mut watcher, _) = gw.ws_connected("client", Some(api_key("acme-key"))).await;
    let sub = watcher.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["agent_registered"]}})).await;
    let (_other, _) = gw.ws_connected("client", Some(api_key("globex-key"))).await;

    // Who may ask: the admin token only, never a tenant key.
    assert_eq!(http(&gw.addr(), "GET", "/admin/tenants", &[], b"").await.status, 401);
    assert_eq!(http(&gw.addr(), "GET", "/admin/tenants", &[("authorization", "Bearer acme-key")], b"").await.status, 401);
    assert_eq!(http(&gw.addr(), "GET", "/admin/tenants", &[ADMIN, ("origin", "https://evil.example")], b"").await.status, 403);

    let tenants = admin_get(&gw, "/admin/tenants").await;
    assert_eq!(ids(&tenants, "tenants"), ["acme", "default", "globex"], "{tenants}");
    let acme = &tenants["tenants"][0];
    assert_eq!(
        (acme["sessions"].as_u64(), acme["agents"].as_u64(), acme["scopes"].as_u64(), acme["subscriptions"].as_u64()),
        (Some(2), Some(2), Some(1), Some(1)),
        "{acme}"
    );
    assert!(acme["eventLog"]["events"].as_u64().unwrap() >= 3, "registrations and the scope are in the log: {acme}");
    assert!(acme["eventLog"]["bytes"].as_u64().unwrap() > 0, "{acme}");

    let sessions = admin_get(&gw, "/admin/sessions?tenant=acme").await;
    let list = sessions["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{sessions}");
    let first = &list[0];
    assert_eq!(first["id"], boss_session.as_str());
    assert_eq!(first["tenant"], "acme");
    assert_eq!(first["connected"], true);
    assert_eq!(first["agents"], json!(["boss", "worker"]));
    assert!(first["principal"].as_str().is_some(), "{first}");
    assert_eq!(list[1]["subscriptions"], 1, "{sessions}");
    assert_eq!(admin_get(&gw, "/admin/sessions").await["sessions"].as_array().unwrap().len(), 3, "every tenant without ?tenant");

    let agents = admin_get(&gw, "/admin/agents?tenant=acme").await;
    let worker = agents["agents"].as_array().unwrap().iter().find(|a| a["id"] == "worker").expect("worker listed").clone();
    assert_eq!((worker["parent"].as_str(), worker["sessionId"].as_str()), (Some("boss"), Some(boss_session.as_str())), "{worker}");
    let scopes = admin_get(&gw, "/admin/scopes?tenant=acme").await;
    assert_eq!(scopes["scopes"][0]["id"], "crew");
    assert_eq!(scopes["scopes"][0]["members"], json!(["worker"]));
    let subs = admin_get(&gw, "/admin/subscriptions?tenant=acme").await;
    assert_eq!(subs["subscriptions"][0]["id"], sub["subscriptionId"], "{subs}");
    assert_eq!(subs["subscriptions"][0]["eventTypes"], json!(["agent_registered"]));
    assert!(admin_get(&gw, "/admin/agents?tenant=globex").await["agents"].as_array().unwrap().is_empty(), "tenants stay apart");

    // Bad asks get their own status.
    assert_eq!(http(&gw.addr(), "GET", "/admin/agents?tenant=nobody", &[ADMIN], b"").await.status, 404);
    assert_eq!(http(&gw.addr(), "GET", "/admin/nothing-here", &[ADMIN], b"").await.status, 404);
    assert_eq!(http(&gw.addr(), "POST", "/admin/tenants", &[ADMIN], b"").await.status, 405);
    assert_eq!(http(&gw.addr(), "DELETE", "/admin/sessions/sess-not-there", &[ADMIN], b"").await.status, 404);
    assert_eq!(admin_get(&gw, "/admin/plugins").await["plugins"], json!([]), "this gateway loads no plugins");

    // The replay log's size is a metric too.
    let metrics = http(&gw.addr(), "GET", "/metrics", &[ADMIN], b"").await.text();
    let events_line =
        metrics.lines().find(|l| l.starts_with(r#"map_event_log_events{tenant="acme"}"#)).unwrap_or_else(|| panic!("no event log gauge in:\n{metrics}"));
    assert_eq!(events_line.rsplit(' ').next().unwrap().parse::<u64>().unwrap(), acme["eventLog"]["events"].as_u64().unwrap());
    // And the store's read cache, within its bound (storage.cache_mb, 64 MiB by default).
    let cache_line = metrics.lines().find(|l| l.starts_with("map_store_cache_bytes ")).unwrap_or_else(|| panic!("no store cache gauge in:\n{metrics}"));
    let cached: f64 = cache_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((0.0..=(64u64 << 20) as f64).contains(&cached), "{cache_line}");
}

#[tokio::test]
async fn an_operator_disconnects_a_session_for_good() {
    let gw = Gateway::start_with(65536, &config());
    let (mut agent, hello) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    let session = hello["sessionId"].as_str().unwrap().to_string();
    let token = hello["resumeToken"].as_str().unwrap().to_string();
    agent.call_ok("map/agents/register", json!({"agentId": "doomed"})).await;
    let (mut watcher, _) = gw.ws_connected("client", Some(api_key("acme-key"))).await;
    watcher.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["participant_disconnected", "agent_unregistered"]}})).await;

    let r = http(&gw.addr(), "DELETE", &format!("/admin/sessions/{session}"), &[ADMIN], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["disconnected"], session.as_str());

    // The client is told why its connection ends.
    let (code, reason) = agent.close_frame(WAIT).await.expect("a close frame");
    assert_eq!(code, 1008, "{reason}");
    assert!(reason.contains("operator"), "{reason}");
    // Others see it go, with its agents.
    let mut seen = Vec::new();
    for _ in 0..2 {
        let n = watcher.notification("map/event", WAIT).await.expect("an event");
        seen.push(n["params"]["event"]["type"].as_str().unwrap().to_string());
    }
    seen.sort();
    assert_eq!(seen, ["agent_unregistered", "participant_disconnected"]);
    // Gone from the listings, and its resume token no longer resumes it.
    let sessions = admin_get(&gw, "/admin/sessions?tenant=acme").await;
    assert!(!sessions.to_string().contains(&session), "{sessions}");
    let mut again = gw.ws().await;
    let resumed = again.call("map/connect", json!({"protocolVersion": 1, "auth": api_key("acme-key"), "resumeToken": token})).await;
    let resumed_session = resumed["result"]["sessionId"].as_str().map(str::to_string);
    assert_ne!(resumed_session.as_deref(), Some(session.as_str()), "the old session must not come back: {resumed}");
    assert_eq!(http(&gw.addr(), "DELETE", &format!("/admin/sessions/{session}"), &[ADMIN], b"").await.status, 404, "already gone");
}
