//! The resources extension (`urn:map:ext:resources:1`), black-box: the
//! gateway serves `map/resources/list` and `get` over the types its plugins
//! declare through the WIT `resources` export (mail's conversations as
//! `x-mail/conversation`, tasks as `x-tasks/task`), each plugin applying
//! its own rules for the caller. Checked: the capability at connect (only
//! types a provider serves, none without one), snake_case items, cursor
//! pages, `get` with and without its type, and the errors -32001, -32003
//! and -32004 with `data.category: "resource"`.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};

const TASK: &str = "x-tasks/task";
const CONVERSATION: &str = "x-mail/conversation";

fn plugin(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../plugins/dist/{name}.wasm"));
    assert!(path.exists(), "{} is missing: run scripts/build-plugins.sh", path.display());
    format!("[plugins.{name}]\npath = {:?}\n", path.to_string_lossy())
}

/// `default` (anonymous), `acme`, `globex`; `locked` lets only agents list
/// tasks; `bare` runs no plugin.
fn start() -> Gateway {
    let tenants = format!(
        "{TENANTS}\n[[tenants]]\nid = \"locked\"\napi_keys = [\"locked-key\"]\nplugin_config = {{ tasks = {{ can_list = [\"agent\"] }} }}\n\
         [[tenants]]\nid = \"bare\"\napi_keys = [\"bare-key\"]\nplugins = []\n{}{}",
        plugin("mail"),
        plugin("tasks")
    );
    Gateway::start_with(65536, &tenants)
}

async fn client(gw: &Gateway, key: &str) -> (Ws, Value) {
    gw.ws_connected("client", Some(api_key(key))).await
}

fn assert_resource_error(resp: &Value, code: i64) {
    assert_eq!(err_code(resp), code, "{resp}");
    assert_eq!(err(resp)["data"]["category"], "resource", "{resp}");
}

fn is_iso8601(v: &Value) -> bool {
    let s = v.as_str().unwrap_or_default();
    s.len() == 24 && s.ends_with('Z') && s.as_bytes()[10] == b'T' && s[..4].bytes().all(|b| b.is_ascii_digit())
}

#[tokio::test]
async fn connect_lists_the_types_that_have_a_provider() {
    let gw = start();
    let (_ws, connected) = client(&gw, "acme-key").await;
    let caps = &connected["capabilities"];
    assert_eq!(caps["resources"]["enabled"], true, "{caps}");
    let kinds: BTreeSet<&str> = caps["resources"]["kinds"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(kinds, BTreeSet::from([CONVERSATION, TASK]));
    assert!(caps["extensions"].as_array().unwrap().iter().any(|e| e["uri"] == "urn:map:ext:resources:1"), "{caps}");

    // No plugin, no type: nothing is advertised and the methods are nobody's.
    let (mut bare, connected) = client(&gw, "bare-key").await;
    assert!(connected["capabilities"].get("resources").is_none(), "{}", connected["capabilities"]);
    assert_eq!(err_code(&bare.call("map/resources/list", json!({"type": TASK})).await), -32601);
    assert_eq!(err_code(&bare.call("map/resources/get", json!({"id": "x"})).await), -32601);
}

#[tokio::test]
async fn tasks_list_in_pages_and_get_returns_the_bare_resource() {
    let gw = start();
    let (mut ws, connected) = client(&gw, "acme-key").await;
    let me = connected["participantId"].as_str().unwrap().to_string();
    let mut made = Vec::new();
    for i in 0..5 {
        let t = ws.call_ok("map/tasks/create", json!({"task": {"title": format!("task {i}"), "status": "open", "assignee": "worker"}})).await;
        made.push(t["task"]["id"].as_str().unwrap().to_string());
    }
    ws.call_ok("map/tasks/update", json!({"taskId": made[4], "status": "completed"})).await;

    let mut listed = Vec::new();
    let mut cursor = Value::Null;
    let mut pages = 0;
    loop {
        let page = ws.call_ok("map/resources/list", json!({"type": TASK, "limit": 2, "cursor": cursor})).await;
        let items = page["resources"].as_array().unwrap().clone();
        assert!(items.len() <= 2, "{page}");
        listed.extend(items);
        pages += 1;
        cursor = page["cursor"].clone();
        if cursor.is_null() {
            break;
        }
        assert!(cursor.is_string(), "{page}");
    }
    assert_eq!(pages, 3);
    let ids: Vec<&str> = listed.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, made.iter().map(String::as_str).collect::<Vec<_>>(), "creation order, no repeats");

    let first = &listed[0];
    assert_eq!((first["type"].as_str(), first["name"].as_str(), first["status"].as_str()), (Some(TASK), Some("task 0"), Some("open")));
    assert_eq!(first["owner_id"], me);
    assert_eq!(first["origin_hub_id"], Value::Null);
    assert!(is_iso8601(&first["created_at"]) && is_iso8601(&first["updated_at"]), "{first}");
    assert_eq!(first["metadata"]["assignee"], "worker");
    assert_eq!(listed[4]["status"], "completed");
    assert!(listed[4]["updated_at"].as_str() >= listed[4]["created_at"].as_str());

    // get: the bare resource, by its type or without it.
    let got = ws.call_ok("map/resources/get", json!({"id": made[0], "type": TASK})).await;
    assert_eq!(&got, first);
    assert_eq!(&ws.call_ok("map/resources/get", json!({"id": made[0]})).await, first);

    // A filter passes through to the type: map/tasks/list's.
    let done = ws.call_ok("map/resources/list", json!({"type": TASK, "filter": {"status": "completed"}})).await;
    assert_eq!(done["resources"].as_array().unwrap().len(), 1, "{done}");
    assert_eq!(done["resources"][0]["id"], made[4].as_str());
}

#[tokio::test]
async fn errors_are_the_extensions_own() {
    let gw = start();
    let (mut ws, _) = client(&gw, "acme-key").await;
    assert_resource_error(&ws.call("map/resources/list", json!({"type": "x-nope/thing"})).await, -32001);
    assert_resource_error(&ws.call("map/resources/get", json!({"id": "a", "type": "x-nope/thing"})).await, -32001);
    assert_resource_error(&ws.call("map/resources/list", json!({"type": TASK, "filter": ["not", "an", "object"]})).await, -32003);
    assert_resource_error(&ws.call("map/resources/list", json!({"type": TASK, "filter": {"colour": "red"}})).await, -32003);
    assert_resource_error(&ws.call("map/resources/get", json!({"id": "task-none"})).await, -32003);
    assert_resource_error(&ws.call("map/resources/get", json!({"id": "task-none", "type": TASK})).await, -32004);
    assert_eq!(err_code(&ws.call("map/resources/list", json!({})).await), -32602);
    assert_eq!(err_code(&ws.call("map/resources/get", json!({"type": TASK})).await), -32602);
    assert_eq!(err_code(&ws.call("map/resources/list", json!({"type": TASK, "limit": 0})).await), -32602);
    assert_eq!(err_code(&ws.call("map/resources/delete", json!({"id": "x"})).await), -32601);
}

#[tokio::test]
async fn what_the_caller_may_not_see_is_not_found() {
    let gw = start();
    let (mut alice, _) = client(&gw, "acme-key").await;
    let task = alice.call_ok("map/tasks/create", json!({"task": {"title": "acme's"}})).await["task"]["id"].as_str().unwrap().to_string();
    let conv = alice.call_ok("mail/create", json!({"subject": "alice's"})).await["conversation"]["id"].as_str().unwrap().to_string();
    let mine = alice.call_ok("map/resources/get", json!({"id": conv, "type": CONVERSATION})).await;
    assert_eq!((mine["name"].as_str(), mine["status"].as_str(), mine["type"].as_str()), (Some("alice's"), Some("active"), Some(CONVERSATION)));
    assert_eq!(mine["metadata"]["participantCount"], 1);

    // Another tenant's resources do not exist for globex.
    let (mut globex, _) = client(&gw, "globex-key").await;
    assert_resource_error(&globex.call("map/resources/get", json!({"id": task, "type": TASK})).await, -32004);
    assert_resource_error(&globex.call("map/resources/get", json!({"id": conv, "type": CONVERSATION})).await, -32004);
    assert_eq!(globex.call_ok("map/resources/list", json!({"type": TASK})).await["resources"], json!([]));

    // In acme, bob takes no part in alice's conversation: mail's rule.
    let (mut bob, _) = client(&gw, "acme-key").await;
    assert_resource_error(&bob.call("map/resources/get", json!({"id": conv, "type": CONVERSATION})).await, -32004);
    assert_resource_error(&bob.call("map/resources/get", json!({"id": conv})).await, -32003);
    assert_eq!(bob.call_ok("map/resources/list", json!({"type": CONVERSATION})).await["resources"], json!([]));
    assert_eq!(bob.call_ok("map/resources/list", json!({"type": TASK})).await["resources"][0]["id"], task.as_str(), "tasks are the tenant's");

    // An observer client (capabilities.mail.canObserve) reads every conversation.
    let mut observer = gw.ws().await;
    observer.call_ok("map/connect", json!({"participantType": "client", "auth": api_key("acme-key"), "capabilities": {"mail": {"canObserve": true}}})).await;
    let seen = observer.call_ok("map/resources/list", json!({"type": CONVERSATION})).await;
    assert_eq!(seen["resources"][0]["id"], conv.as_str(), "{seen}");

    // Where only agents may list tasks, a client sees none of them.
    let (mut locked_agent, _) = gw.ws_connected("agent", Some(api_key("locked-key"))).await;
    let hidden = locked_agent.call_ok("map/tasks/create", json!({"task": {"title": "agents only"}})).await["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(locked_agent.call_ok("map/resources/list", json!({"type": TASK})).await["resources"][0]["id"], hidden.as_str());
    let (mut locked_client, _) = client(&gw, "locked-key").await;
    assert_eq!(locked_client.call_ok("map/resources/list", json!({"type": TASK})).await["resources"], json!([]));
    assert_resource_error(&locked_client.call("map/resources/get", json!({"id": hidden, "type": TASK})).await, -32004);
}
