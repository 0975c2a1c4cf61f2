//! The resources extension (`urn:map:ext:resources:1`), black-box: the
//! gateway serves `map/resources/list` and `get` over the types its plugins
//! declare through the WIT `resources` export (mail's conversations as
//! `x-mail/conversation`, tasks as `x-tasks/task`, the UAP hub's jobs as
//! `x-uap/job`, trajectory checkpoints as `x-trajectory/checkpoint`), each
//! plugin applying its own rules for the caller. Checked: the capability at
//! connect (only types a provider serves, none without one), snake_case
//! items, cursor pages, filters, `get` with and without its type, and the
//! errors -32001, -32003 and -32004 with `data.category: "resource"`.

use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};

const TASK: &str = "x-tasks/task";
const CONVERSATION: &str = "x-mail/conversation";
const JOB: &str = "x-uap/job";
const CHECKPOINT: &str = "x-trajectory/checkpoint";

fn plugin(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../plugins/dist/{name}.wasm"));
    assert!(path.exists(), "{} is missing: run scripts/build-plugins.sh", path.display());
    format!("[plugins.{name}]\npath = {:?}\n", path.to_string_lossy())
}

/// `default` (anonymous), `acme`, `globex`; `locked` lets only agents list
/// tasks; `bare` runs no plugin. The UAP hub runs as the cluster singleton
/// it is in production, so its resources calls go through the owner.
fn start() -> Gateway {
    let tenants = format!(
        "{TENANTS}\n[[tenants]]\nid = \"locked\"\napi_keys = [\"locked-key\"]\nplugin_config = {{ tasks = {{ can_list = [\"agent\"] }} }}\n\
         [[tenants]]\nid = \"bare\"\napi_keys = [\"bare-key\"]\nplugins = []\n{}{}{}mode = \"singleton\"\n{}",
        plugin("mail"),
        plugin("tasks"),
        plugin("uap"),
        plugin("trajectory")
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
    assert_eq!(kinds, BTreeSet::from([CONVERSATION, TASK, JOB, CHECKPOINT]));
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

/// Every page of a listing, `limit` items at a time: the items, and how many pages it took.
async fn all_pages(ws: &mut Ws, kind: &str, filter: Value, limit: u32) -> (Vec<Value>, usize) {
    let (mut listed, mut pages, mut cursor) = (Vec::new(), 0, Value::Null);
    loop {
        let page = ws.call_ok("map/resources/list", json!({"type": kind, "filter": filter, "limit": limit, "cursor": cursor})).await;
        let items = page["resources"].as_array().unwrap().clone();
        assert!(items.len() <= limit as usize, "{page}");
        listed.extend(items);
        pages += 1;
        cursor = page["cursor"].clone();
        if cursor.is_null() {
            return (listed, pages);
        }
        assert!(cursor.is_string(), "{page}");
    }
}

fn ids(items: &[Value]) -> Vec<&str> {
    items.iter().map(|r| r["id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn uap_jobs_are_the_tenants_newest_first() {
    let gw = start();
    let (mut ws, connected) = client(&gw, "acme-key").await;
    let me = connected["participantId"].as_str().unwrap().to_string();
    let mut made = Vec::new();
    for i in 0..5 {
        let job = ws.call_ok("uap/submit", json!({"kind": "test", "type": format!("suite-{i}")})).await;
        made.push(job["job"]["id"].as_str().unwrap().to_string());
    }
    ws.call_ok("uap/cancel", json!({"jobId": made[1]})).await;
    made.reverse();

    // Newest first, in pages, by another session of the tenant: jobs are the tenant's.
    let (mut other, _) = client(&gw, "acme-key").await;
    let (listed, pages) = all_pages(&mut other, JOB, json!({}), 2).await;
    assert_eq!(pages, 3);
    assert_eq!(ids(&listed), made.iter().map(String::as_str).collect::<Vec<_>>(), "newest first, no repeats");
    let newest = &listed[0];
    assert_eq!((newest["type"].as_str(), newest["name"].as_str(), newest["status"].as_str()), (Some(JOB), Some("suite-4 job"), Some("queued")));
    assert_eq!(newest["owner_id"], me);
    assert_eq!(newest["origin_hub_id"], Value::Null);
    assert!(is_iso8601(&newest["created_at"]) && is_iso8601(&newest["updated_at"]), "{newest}");
    assert_eq!((newest["metadata"]["kind"].as_str(), newest["metadata"]["type"].as_str()), (Some("test"), Some("suite-4")));
    let cancelled = &listed[3];
    assert_eq!((cancelled["id"].as_str(), cancelled["status"].as_str()), (Some(made[3].as_str()), Some("cancelled")));
    assert!(cancelled["updated_at"].as_str() >= cancelled["created_at"].as_str(), "{cancelled}");
    assert!(cancelled["metadata"]["error"].as_str().unwrap().starts_with("cancelled by"), "{cancelled}");

    // get: the bare resource, by its type or without it.
    assert_eq!(&other.call_ok("map/resources/get", json!({"id": made[3], "type": JOB})).await, cancelled);
    assert_eq!(&other.call_ok("map/resources/get", json!({"id": made[0]})).await, newest);

    // The filter: status (one or several) and kind; other keys are not the type's.
    let (done, _) = all_pages(&mut other, JOB, json!({"status": "cancelled"}), 10).await;
    assert_eq!(ids(&done), [made[3].as_str()]);
    let (open, _) = all_pages(&mut other, JOB, json!({"status": ["queued", "running"], "kind": "test"}), 2).await;
    assert_eq!(open.len(), 4, "{open:?}");
    assert_eq!(other.call_ok("map/resources/list", json!({"type": JOB, "filter": {"kind": "translation"}})).await["resources"], json!([]));
    assert_resource_error(&other.call("map/resources/list", json!({"type": JOB, "filter": {"agentId": "x"}})).await, -32003);
    assert_resource_error(&other.call("map/resources/list", json!({"type": JOB, "filter": {"status": "lost"}})).await, -32003);

    // Another tenant's jobs do not exist for globex.
    let (mut globex, _) = client(&gw, "globex-key").await;
    assert_resource_error(&globex.call("map/resources/get", json!({"id": made[0], "type": JOB})).await, -32004);
    assert_eq!(globex.call_ok("map/resources/list", json!({"type": JOB})).await["resources"], json!([]));
    assert_resource_error(&ws.call("map/resources/get", json!({"id": "job-none", "type": JOB})).await, -32004);
}

#[tokio::test]
async fn trajectory_checkpoints_follow_the_query_rule() {
    let gw = start();
    let (mut agent, _) = gw.ws_connected("agent", Some(api_key("acme-key"))).await;
    for id in ["coder", "reviewer"] {
        agent.call_ok("map/agents/register", json!({"agentId": id})).await;
    }
    for i in 0..3 {
        let checkpoint = json!({"id": format!("cp-{i}"), "agentId": "coder", "label": format!("step {i}"), "sessionId": "work-1", "metadata": {"step": i}});
        agent.call_ok("trajectory/checkpoint", json!({"checkpoint": checkpoint})).await;
    }
    agent.call_ok("trajectory/checkpoint", json!({"checkpoint": {"id": "cp-r", "agentId": "reviewer"}})).await;

    // A client reads them all, newest first, in pages.
    let (mut ws, _) = client(&gw, "acme-key").await;
    let (listed, pages) = all_pages(&mut ws, CHECKPOINT, json!({}), 3).await;
    assert_eq!(pages, 2);
    assert_eq!(ids(&listed), ["cp-r", "cp-2", "cp-1", "cp-0"]);
    let review = &listed[0];
    assert_eq!((review["type"].as_str(), review["name"].as_str(), review["status"].as_str()), (Some(CHECKPOINT), Some("cp-r"), Some("recorded")));
    assert_eq!(review["owner_id"], "reviewer");
    let step = &listed[1];
    assert_eq!((step["name"].as_str(), step["owner_id"].as_str()), (Some("step 2"), Some("coder")));
    assert!(is_iso8601(&step["created_at"]) && step["created_at"] == step["updated_at"], "{step}");
    assert_eq!(step["metadata"], json!({"sessionId": "work-1", "metadata": {"step": 2}}));
    assert_eq!(&ws.call_ok("map/resources/get", json!({"id": "cp-2", "type": CHECKPOINT})).await, step);
    assert_eq!(&ws.call_ok("map/resources/get", json!({"id": "cp-r"})).await, review);

    // trajectory/list's filter; other keys are not the type's.
    let (coder, pages) = all_pages(&mut ws, CHECKPOINT, json!({"agentId": "coder"}), 2).await;
    assert_eq!((ids(&coder), pages), (vec!["cp-2", "cp-1", "cp-0"], 2));
    let (none, _) = all_pages(&mut ws, CHECKPOINT, json!({"agentId": "reviewer", "sessionId": "work-1"}), 10).await;
    assert!(none.is_empty(), "{none:?}");
    assert_resource_error(&ws.call("map/resources/list", json!({"type": CHECKPOINT, "filter": {"label": "step 1"}})).await, -32003);
    assert_resource_error(&ws.call("map/resources/list", json!({"type": CHECKPOINT, "filter": {"agentId": 7}})).await, -32003);

    // A participant that gave up trajectory.canQuery reads none of them.
    let mut blind = gw.ws().await;
    blind.call_ok("map/connect", json!({"participantType": "client", "auth": api_key("acme-key"), "capabilities": {"trajectory": {"canQuery": false}}})).await;
    assert_eq!(err_code(&blind.call("trajectory/get", json!({"checkpointId": "cp-1"})).await), 13004);
    assert_resource_error(&blind.call("map/resources/get", json!({"id": "cp-1", "type": CHECKPOINT})).await, -32004);
    assert_eq!(blind.call_ok("map/resources/list", json!({"type": CHECKPOINT})).await["resources"], json!([]));

    // Nor does another tenant.
    let (mut globex, _) = client(&gw, "globex-key").await;
    assert_resource_error(&globex.call("map/resources/get", json!({"id": "cp-1", "type": CHECKPOINT})).await, -32004);
    assert_eq!(globex.call_ok("map/resources/list", json!({"type": CHECKPOINT})).await["resources"], json!([]));
}
