//! The embedded default (one process, SQLite in the data dir, no
//! `[cluster]`): the replay log and the scopes are kept on disk. After a
//! restart on the same data dir — graceful (SIGTERM) or kill -9 —
//! `map/replay` returns the earlier events (same eventIds, same order) and
//! `map/scopes/list` the earlier scopes; agents do not survive, so scope
//! members may be empty. `[limits] replay_events` bounds what is kept, also
//! across restarts.

use crate::common;

use std::collections::{BTreeSet, HashMap};

use common::cluster::{describe, event_agent, event_id, event_of, event_type, id_set, Client, Node};
use common::*;
use serde_json::{json, Value};

const SERVER: &str = "max_message_bytes = 65536\nresume_window_secs = 300";

fn start(extra: &str) -> Node {
    Node { name: "embedded".into(), gw: Gateway::start_config(SERVER, extra) }
}

/// SIGTERM, wait for the exit, start again on the same config and data dir.
fn restart_gracefully(mut node: Node) -> Node {
    let status = node.gw.terminate();
    assert!(status.success(), "SIGTERM: exit status {status:?}\n{}", node.gw.log_tail(40));
    Node { name: node.name, gw: node.gw.restart() }
}

/// kill -9 (no shutdown at all), start again on the same config and data dir.
fn restart_after_kill9(node: Node) -> Node {
    Node { name: node.name, gw: node.gw.restart() }
}

fn scope_created(e: &Value, scope: &str) -> bool {
    event_type(e) == "scope_created" && event_of(e)["data"]["scopeId"] == scope
}

fn list(entries: &[Value]) -> String {
    entries.iter().map(describe).collect::<Vec<_>>().join(", ")
}

/// What happened before the restart, as the gateway reported it.
struct History {
    /// Every `map/replay` entry, oldest first.
    replay: Vec<Value>,
    /// `map/scopes/list` entries.
    scopes: Vec<Value>,
    /// The sessions, still connected.
    clients: Vec<Client>,
}

/// Scopes (one with a parent, one with metadata), agents, scope joins and a
/// custom message; then the replay and the scope list.
async fn make_history(node: &Node) -> History {
    let mut admin = node.connect("client").await;
    admin.ok("map/scopes/create", json!({"scopeId": "keep-1", "name": "Keep one", "metadata": {"shelf": 1}})).await;
    admin.ok("map/scopes/create", json!({"scopeId": "keep-2", "name": "Keep two"})).await;
    admin.ok("map/scopes/create", json!({"scopeId": "keep-1-child", "parent": "keep-1"})).await;
    let mut ear = node.agent("ear", json!({"role": "listener"})).await;
    let mut talker = node.agent("talker", json!({})).await;
    for i in 0..5 {
        talker.register(&format!("d-{i}"), json!({"role": "worker"})).await;
    }
    talker.ok("map/scopes/join", json!({"scopeId": "keep-1", "agentId": "talker"})).await;
    ear.ok("map/scopes/join", json!({"scopeId": "keep-1", "agentId": "ear"})).await;
    let sent = talker.ok("map/send", json!({"to": {"agent": "ear"}, "payload": {"custom": "durable"}})).await;
    assert_eq!(sent["delivered"], json!(["ear"]), "{sent}");
    ear.expect_note("the custom message", WAIT, |n| n["method"] == "map/message").await;

    let replay = admin.replay_all(None).await;
    let has = |pred: &dyn Fn(&Value) -> bool, what: &str| assert!(replay.iter().any(pred), "map/replay before the restart lacks {what}: [{}]", list(&replay));
    for s in ["keep-1", "keep-2", "keep-1-child"] {
        has(&|e| scope_created(e, s), &format!("scope_created {s}"));
    }
    for a in ["ear", "talker", "d-0", "d-4"] {
        has(&|e| event_type(e) == "agent_registered" && event_agent(e) == Some(a), &format!("agent_registered {a}"));
    }
    has(&|e| event_type(e) == "scope_member_joined", "scope_member_joined");
    has(&|e| event_type(e) == "message_sent" && event_of(e)["data"]["message"]["payload"]["custom"] == "durable", "the custom message_sent");
    let mut ids: Vec<&str> = replay.iter().map(event_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), replay.len(), "eventIds repeat in map/replay: [{}]", list(&replay));

    let scopes = admin.ok("map/scopes/list", json!({})).await["scopes"].as_array().cloned().unwrap_or_default();
    assert_eq!(id_set(&json!(scopes)), ["keep-1", "keep-2", "keep-1-child"].iter().map(|s| s.to_string()).collect(), "{scopes:?}");
    History { replay, scopes, clients: vec![admin, ear, talker] }
}

/// After the restart: the earlier entries come back first, unchanged; the scopes are
/// listed as before; paging from an old eventId works; new events follow.
/// Returns the surviving earlier entries.
async fn check_after_restart(node: &Node, before: &History) -> (Client, Vec<Value>) {
    let mut reader = node.connect("client").await;
    let after = reader.replay_all(None).await;
    let before_ids: BTreeSet<&str> = before.replay.iter().map(event_id).collect();
    let after_ids: BTreeSet<&str> = after.iter().map(event_id).collect();
    let missing: Vec<Value> = before.replay.iter().filter(|e| !after_ids.contains(event_id(e))).cloned().collect();
    assert!(missing.is_empty(), "events lost by the restart: [{}]\nafter the restart: [{}]", list(&missing), list(&after));
    let survivors: Vec<Value> = before.replay.iter().filter(|e| after_ids.contains(event_id(e))).cloned().collect();
    // They come first, in their order, with the same content.
    let head = &after[..survivors.len().min(after.len())];
    let head_ids: Vec<&str> = head.iter().map(event_id).collect();
    let survivor_ids: Vec<&str> = survivors.iter().map(event_id).collect();
    assert_eq!(
        head_ids,
        survivor_ids,
        "map/replay after the restart must start with the earlier events in their order\nbefore: [{}]\nafter: [{}]",
        list(&before.replay),
        list(&after)
    );
    for (old, new) in survivors.iter().zip(head) {
        assert_eq!(old["timestamp"], new["timestamp"], "event {} changed its timestamp", event_id(old));
        assert_eq!(event_of(old), event_of(new), "event {} changed across the restart", event_id(old));
    }
    assert!(after[survivors.len()..].iter().all(|e| !before_ids.contains(event_id(e))), "earlier events out of order after the restart: [{}]", list(&after));

    // Scopes, as listed before (members may be empty: agents are gone).
    let listed = reader.ok("map/scopes/list", json!({})).await;
    let now: HashMap<String, Value> =
        listed["scopes"].as_array().into_iter().flatten().filter_map(|s| Some((s["id"].as_str()?.to_string(), s.clone()))).collect();
    for old in &before.scopes {
        let id = old["id"].as_str().unwrap_or_default();
        let new = now.get(id).unwrap_or_else(|| panic!("scope {id} is gone after the restart: {listed}"));
        for field in ["name", "parent", "metadata", "visibility", "joinPolicy", "sendPolicy"] {
            assert_eq!(old.get(field), new.get(field), "scope {id}: {field} changed across the restart: {old} → {new}");
        }
    }

    // Paging from an earlier eventId.
    if survivors.len() >= 6 {
        let from = event_id(&survivors[2]);
        let page = reader.ok("map/replay", json!({"afterEventId": from, "limit": 3})).await;
        let got: Vec<&str> = page["events"].as_array().map(|v| v.iter().map(event_id).collect()).unwrap_or_default();
        assert_eq!(got, survivor_ids[3..6], "map/replay after the restart with afterEventId {from} (an earlier event): {page}");
        assert_eq!(page["hasMore"], true, "{page}");
    }

    // New events get new ids, after the old ones.
    reader.register("post-restart", json!({})).await;
    let later = reader.replay_all(None).await;
    let last =
        later.iter().rev().find(|e| event_type(e) == "agent_registered").unwrap_or_else(|| panic!("no agent_registered after the restart: [{}]", list(&later)));
    assert_eq!(event_agent(last), Some("post-restart"), "the newest registration must be the last one replayed: [{}]", list(&later));
    let new_id = event_id(last);
    assert!(!before_ids.contains(new_id), "eventId {new_id} handed out again after the restart");
    let newest_old = before_ids.iter().next_back().copied().unwrap_or_default();
    assert!(new_id > newest_old, "eventIds are orderable: {new_id} (after the restart) must sort after {newest_old} (before it)");
    (reader, survivors)
}

#[tokio::test]
async fn replay_window_and_scopes_survive_restart() {
    let node = start("");
    let mut history = make_history(&node).await;
    drop(std::mem::take(&mut history.clients));
    let node = restart_gracefully(node);
    let (_reader, survivors) = check_after_restart(&node, &history).await;
    assert_eq!(survivors.len(), history.replay.len());
}

/// Wait until the gateway says (admin API, `eventLog.savedThrough`) that
/// the event log is on disk up to `event_id`.
async fn wait_saved_through(node: &Node, event_id: &str) {
    let probe = async || {
        let r = http(&node.gw.addr(), "GET", "/admin/tenants", &[], b"").await;
        assert_eq!(r.status, 200, "/admin/tenants: {}", r.text());
        let tenants = r.json();
        let saved = tenants["tenants"].as_array().into_iter().flatten().filter_map(|t| t["eventLog"]["savedThrough"].as_str()).max().map(String::from);
        if saved.as_deref().is_some_and(|s| s >= event_id) {
            Ok(())
        } else {
            Err(tenants)
        }
    };
    wait::eventually(std::time::Duration::from_secs(10), &format!("the event log saved through {event_id}"), probe).await;
}

#[tokio::test]
async fn saved_events_and_answered_scopes_survive_kill9() {
    let node = start("");
    let mut history = make_history(&node).await;
    // The event log is written behind the traffic (storage.event_log_flush_ms);
    // the admin API says how far. Once it is through the newest event, all of it survives.
    let newest = history.replay.iter().map(event_id).max().expect("events").to_string();
    wait_saved_through(&node, &newest).await;
    // A scope is saved before its creation is answered: kill -9 right after the answer.
    let last = history.clients[0].ok("map/scopes/create", json!({"scopeId": "last-word", "name": "Created just before kill -9"})).await;
    history.scopes.push(last["scope"].clone());
    let node = restart_after_kill9(node);
    drop(std::mem::take(&mut history.clients));
    let (_reader, survivors) = check_after_restart(&node, &history).await;
    assert_eq!(survivors.len(), history.replay.len(), "every event saved before the kill survives it");
}

#[tokio::test]
async fn replay_retention_stays_bounded_across_a_restart() {
    const N: usize = 8;
    let node = start(&format!("[limits]\nreplay_events = {N}\n"));
    let mut admin = node.connect("client").await;
    for i in 0..20 {
        admin.ok("map/scopes/create", json!({"scopeId": format!("s-{i}")})).await;
    }
    let before = admin.replay_all(None).await;
    let newest: Vec<String> = (20 - N..20).map(|i| format!("s-{i}")).collect();
    let got: Vec<&str> = before.iter().map(|e| event_of(e)["data"]["scopeId"].as_str().unwrap_or("?")).collect();
    assert_eq!(got, newest, "with replay_events = {N}, map/replay keeps the newest {N}: [{}]", list(&before));
    drop(admin);

    let node = restart_gracefully(node);
    let mut admin = node.connect("client").await;
    let after = admin.replay_all(None).await;
    assert!(after.len() <= N, "after the restart map/replay returns {} events, more than replay_events = {N}: [{}]", after.len(), list(&after));
    // What is left of the earlier events is their newest part, unchanged.
    let old: Vec<&str> = after.iter().map(event_id).filter(|id| before.iter().any(|b| event_id(b) == *id)).collect();
    assert!(!old.is_empty(), "none of the {N} kept events survived the restart: [{}]", list(&after));
    let tail: Vec<&str> = before[before.len() - old.len()..].iter().map(event_id).collect();
    assert_eq!(old, tail, "the events kept across the restart must be the newest ones\nbefore: [{}]\nafter: [{}]", list(&before), list(&after));

    for i in 0..20 {
        admin.ok("map/scopes/create", json!({"scopeId": format!("t-{i}")})).await;
    }
    let later = admin.replay_all(None).await;
    let got: Vec<&str> = later.iter().map(|e| event_of(e)["data"]["scopeId"].as_str().unwrap_or("?")).collect();
    let newest: Vec<String> = (20 - N..20).map(|i| format!("t-{i}")).collect();
    assert_eq!(got, newest, "after the restart the window still holds only the newest {N}: [{}]", list(&later));
    // Scopes are not events: all forty are still there.
    let scopes = admin.ok("map/scopes/list", json!({})).await;
    let ids = id_set(&scopes["scopes"]);
    let all: BTreeSet<String> = (0..20).flat_map(|i| [format!("s-{i}"), format!("t-{i}")]).collect();
    assert_eq!(ids, all, "map/scopes/list after the restart and more creates");
}

#[tokio::test]
async fn a_window_of_large_events_is_written_in_pages_and_survives_kill9() {
    // About 2.4 MB of events: more than one page (about 1 MiB) per flush.
    let node = start("");
    let mut sender = node.agent("bulky", json!({})).await;
    let payload = "p".repeat(60_000);
    for i in 0..40 {
        sender.ok("map/send", json!({"to": {"agent": "bulky"}, "payload": {"i": i, "pad": payload}})).await;
    }
    let before = sender.replay_all(None).await;
    let sent = before.iter().filter(|e| event_type(e) == "message_sent").count();
    assert_eq!(sent, 40, "every send is in the replay log: [{}]", list(&before));
    wait_saved_through(&node, event_id(before.last().expect("events"))).await;

    let node = restart_after_kill9(node);
    let mut reader = node.connect("client").await;
    let after = reader.replay_all(None).await;
    let ids = |entries: &[Value]| entries.iter().map(event_id).map(String::from).collect::<Vec<_>>();
    // Then come the events of the new connection.
    assert_eq!(ids(&after[..before.len().min(after.len())]), ids(&before), "the whole window is back after kill -9");
    let last = event_of(after.iter().rev().find(|e| event_type(e) == "message_sent").expect("a message_sent"));
    assert_eq!(last["data"]["message"]["payload"]["pad"].as_str().map(str::len), Some(60_000), "payloads come back whole");
}
