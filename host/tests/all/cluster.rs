//! Cluster mode, black-box: three `map-gateway` processes (nodes a, b, c) on
//! loopback, sharing one fresh PostgreSQL database and one cluster name on a
//! NATS (JetStream) server, each with its own data dir. Clients on different
//! nodes must see one gateway: routing of every address form, one event
//! stream, one replay log, one mail store, and sessions that survive the
//! kill -9 of their node by resuming on another. Nodes reaching NATS
//! through a relay the test cuts show what an outage does.
//!
//! PostgreSQL (`MAP_TEST_POSTGRES_URL`, default
//! `postgres://root@127.0.0.1:5432/test`) and NATS with JetStream
//! (`MAP_TEST_NATS_URL`, default `nats://127.0.0.1:4222`) must be running:
//! these tests fail without them. Replication is asynchronous, so a write on
//! one node is awaited on another by polling until a deadline
//! (`common::wait`, within `common::cluster::REPLICATION`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::wait;
use serde_json::{json, Value};

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The panic of a spawned task, re-raised with its own message.
fn joined<T>(r: Result<T, tokio::task::JoinError>) -> T {
    r.unwrap_or_else(|e| match e.try_into_panic() {
        Ok(p) => std::panic::resume_unwind(p),
        Err(e) => panic!("task failed: {e}"),
    })
}

// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cross_node_send_every_address_form() {
    let cluster = Cluster::start(&["a", "b", "c"], ClusterOptions::default()).await;
    let (a, b, c) = (cluster.node("a"), cluster.node("b"), cluster.node("c"));

    // The tree spans the nodes:
    //   root (b, lead)
    //   ├── mid (a, coord) ← the sender
    //   │   ├── kid1 (b, worker)
    //   │   │   └── grandkid (c, worker)
    //   │   └── kid2 (c, worker)
    //   └── sib (c, reviewer)
    //   loner (b, worker), outside the tree
    // Scope "team" (created on a): mid, kid1 (b), sib (c), grandkid (c).
    // A parent must be known on the child's node before the child registers.
    let root = b.agent("root", json!({"role": "lead"})).await;
    let mut mid = a.connect("agent").await;
    mid.wait_for_agent("root").await;
    mid.register("mid", json!({"role": "coord", "parent": "root"})).await;
    let mut kid1 = b.connect("agent").await;
    kid1.wait_for_agent("mid").await;
    kid1.register("kid1", json!({"role": "worker", "parent": "mid"})).await;
    let mut kid2 = c.connect("agent").await;
    kid2.wait_for_agent("mid").await;
    kid2.register("kid2", json!({"role": "worker", "parent": "mid"})).await;
    let mut sib = c.connect("agent").await;
    sib.wait_for_agent("root").await;
    sib.register("sib", json!({"role": "reviewer", "parent": "root"})).await;
    let mut grandkid = c.connect("agent").await;
    grandkid.wait_for_agent("kid1").await;
    grandkid.register("grandkid", json!({"role": "worker", "parent": "kid1"})).await;
    let loner = b.agent("loner", json!({"role": "worker"})).await;
    let observer = c.connect("client").await;

    mid.ok("map/scopes/create", json!({"scopeId": "team", "name": "Team"})).await;
    mid.ok("map/scopes/join", json!({"scopeId": "team", "agentId": "mid"})).await;
    for (member, id) in [(&mut kid1, "kid1"), (&mut sib, "sib"), (&mut grandkid, "grandkid")] {
        let what = format!("scope team (created on node a) visible on node {}", member.node);
        member.wait_for(&what, "map/scopes/get", json!({"scopeId": "team"}), |r| r["result"]["scope"]["id"] == "team").await;
        member.ok("map/scopes/join", json!({"scopeId": "team", "agentId": id})).await;
    }

    // Node a must know everything before routing from it.
    let everyone = set(&["root", "mid", "kid1", "kid2", "sib", "grandkid", "loner"]);
    for id in &everyone {
        mid.wait_for_agent(id).await;
    }
    let team = set(&["mid", "kid1", "sib", "grandkid"]);
    mid.wait_for("the team's four members (joined on a, b and c) known on node a", "map/scopes/members", json!({"scopeId": "team"}), |r| {
        id_set(&r["result"]["members"]) == team
    })
    .await;
    mid.wait_for("grandkid's parent kid1 known on node a", "map/agents/get", json!({"agentId": "grandkid"}), |r| r["result"]["agent"]["parent"] == "kid1")
        .await;

    let mut others = vec![root, kid1, kid2, sib, grandkid, loner, observer];
    let pid = |agent: &str, others: &[Client]| others.iter().find(|c| c.agent.as_deref() == Some(agent)).expect("a client of that agent").participant_id();
    let agent_pids: BTreeSet<String> = ["root", "kid1", "kid2", "sib", "grandkid", "loner"].iter().map(|a| pid(a, &others)).collect();
    let observer_pid = others[6].participant_id();
    let all_pids: BTreeSet<String> = agent_pids.iter().cloned().chain([observer_pid.clone()]).collect();
    let sib_pid = pid("sib", &others);

    let cases: Vec<(&str, Value, BTreeSet<String>)> = vec![
        ("bare agent id", json!("grandkid"), set(&["grandkid"])),
        ("agent: prefix", json!("agent:loner"), set(&["loner"])),
        ("agent", json!({"agent": "kid1"}), set(&["kid1"])),
        ("agents", json!({"agents": ["root", "sib", "loner"]}), set(&["root", "sib", "loner"])),
        ("scope", json!({"scope": "team"}), set(&["kid1", "sib", "grandkid"])),
        ("scope: prefix", json!("scope:team"), set(&["kid1", "sib", "grandkid"])),
        ("role", json!({"role": "worker"}), set(&["kid1", "kid2", "grandkid", "loner"])),
        ("role within scope", json!({"role": "worker", "within": "team"}), set(&["kid1", "grandkid"])),
        ("parent", json!({"parent": true}), set(&["root"])),
        ("children", json!({"children": true}), set(&["kid1", "kid2"])),
        ("ancestors", json!({"ancestors": true}), set(&["root"])),
        ("descendants", json!({"descendants": true}), set(&["kid1", "kid2", "grandkid"])),
        ("descendants depth 1", json!({"descendants": true, "depth": 1}), set(&["kid1", "kid2"])),
        ("siblings", json!({"siblings": true}), set(&["sib"])),
        ("broadcast", json!({"broadcast": true}), set(&["root", "kid1", "kid2", "sib", "grandkid", "loner"])),
        ("participant", json!({"participant": sib_pid}), [sib_pid.clone()].into()),
        ("participants agents", json!({"participants": "agents"}), agent_pids.clone()),
        ("participants clients", json!({"participants": "clients"}), [observer_pid.clone()].into()),
        ("participants all", json!({"participants": "all"}), all_pids.clone()),
        ("array of addresses", json!([{"agent": "kid2"}, "loner"]), set(&["kid2", "loner"])),
    ];
    for (form, to, expected) in cases {
        let sent = mid.ok("map/send", json!({"to": to, "payload": {"form": form}})).await;
        let delivered = id_set(&sent["delivered"]);
        assert_eq!(delivered, expected, "map/send from mid on node a to {to} ({form}): delivered {}", sent["delivered"]);
        assert_eq!(sent["delivered"].as_array().map(Vec::len), Some(expected.len()), "{form}: each recipient once: {sent}");
        for recipient in &expected {
            let client = others
                .iter_mut()
                .find(|c| c.agent.as_deref() == Some(recipient.as_str()) || c.participant_id() == *recipient)
                .unwrap_or_else(|| panic!("{form}: no test client for recipient {recipient}"));
            let what = format!("map/message of the {form:?} send (from mid on node a) on {recipient}'s connection");
            let note = client.expect_note(&what, REPLICATION, |n| is_message_with(n, "form", &json!(form))).await;
            let m = &note["params"]["message"];
            assert_eq!(m["from"], "mid", "{form}: on node {}: {note}", client.node);
            assert_eq!(m["id"], sent["messageId"], "{form}: on node {}: {note}", client.node);
            assert_eq!(m["to"], to, "{form}: on node {}: {note}", client.node);
        }
    }

    // Node c sees the agents, the scope and the structure of all nodes.
    let observer = &mut others[6];
    let listed = observer
        .wait_for("map/agents/list on node c lists the agents of a, b and c", "map/agents/list", json!({}), |r| id_set(&r["result"]["agents"]) == everyone)
        .await;
    assert_eq!(listed["result"]["agents"].as_array().map(Vec::len), Some(everyone.len()), "{listed}");
    let workers = observer.ok("map/agents/list", json!({"filter": {"roles": ["worker"]}})).await;
    assert_eq!(id_set(&workers["agents"]), set(&["kid1", "kid2", "grandkid", "loner"]), "role filter on node c: {workers}");
    let got = observer.ok("map/agents/get", json!({"agentId": "mid"})).await;
    assert_eq!(got["agent"]["parent"], "root", "mid (node a) seen from node c: {got}");
    assert_eq!(got["agent"]["role"], "coord", "{got}");
    let children = observer
        .wait_for("mid's children (kid1 on b, kid2 on c) on node c", "map/agents/get", json!({"agentId": "mid"}), |r| {
            id_set(&r["result"]["agent"]["children"]) == set(&["kid1", "kid2"])
        })
        .await;
    assert_eq!(children["result"]["agent"]["id"], "mid");
    let scopes = observer.ok("map/scopes/list", json!({})).await;
    assert!(id_set(&scopes["scopes"]).contains("team"), "map/scopes/list on node c lacks team (created on node a): {scopes}");
    let members =
        observer.wait_for("team's members on node c", "map/scopes/members", json!({"scopeId": "team"}), |r| id_set(&r["result"]["members"]) == team).await;
    assert_eq!(id_set(&members["result"]["members"]), team);
    let graph = observer.ok("map/structure/graph", json!({})).await;
    assert_eq!(id_set(&graph["nodes"]), everyone, "map/structure/graph on node c: {graph}");
    let edges: BTreeSet<(String, String)> = graph["edges"]
        .as_array()
        .unwrap_or_else(|| panic!("graph without edges: {graph}"))
        .iter()
        .filter(|e| e["type"] == "parent-child")
        .map(|e| (e["from"].as_str().unwrap_or_default().to_string(), e["to"].as_str().unwrap_or_default().to_string()))
        .collect();
    let expected_edges: BTreeSet<(String, String)> = [("root", "mid"), ("mid", "kid1"), ("kid1", "grandkid"), ("mid", "kid2"), ("root", "sib")]
        .iter()
        .map(|(f, t)| (f.to_string(), t.to_string()))
        .collect();
    assert_eq!(edges, expected_edges, "parent-child edges of map/structure/graph on node c: {graph}");
}

// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn subscription_on_c_sees_events_of_a_and_b_gap_free() {
    let cluster = Cluster::start(&["a", "b", "c"], ClusterOptions::default()).await;
    let (a, b, c) = (cluster.node("a"), cluster.node("b"), cluster.node("c"));
    let _sink = c.agent("sink", json!({})).await;
    let mut gen_a = a.agent("gen-a", json!({})).await;
    let mut gen_b = b.agent("gen-b", json!({})).await;
    gen_a.wait_for_agent("sink").await;
    gen_b.wait_for_agent("sink").await;
    let mut watcher = c.connect("client").await;
    watcher.wait_for_agent("gen-a").await;
    watcher.wait_for_agent("gen-b").await;
    let sub = watcher.subscribe(json!({"eventTypes": ["agent_registered", "message_sent"]})).await;
    // The same events under the SDK's dotted names, as this filter spells them.
    let dotted = watcher.subscribe(json!({"eventTypes": ["agent.registered"]})).await;

    // Both nodes at once: agents registered, messages sent to sink (on c).
    const N: usize = 30;
    let run = |mut g: Client, tag: &'static str| async move {
        for i in 0..N {
            g.register(&format!("{tag}-reg-{i}"), json!({})).await;
            if i % 2 == 0 {
                let sent = g.ok("map/send", json!({"to": {"agent": "sink"}, "payload": {"origin": tag, "i": i}})).await;
                assert_eq!(sent["delivered"], json!(["sink"]), "node {}: {sent}", g.node);
            }
        }
        g
    };
    let (_gen_a, _gen_b) = tokio::join!(run(gen_a, "a"), run(gen_b, "b"));

    // What c must deliver: a key per event.
    let key = |n: &Value| -> Option<String> {
        match event_type(n) {
            "agent_registered" => event_agent(n).map(String::from),
            "message_sent" => {
                let p = &event_of(n)["data"]["message"]["payload"];
                Some(format!("send-{}-{}", p["origin"].as_str()?, p["i"].as_u64()?))
            }
            _ => None,
        }
    };
    let mut expected = BTreeSet::new();
    for tag in ["a", "b"] {
        for i in 0..N {
            expected.insert(format!("{tag}-reg-{i}"));
            if i % 2 == 0 {
                expected.insert(format!("send-{tag}-{i}"));
            }
        }
    }
    let all_seen = |got: &[Value]| {
        let seen: BTreeSet<String> = got.iter().filter_map(key).collect();
        expected.is_subset(&seen)
    };
    let mut events = watcher.events(&sub, REPLICATION, all_seen).await;
    // Watch a little longer for late duplicates.
    events.extend(watcher.events(&sub, Duration::from_secs(1), |_| false).await);

    let keys: Vec<Option<String>> = events.iter().map(key).collect();
    let seen: BTreeSet<String> = keys.iter().flatten().cloned().collect();
    let missing: Vec<&String> = expected.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "subscription on node c missed events made on a and b: {missing:?}\nreceived: {}",
        events.iter().map(describe).collect::<Vec<_>>().join(", ")
    );
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for k in keys.iter().flatten() {
        *counts.entry(k).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "events delivered more than once on node c: {twice:?}");
    assert_numbered_from_one(&events, "map/event on node c for events of nodes a and b");

    // Each node's events keep the order in which that node acknowledged them.
    for tag in ["a", "b"] {
        let regs: Vec<usize> = keys.iter().flatten().filter_map(|k| k.strip_prefix(&format!("{tag}-reg-"))?.parse().ok()).collect();
        assert!(regs.windows(2).all(|w| w[0] < w[1]), "registrations made one after the other on node {tag} arrive out of order on node c: {regs:?}");
        let sends: Vec<usize> = keys.iter().flatten().filter_map(|k| k.strip_prefix(&format!("send-{tag}-"))?.parse().ok()).collect();
        assert!(sends.windows(2).all(|w| w[0] < w[1]), "sends made one after the other on node {tag} arrive out of order on node c: {sends:?}");
    }
    let spelled = watcher.events(&dotted, REPLICATION, |got| got.len() >= 2 * N).await;
    assert_eq!(spelled.len(), 2 * N, "registrations on the dotted subscription");
    assert!(
        spelled.iter().all(|n| event_type(n) == "agent.registered"),
        "typed as the filter names them: {}",
        spelled.iter().map(describe).collect::<Vec<_>>().join(", ")
    );
}

// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_from_another_node() {
    let cluster = Cluster::start(&["a", "b", "c"], ClusterOptions::default()).await;
    let (a, b) = (cluster.node("a"), cluster.node("b"));
    let _sink = b.agent("sink-b", json!({})).await;
    let mut maker = a.agent("maker", json!({})).await;
    maker.wait_for_agent("sink-b").await;
    const N: usize = 25;
    for i in 0..N {
        maker.register(&format!("rp-{i}"), json!({})).await;
    }
    let sent = maker.ok("map/send", json!({"to": {"agent": "sink-b"}, "payload": {"marker": "replayed"}})).await;
    assert_eq!(sent["delivered"], json!(["sink-b"]), "{sent}");

    let filter = json!({"eventTypes": ["agent_registered", "message_sent"]});
    let ours = |e: &Value| match event_type(e) {
        "agent_registered" => event_agent(e).is_some_and(|a| a.starts_with("rp-")),
        "message_sent" => event_of(e)["data"]["message"]["payload"]["marker"] == "replayed",
        _ => false,
    };
    let on_a: Vec<Value> = maker.replay_all(Some(filter.clone())).await.into_iter().filter(ours).collect();
    assert_eq!(on_a.len(), N + 1, "map/replay on node a, where the events were made: {}", on_a.iter().map(describe).collect::<Vec<_>>().join(", "));
    let on_a_ids: Vec<&str> = on_a.iter().map(event_id).collect();

    // Node b serves the same events: same ids, same order.
    let mut reader = b.connect("client").await;
    reader
        .wait_for("map/replay on node b holds the 26 events made on node a", "map/replay", json!({"filter": filter, "limit": 1000}), |r| {
            r["result"]["events"].as_array().is_some_and(|evs| evs.iter().filter(|e| ours(e)).count() == N + 1)
        })
        .await;
    let all_on_b = reader.replay_all(Some(filter.clone())).await;
    let on_b: Vec<&Value> = all_on_b.iter().filter(|e| ours(e)).collect();
    let on_b_ids: Vec<&str> = on_b.iter().map(|e| event_id(e)).collect();
    assert_eq!(on_b_ids, on_a_ids, "map/replay on node b must return node a's events with the same eventIds in the same order");
    for (x, y) in on_a.iter().zip(&on_b) {
        assert_eq!(event_of(x)["type"], event_of(y)["type"], "{x} vs {y}");
        assert_eq!(event_of(x)["data"], event_of(y)["data"], "event {} differs between nodes a and b", event_id(x));
        assert_eq!(x["timestamp"], y["timestamp"], "event {} has another timestamp on node b", event_id(x));
    }

    // afterEventId paging on node b, small pages.
    let mut paged: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    for round in 0.. {
        assert!(round < 100, "paging on node b does not end");
        let mut params = json!({"filter": filter, "limit": 7});
        if let Some(x) = &after {
            params["afterEventId"] = json!(x);
        }
        let page = reader.ok("map/replay", params).await;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        assert!(events.len() <= 7, "limit 7 returned {}", events.len());
        paged.extend(events.iter().map(|e| event_id(e).to_string()));
        if page["hasMore"] != true {
            break;
        }
        assert!(!events.is_empty(), "hasMore with an empty page: {page}");
        after = events.last().map(|e| event_id(e).to_string());
    }
    let full: Vec<String> = all_on_b.iter().map(|e| event_id(e).to_string()).collect();
    assert_eq!(paged, full, "afterEventId pages of 7 on node b must add up to the full replay");

    // An eventId handed out by node a is a valid afterEventId on node b.
    let tenth = on_a_ids[9];
    let rest = reader.ok("map/replay", json!({"filter": filter, "afterEventId": tenth, "limit": 1000})).await;
    let rest_ids: Vec<&str> = rest["events"].as_array().map(|v| v.iter().filter(|e| ours(e)).map(event_id).collect()).unwrap_or_default();
    assert_eq!(rest_ids, on_a_ids[10..], "map/replay on node b after node a's eventId {tenth}: {rest}");

    // And the other way: node b's event is in node a's replay.
    maker
        .wait_for(
            "sink-b's registration (node b) in map/replay on node a",
            "map/replay",
            json!({"filter": {"eventTypes": ["agent_registered"]}, "limit": 1000}),
            |r| r["result"]["events"].as_array().is_some_and(|evs| evs.iter().any(|e| event_agent(e) == Some("sink-b"))),
        )
        .await;
}

// ---------------------------------------------------------------------------

/// `mail/turn` with text content: the turn.
/// Plugin storage on one PostgreSQL keeps its guarantees with writers on
/// every node at once: mail turns written concurrently from three nodes
/// into one conversation are all there, each once, and read the same
/// from every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_mail_turns_from_every_node_are_all_kept() {
    const WRITERS: usize = 3;
    const TURNS: usize = 10;
    let cluster = Cluster::start(&["a", "b", "c"], ClusterOptions::default()).await;
    let mut owner = cluster.node("a").agent("owner", json!({})).await;
    let created = owner.ok("mail/create", json!({"subject": "busy"})).await;
    let conv = created["conversation"]["id"].as_str().unwrap_or_else(|| panic!("mail/create: {created}")).to_string();
    let mut writers = Vec::new();
    for node in ["a", "b", "c"] {
        for w in 0..WRITERS {
            let mut client = cluster.node(node).agent(&format!("w-{node}-{w}"), json!({})).await;
            let conv = conv.clone();
            writers.push(tokio::spawn(async move {
                client.wait_for("mail/join of the conversation", "mail/join", json!({"conversationId": conv}), |r| r.get("result").is_some()).await;
                let mut ids = Vec::new();
                for i in 0..TURNS {
                    let text = format!("{} #{i}", client.node);
                    let t = turn(&mut client, &conv, &text, None).await;
                    ids.push(t["id"].as_str().unwrap_or_default().to_string());
                }
                (client, ids)
            }));
        }
    }
    let mut written = BTreeSet::new();
    let mut readers = Vec::new();
    for w in writers {
        let (client, ids) = w.await.expect("a writer panicked");
        written.extend(ids);
        readers.push(client);
    }
    assert_eq!(written.len(), 3 * WRITERS * TURNS, "every answered mail/turn has its own id");
    for reader in readers.iter_mut().step_by(WRITERS) {
        let turns = reader.all_turns(&conv).await;
        let listed: Vec<String> = turns.iter().filter_map(|t| t["id"].as_str().map(String::from)).collect();
        let unique: BTreeSet<String> = listed.iter().cloned().collect();
        assert_eq!(listed.len(), unique.len(), "node {}: a turn listed twice", reader.node);
        assert_eq!(unique, written, "node {}: mail/turns/list differs from the answered turns", reader.node);
    }
}

/// A node stopped gracefully appends what it still had queued for the
/// event log before it exits: events answered just before SIGTERM are in
/// `map/replay` on the other nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graceful_stop_appends_queued_events() {
    let mut cluster = Cluster::start(&["a", "b"], ClusterOptions::default()).await;
    let mut reader = cluster.node("b").connect("client").await;
    let mut maker = cluster.node("a").connect("client").await;
    let mut ids = BTreeSet::new();
    for i in 0..50 {
        let r = maker.ok("map/agents/register", json!({"agentId": format!("last-{i}")})).await;
        ids.insert(r["agent"]["id"].as_str().unwrap_or_default().to_string());
    }
    let status = cluster.node_mut("a").gw.terminate();
    assert!(status.success(), "node a's exit status after SIGTERM: {status:?}");
    let replayed = reader.replay_all(Some(json!({"eventTypes": ["agent_registered"]}))).await;
    let got: BTreeSet<String> = replayed.iter().filter_map(event_agent).map(String::from).collect();
    let missing: Vec<&String> = ids.difference(&got).collect();
    assert!(missing.is_empty(), "registrations answered on node a before its graceful stop, missing from map/replay on node b: {missing:?}");
}

async fn turn(client: &mut Client, conversation: &str, text: &str, reply_to: Option<&str>) -> Value {
    let mut params = json!({"conversationId": conversation, "contentType": "text", "content": {"text": text}});
    if let Some(r) = reply_to {
        params["inReplyTo"] = json!(r);
    }
    let r = client.ok("mail/turn", params).await;
    if !r["turn"]["id"].is_string() {
        client.fail(&format!("mail/turn answered {r}"));
    }
    r["turn"].clone()
}

/// An agent session that declared `capabilities.mail` at `map/connect`.
async fn mail_agent(node: &Node, id: &str) -> Client {
    let mut c = node.connect_with(json!({"protocolVersion": 1, "participantType": "agent", "capabilities": {"mail": {"canJoin": true}}})).await;
    c.register(id, json!({})).await;
    c
}

/// `mail/turn.received` reaches participants' sessions on other nodes, in
/// both directions, and not the author's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mail_turn_received_across_nodes() {
    let cluster = Cluster::start(&["a", "b"], ClusterOptions::default()).await;
    let mut alice = mail_agent(cluster.node("a"), "alice-m").await;
    let mut bob = mail_agent(cluster.node("b"), "bob-m").await;
    alice.wait_for_agent("bob-m").await;
    let created = alice.ok("mail/create", json!({"subject": "heard across nodes", "initialParticipants": [{"id": "bob-m"}]})).await;
    let conv = created["conversation"]["id"].as_str().unwrap_or_else(|| panic!("mail/create on node a: {created}")).to_string();
    let received = |turn: &Value| {
        let id = turn["id"].clone();
        move |n: &Value| n["method"] == "mail/turn.received" && n["params"]["turn_id"] == id
    };

    let t1 = turn(&mut alice, &conv, "from a", None).await;
    let heard = bob.expect_note("mail/turn.received on node b for alice's turn (written on node a)", REPLICATION, received(&t1)).await;
    let want = json!({
        "conversation_id": conv, "turn_id": t1["id"], "participant_id": "alice-m", "content_type": "text", "content": {"text": "from a"},
        "thread_id": null, "created_at": t1["timestamp"],
    });
    assert_eq!(heard["params"], want, "{heard}");
    let t2 = turn(&mut bob, &conv, "from b", Some(t1["id"].as_str().unwrap_or_default())).await;
    alice.expect_note("mail/turn.received on node a for bob's turn (written on node b)", REPLICATION, received(&t2)).await;
    // Each socket's frames come in order: its own turn's would have come first.
    assert!(alice.note(Duration::ZERO, received(&t1)).await.is_none(), "alice was told of her own turn");
    let t3 = turn(&mut alice, &conv, "again from a", None).await;
    bob.expect_note("mail/turn.received on node b for alice's second turn", REPLICATION, received(&t3)).await;
    assert!(bob.note(Duration::ZERO, received(&t2)).await.is_none(), "bob was told of his own turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mail_conversation_across_nodes() {
    let cluster = Cluster::start(&["a", "b", "c"], ClusterOptions::default()).await;
    let (a, b, c) = (cluster.node("a"), cluster.node("b"), cluster.node("c"));
    let mut alice = a.agent("alice", json!({})).await;
    let mut bob = b.agent("bob", json!({})).await;
    let mut carol = c.agent("carol", json!({})).await;
    alice.wait_for_agent("bob").await;
    bob.subscribe(json!({"eventTypes": ["mail.turn.added"]})).await;

    let created = alice.ok("mail/create", json!({"subject": "across nodes", "initialParticipants": [{"id": "bob"}]})).await;
    let conv = created["conversation"]["id"].as_str().unwrap_or_else(|| panic!("mail/create on node a: {created}")).to_string();
    // carol joins from node c.
    let joined = carol
        .wait_for("mail/join on node c of the conversation created on node a", "mail/join", json!({"conversationId": conv}), |r| {
            r.get("result").is_some() || r["error"]["code"] == 10004
        })
        .await;
    assert_eq!(joined["result"]["participant"]["id"], "carol", "{joined}");

    let t1 = turn(&mut alice, &conv, "hello from a", None).await;
    let t1_id = t1["id"].as_str().unwrap_or_default().to_string();
    // Bob on node b hears of it live.
    let heard = bob
        .expect_note("mail.turn.added for alice's turn (written on node a)", REPLICATION, |n| {
            is_event_type(n, "mail.turn.added") && event_of(n)["data"]["turn"]["id"] == t1_id.as_str()
        })
        .await;
    assert_eq!(event_of(&heard)["data"]["conversationId"], conv.as_str(), "{heard}");
    let t2 = turn(&mut bob, &conv, "reply from b", Some(&t1_id)).await;
    let t3 = turn(&mut carol, &conv, "c was here", None).await;
    // A map/send with meta.mail from node a is recorded as an intercepted turn.
    let sent = alice.ok("map/send", json!({"to": {"agent": "bob"}, "payload": {"via": "send"}, "meta": {"mail": {"conversationId": conv}}})).await;
    assert_eq!(sent["delivered"], json!(["bob"]), "{sent}");
    let message_id = sent["messageId"].clone();

    let written = [(&t1, "alice", "hello from a"), (&t2, "bob", "reply from b"), (&t3, "carol", "c was here")];
    for reader in [&mut alice, &mut bob, &mut carol] {
        let what = format!("the three turns and the intercepted one in mail/turns/list on node {}", reader.node);
        let probe = async || {
            let turns = reader.all_turns(&conv).await;
            if turns.len() >= 4 {
                Ok(turns)
            } else {
                Err(turns)
            }
        };
        // Checked below, with what came, when not all four came.
        let turns = wait::until(REPLICATION, probe).await.unwrap_or_else(|turns| turns);
        let explicit: Vec<&Value> = turns.iter().filter(|t| t["source"]["type"] != "intercepted").collect();
        assert_eq!(explicit.len(), 3, "{what}: {turns:?}");
        for (got, (want, author, text)) in explicit.iter().zip(written) {
            assert_eq!(got["id"], want["id"], "{what}: order of turns: {turns:?}");
            assert_eq!(got["participant"], author, "{what}: {got}");
            assert_eq!(got["content"]["text"], text, "{what}: {got}");
        }
        assert_eq!(explicit[1]["inReplyTo"], t1_id.as_str(), "{what}: {:?}", explicit[1]);
        let intercepted: Vec<&Value> = turns.iter().filter(|t| t["source"]["type"] == "intercepted").collect();
        assert_eq!(intercepted.len(), 1, "{what}: {turns:?}");
        assert_eq!(intercepted[0]["source"]["messageId"], message_id, "{what}: {:?}", intercepted[0]);
        assert_eq!(intercepted[0]["content"], json!({"via": "send"}), "{what}");
    }
    let got = carol.ok("mail/get", json!({"conversationId": conv, "include": {"participants": true}})).await;
    assert_eq!(id_set(&got["participants"]), set(&["alice", "bob", "carol"]), "mail/get on node c: {got}");
}

// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_node_clients_resume_elsewhere() {
    // Checkpoints every 50 ms: several are saved between the pause below and the kill.
    let options = ClusterOptions { resume_window_secs: 60, presence_timeout_ms: 2000, extra: "checkpoint_ms = 50\n".into(), ..Default::default() };
    let presence = Duration::from_millis(options.presence_timeout_ms);
    let mut cluster = Cluster::start(&["a", "b", "c"], options).await;

    let mut watcher = cluster.node("b").connect("client").await;
    watcher.subscribe(json!({"eventTypes": ["participant_disconnected"]})).await;
    let mut reader = cluster.node("c").agent("reader-c", json!({})).await;
    let mut worker = cluster.node("a").connect("agent").await;
    worker.register("worker-a", json!({})).await;
    worker.wait_for_agent("reader-c").await;
    let (token, session, participant) = (worker.resume_token(), worker.session_id(), worker.participant_id());
    let sub = worker.subscribe(json!({"eventTypes": ["agent_registered"]})).await;
    // A paused subscription stays paused where the session resumes.
    let held = worker.subscribe(json!({"eventTypes": ["agent_registered"], "fromAgents": ["tick-*", "after-resume"]})).await;
    worker.ok("map/subscriptions/pause", json!({"subscriptionId": held})).await;
    let created = worker.ok("mail/create", json!({"subject": "survives a crash", "initialParticipants": [{"id": "reader-c"}]})).await;
    let conv = created["conversation"]["id"].as_str().unwrap_or_else(|| panic!("{created}")).to_string();

    // Events for the worker's subscription keep coming from node c throughout.
    let ticker = cluster.node("c").connect("client").await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let ticked_so_far = Arc::new(AtomicUsize::new(0));
    let ticks = tokio::spawn({
        let count = ticked_so_far.clone();
        async move {
            let mut t = ticker;
            let mut acked = Vec::new();
            while !*stopped.borrow() {
                let id = format!("tick-{}", acked.len());
                t.register(&id, json!({})).await;
                acked.push(id);
                count.store(acked.len(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await; // pacing, not waiting
            }
            (t, acked)
        }
    });

    // The worker on node a: mail turns and sends, each answered, until a dies.
    let progress = Arc::new(AtomicUsize::new(0));
    let traffic = tokio::spawn({
        let (progress, conv) = (progress.clone(), conv.clone());
        async move {
            let mut w = worker;
            let (mut turns, mut sends) = (Vec::new(), Vec::new());
            for n in 0.. {
                let params = json!({"conversationId": conv, "contentType": "text", "content": {"text": format!("turn {n}")}});
                let Ok(resp) = w.try_call("mail/turn", params).await else { break };
                match resp["result"]["turn"]["id"].as_str() {
                    Some(id) => turns.push(id.to_string()),
                    None => w.fail(&format!("mail/turn {n} before the kill answered {resp}")),
                }
                let Ok(resp) = w.try_call("map/send", json!({"to": {"agent": "reader-c"}, "payload": {"n": n}})).await else { break };
                if resp["result"]["delivered"] != json!(["reader-c"]) {
                    w.fail(&format!("map/send {n} to reader-c (node c) before the kill answered {resp}"));
                }
                sends.push(n);
                progress.store(turns.len(), Ordering::SeqCst);
            }
            (w, turns, sends)
        }
    });
    let probe = async || {
        assert!(!traffic.is_finished(), "the worker's traffic on node a stopped before the kill\n{}", cluster.logs());
        let (turns, ticked) = (progress.load(Ordering::SeqCst), ticked_so_far.load(Ordering::SeqCst));
        if turns >= 20 && ticked >= 10 {
            Ok(())
        } else {
            Err(format!("{turns} turns, {ticked} agents"))
        }
    };
    if let Err(seen) = wait::until(Duration::from_secs(30), probe).await {
        panic!("within 30 s the worker on node a did not get 20 mail turns answered or the ticker on c 10 agents registered ({seen})\n{}", cluster.logs());
    }
    cluster.kill9("a");
    let killed_at = Instant::now();
    let (mut dead, acked_turns, acked_sends) = joined(traffic.await);
    let kept = dead.ws.take_kept();
    assert!(kept.iter().all(|n| !is_event_of(n, &held)), "the paused subscription delivered on node a");
    let before: Vec<Value> = kept.into_iter().filter(|n| is_event_of(n, &sub)).collect();
    assert!(!before.is_empty(), "the worker's subscription on node a delivered no event from node c's ticker before the kill");
    assert_numbered_from_one(&before, "the subscription on node a before the kill");

    // (a) The other nodes notice: participant_disconnected within the presence timeout (plus a margin).
    let margin = Duration::from_secs(6);
    let what = format!("participant_disconnected for the worker's session (participant {participant}) of killed node a");
    let gone = watcher
        .expect_note(&what, presence + margin, |n| is_event_type(n, "participant_disconnected") && event_of(n)["data"]["participantId"] == participant.as_str())
        .await;
    let noticed = killed_at.elapsed();
    assert!(noticed <= presence + margin, "node b reported node a's session gone only after {noticed:?}: {gone}");

    // (b) The worker resumes on node b: same session, same subscription.
    let mut resumed = cluster.node("b").resume("agent", &token).await;
    let hello = resumed.hello.clone();
    assert_eq!(hello["reconnected"], true, "map/connect on node b with the resumeToken from node a: {hello}");
    assert_eq!(hello["sessionId"], session.as_str(), "{hello}");
    assert_eq!(hello["participantId"], participant.as_str(), "{hello}");
    assert!(id_set(&hello["ownedAgents"]).contains("worker-a"), "the resumed session owns worker-a again: {hello}");

    let _ = stop.send(true);
    let (mut ticker, ticked) = joined(ticks.await);
    ticker.register("after-resume", json!({})).await;
    let before_ids: BTreeSet<String> = before.iter().filter_map(event_agent).map(String::from).collect();
    let owed: BTreeSet<String> = ticked.iter().cloned().chain(["after-resume".to_string()]).filter(|t| !before_ids.contains(t)).collect();
    let after = resumed
        .events(&sub, REPLICATION, |got| {
            let seen: BTreeSet<&str> = got.iter().filter_map(event_agent).collect();
            owed.iter().all(|t| seen.contains(t.as_str()))
        })
        .await;
    let describe_all = |v: &[Value]| v.iter().map(describe).collect::<Vec<_>>().join(", ");
    assert!(
        after.iter().any(|n| event_agent(n) == Some("after-resume")),
        "the subscription made on node a ({sub}) delivers nothing on node b after the resume; got: [{}]",
        describe_all(&after)
    );
    // Numbering goes on where node a stopped: a repeat must be the very same event.
    let mut numbered: BTreeMap<u64, String> = before.iter().map(|n| (sequence(n), event_id(n).to_string())).collect();
    for n in &after {
        let (seq, id) = (sequence(n), event_id(n).to_string());
        match numbered.get(&seq) {
            Some(known) => assert_eq!(known, &id, "sequence number {seq} named another event before: after the resume got {}", describe(n)),
            None => {
                let next = numbered.keys().next_back().copied().unwrap_or(0) + 1;
                assert_eq!(
                    seq,
                    next,
                    "gap in the subscription's numbering across the resume (last before the kill #{}); before: [{}]; after: [{}]",
                    before.len(),
                    describe_all(&before),
                    describe_all(&after)
                );
                numbered.insert(seq, id);
            }
        }
    }
    // Nothing acknowledged on node c while the worker was away is lost.
    let delivered: BTreeSet<&str> = before.iter().chain(&after).filter_map(event_agent).collect();
    let lost: Vec<&String> = ticked.iter().filter(|t| !delivered.contains(t.as_str())).collect();
    assert!(lost.is_empty(), "agent_registered events of node c never reached the resumed subscription: {lost:?}");
    // The paused one sends nothing on node b either; resumed, it sends what it held, from #1.
    if let Some(n) = resumed.note(Duration::from_millis(500), |n| is_event_of(n, &held)).await {
        panic!("the paused subscription delivered on node b before its resume: {}\n{}", describe(&n), cluster.logs());
    }
    resumed.ok("map/subscriptions/resume", json!({"subscriptionId": held})).await;
    let released = resumed.events(&held, REPLICATION, |got| got.iter().any(|n| event_agent(n) == Some("after-resume"))).await;
    assert!(released.iter().any(|n| event_agent(n) == Some("after-resume")), "the resumed subscription released nothing: [{}]", describe_all(&released));
    assert_numbered_from_one(&released, "the subscription paused on node a, resumed on node b");

    // The resumed session works on node b.
    let more = resumed.ok("mail/turn", json!({"conversationId": conv, "contentType": "text", "content": {"text": "after the resume"}})).await;
    let after_turn = more["turn"]["id"].as_str().unwrap_or_else(|| panic!("{more}")).to_string();
    let sent = reader.ok("map/send", json!({"to": {"agent": "worker-a"}, "payload": {"hello": "again"}})).await;
    assert_eq!(sent["delivered"], json!(["worker-a"]), "map/send from node c to the resumed worker-a: {sent}");
    resumed.expect_note("map/message to worker-a on its resumed session (node b)", REPLICATION, |n| is_message_with(n, "hello", &json!("again"))).await;

    // (c) Every mail turn answered before the kill is readable from node c.
    let turns = reader.all_turns(&conv).await;
    let stored: BTreeSet<&str> = turns.iter().filter_map(|t| t["id"].as_str()).collect();
    let missing: Vec<&String> = acked_turns.iter().filter(|t| !stored.contains(t.as_str())).collect();
    assert!(missing.is_empty(), "{} of {} mail turns answered by node a before its kill are missing on node c: {missing:?}", missing.len(), acked_turns.len());
    assert!(stored.contains(after_turn.as_str()), "the turn written after the resume (node b) is missing on node c");
    // And every send answered with delivered [reader-c] reached it.
    let mut owed: BTreeSet<u64> = acked_sends.iter().map(|n| *n as u64).collect();
    let deadline = tokio::time::Instant::now() + REPLICATION;
    while !owed.is_empty() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Some(n) = reader.note(left, |n| n["method"] == "map/message" && n["params"]["message"]["payload"]["n"].is_u64()).await else { break };
        owed.remove(&n["params"]["message"]["payload"]["n"].as_u64().unwrap_or_default());
    }
    assert!(owed.is_empty(), "sends that node a answered as delivered to reader-c (node c) never arrived there: {owed:?}");
}

// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_of_a_dead_node_are_unregistered_after_presence_timeout_and_resume_window() {
    let options = ClusterOptions { resume_window_secs: 2, presence_timeout_ms: 2000, ..Default::default() };
    let window = Duration::from_secs(options.resume_window_secs);
    let presence = Duration::from_millis(options.presence_timeout_ms);
    let mut cluster = Cluster::start(&["a", "b", "c"], options).await;

    let mut doomed = cluster.node("a").connect("agent").await;
    doomed.register("doomed-1", json!({})).await;
    doomed.register("doomed-2", json!({"parent": "doomed-1"})).await;
    let token = doomed.resume_token();
    let lone = cluster.node("a").agent("doomed-3", json!({})).await;
    let mut survivor = cluster.node("b").agent("survivor", json!({})).await;
    let mut watcher = cluster.node("c").connect("client").await;
    for id in ["doomed-1", "doomed-2", "doomed-3", "survivor"] {
        watcher.wait_for_agent(id).await;
    }
    let sub = watcher.subscribe(json!({"eventTypes": ["agent_unregistered"]})).await;

    cluster.kill9("a");
    let killed_at = Instant::now();
    drop((doomed, lone));
    let doomed_ids = set(&["doomed-1", "doomed-2", "doomed-3"]);
    let limit = presence + window + Duration::from_secs(8);
    let mut events = watcher.events(&sub, limit, |got| !got.is_empty()).await;
    let first = killed_at.elapsed();
    assert!(!events.is_empty(), "no agent_unregistered on node c within {limit:?} of node a's kill (its agents doomed-1..3 should go)");
    // Not before the resume window could have passed.
    assert!(
        first + Duration::from_millis(500) >= window,
        "node a's agents were dropped {first:?} after the kill, before the {window:?} resume window: {}",
        describe(&events[0])
    );
    let early: BTreeSet<String> = events.iter().filter_map(event_agent).map(String::from).collect();
    events.extend(
        watcher
            .events(&sub, limit.saturating_sub(first), |got| {
                let seen: BTreeSet<String> = got.iter().filter_map(event_agent).map(String::from).chain(early.iter().cloned()).collect();
                doomed_ids.is_subset(&seen)
            })
            .await,
    );
    let seen: BTreeSet<String> = events.iter().filter_map(event_agent).map(String::from).collect();
    assert!(
        doomed_ids.is_subset(&seen),
        "agent_unregistered on node c for the agents of killed node a within {limit:?}: got [{}]",
        events.iter().map(describe).collect::<Vec<_>>().join(", ")
    );
    assert!(!seen.contains("survivor"), "survivor (node b) was unregistered too: {}", events.iter().map(describe).collect::<Vec<_>>().join(", "));

    for id in &doomed_ids {
        survivor.wait_agent_gone(id).await;
        watcher.wait_agent_gone(id).await;
    }
    let listed = watcher.ok("map/agents/list", json!({})).await;
    assert_eq!(id_set(&listed["agents"]), set(&["survivor"]), "map/agents/list on node c after node a died: {listed}");

    // The session is over: its token no longer resumes it.
    let late = cluster.node("b").resume("agent", &token).await;
    assert_ne!(late.hello["reconnected"], true, "a session of the dead node resumed after its window closed: {}", late.hello);
    assert!(id_set(&late.hello["ownedAgents"]).is_empty(), "{}", late.hello);
}

// ---------------------------------------------------------------------------

/// One session after another of killed node a resumes on node b, and right
/// after each resume's answer a sender on node c (whose copy of the
/// directory may not have seen the resume yet) sends to the session's agent:
/// every send is delivered, and arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_send_right_after_a_resume_on_another_node_reaches_the_agent() {
    const MOVED: usize = 12;
    let options = ClusterOptions { presence_timeout_ms: 2000, ..Default::default() };
    let presence = Duration::from_millis(options.presence_timeout_ms);
    let mut cluster = Cluster::start(&["a", "b", "c"], options).await;

    let mut watcher = cluster.node("c").connect("client").await;
    watcher.subscribe(json!({"eventTypes": ["participant_disconnected"]})).await;
    let mut sender = cluster.node("c").agent("sender-c", json!({})).await;
    let (mut movers, mut sockets) = (Vec::new(), Vec::new());
    for i in 0..MOVED {
        let id = format!("moved-{i}");
        let client = cluster.node("a").agent(&id, json!({})).await;
        movers.push((id, client.resume_token(), client.participant_id()));
        sockets.push(client); // open until the kill
    }
    for (id, ..) in &movers {
        sender.wait_for_agent(id).await;
    }
    let sent = sender.ok("map/send", json!({"to": {"agent": "moved-0"}, "payload": {"before": true}})).await;
    assert_eq!(sent["delivered"], json!(["moved-0"]), "map/send from node c to moved-0 on node a before the kill: {sent}");

    cluster.kill9("a");
    drop(sockets);
    // The cluster notices: every session of node a is disconnected (and may resume elsewhere).
    let mut waiting: BTreeSet<String> = movers.iter().map(|(_, _, p)| p.clone()).collect();
    while !waiting.is_empty() {
        let what = format!("participant_disconnected for the sessions of killed node a (still waiting for {waiting:?})");
        let n = watcher.expect_note(&what, presence + Duration::from_secs(8), |n| is_event_type(n, "participant_disconnected")).await;
        waiting.remove(event_of(&n)["data"]["participantId"].as_str().unwrap_or_default());
    }

    for (i, (id, token, participant)) in movers.iter().enumerate() {
        let mut resumed = cluster.node("b").resume("agent", token).await;
        assert_eq!(resumed.hello["reconnected"], true, "map/connect on node b with {id}'s resumeToken from node a: {}", resumed.hello);
        assert_eq!(resumed.hello["participantId"], participant.as_str(), "{}", resumed.hello);
        let sent = sender.call("map/send", json!({"to": {"agent": id}, "payload": {"n": i}})).await;
        assert_eq!(
            sent["result"]["delivered"],
            json!([id]),
            "map/send from node c to {id}, right after its session resumed on node b (resume {} of {MOVED}): {sent}\n{}",
            i + 1,
            cluster.logs()
        );
        resumed.expect_note(&format!("map/message {i} to {id} on its session resumed on node b"), REPLICATION, |n| is_message_with(n, "n", &json!(i))).await;
    }
}

// ---------------------------------------------------------------------------

/// `map/send` to another node's agent: `delivered` or not, as it was.
async fn send_counted(sender: &mut Client, to: &str, n: u64) -> bool {
    let resp = sender.call("map/send", json!({"to": {"agent": to}, "payload": {"n": n}})).await;
    if resp["result"]["delivered"] == json!([to]) {
        return true;
    }
    let refused = resp["error"]["code"] == 2003 || id_set(&resp["result"]["failed"]).contains(to);
    if !refused {
        sender.fail(&format!("map/send {n} to {to} answered neither delivered nor failed: {resp}"));
    }
    false
}

/// A local send (same node) is delivered and arrives.
async fn send_locally(sender: &mut Client, receiver: &mut Client, to: &str, what: &str) {
    let sent = sender.ok("map/send", json!({"to": {"agent": to}, "payload": {"local": what}})).await;
    assert_eq!(sent["delivered"], json!([to]), "map/send on node {} to {to} ({what}): {sent}", sender.node);
    receiver.expect_note(&format!("the local message {what:?} to {to}"), ANSWER, |n| is_message_with(n, "local", &json!(what))).await;
}

/// Nodes a and b reach NATS through relays the test cuts: first b's, then
/// a's too, then both come back. `/readyz` says 503 on a node cut from
/// NATS; sends within a node keep working; a send to the other node never
/// answers `delivered` unless it arrived; after the restore cross-node
/// sends work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nats_outage_fails_cross_node_sends_truthfully_and_readyz_says_so() {
    let nats = nats_url();
    let (relay_a, relay_b) = (Relay::start(&nats).await, Relay::start(&nats).await);
    let options = ClusterOptions { nats_for: vec![("a".into(), relay_a.url.clone()), ("b".into(), relay_b.url.clone())], ..Default::default() };
    let cluster = Cluster::start(&["a", "b"], options).await;
    let (a, b) = (cluster.node("a"), cluster.node("b"));
    let mut recv_b = b.agent("recv-b", json!({})).await;
    let mut recv_a = a.agent("recv-a", json!({})).await;
    let mut sender_a = a.agent("sender-a", json!({})).await;
    let mut sender_b = b.agent("sender-b", json!({})).await;
    sender_a.wait_for_agent("recv-b").await;
    sender_b.wait_for_agent("recv-a").await;
    a.wait_ready(200, "before the outage").await;
    b.wait_ready(200, "before the outage").await;

    let (mut n, mut delivered, mut refused) = (0u64, BTreeSet::new(), BTreeSet::new());
    n += 1;
    assert!(send_counted(&mut sender_a, "recv-b", n).await, "map/send from node a to recv-b (node b) before the outage was not delivered");
    delivered.insert(n);

    // Node b loses NATS; node a still has it.
    relay_b.cut();
    let body = b.wait_ready(503, "node b cut from NATS").await;
    assert!(body["problems"].to_string().contains("NATS"), "node b's /readyz names no NATS problem: {body}");
    assert_eq!(a.readyz().await.0, 200, "node a (still on NATS) is not ready while only node b is cut");
    for _ in 0..200 {
        n += 1;
        assert!(!send_counted(&mut sender_a, "recv-b", n).await, "map/send {n} from node a to recv-b answered delivered while node b was cut from NATS");
        refused.insert(n);
    }
    send_locally(&mut sender_a, &mut recv_a, "recv-a", "on a while b is cut").await;
    send_locally(&mut sender_b, &mut recv_b, "recv-b", "on b while b is cut").await;

    // Both lose NATS.
    relay_a.cut();
    a.wait_ready(503, "node a cut from NATS").await;
    for _ in 0..1000 {
        n += 1;
        assert!(!send_counted(&mut sender_a, "recv-b", n).await, "map/send {n} from node a to recv-b answered delivered while both nodes were cut from NATS");
        refused.insert(n);
    }
    assert!(!send_counted(&mut sender_b, "recv-a", 0).await, "map/send from node b to recv-a answered delivered while both nodes were cut from NATS");
    send_locally(&mut sender_a, &mut recv_a, "recv-a", "on a while both are cut").await;
    send_locally(&mut sender_b, &mut recv_b, "recv-b", "on b while both are cut").await;

    // NATS comes back.
    relay_a.restore();
    relay_b.restore();
    a.wait_ready(200, "NATS restored").await;
    b.wait_ready(200, "NATS restored").await;
    let probe = async || {
        n += 1;
        if send_counted(&mut sender_a, "recv-b", n).await {
            delivered.insert(n);
            Ok(())
        } else {
            refused.insert(n);
            Err(n)
        }
    };
    if wait::until(REPLICATION, probe).await.is_err() {
        panic!("cross-node sends from node a to recv-b still fail {REPLICATION:?} after NATS came back\n{}", cluster.logs());
    }
    for _ in 0..200 {
        n += 1;
        assert!(
            send_counted(&mut sender_a, "recv-b", n).await,
            "map/send {n} from node a to recv-b after NATS came back (and a send got through) was not delivered"
        );
        delivered.insert(n);
    }
    let sent = sender_b.ok("map/send", json!({"to": {"agent": "recv-a"}, "payload": {"back": true}})).await;
    assert_eq!(sent["delivered"], json!(["recv-a"]), "map/send from node b to recv-a after NATS came back: {sent}");
    recv_a.expect_note("the message from node b after NATS came back", REPLICATION, |n| is_message_with(n, "back", &json!(true))).await;

    // Every send answered delivered arrived; none of those answered otherwise did.
    let mut arrived = BTreeSet::new();
    let last = *delivered.last().expect("sends were delivered");
    while !arrived.contains(&last) {
        let Some(m) = recv_b.note(REPLICATION, |m| m["method"] == "map/message" && m["params"]["message"]["payload"]["n"].is_u64()).await else { break };
        arrived.insert(m["params"]["message"]["payload"]["n"].as_u64().unwrap_or_default());
    }
    let lost: Vec<&u64> = delivered.difference(&arrived).collect();
    assert!(lost.is_empty(), "sends answered delivered to recv-b never arrived: {lost:?}");
    let ghosts: Vec<&u64> = refused.intersection(&arrived).collect();
    assert!(ghosts.is_empty(), "sends answered as not delivered arrived at recv-b anyway: {ghosts:?}");
}

/// Node a reaches NATS through a relay the test cuts, with a backlog bound
/// of 1 MiB: while the log cannot acknowledge its events, local sends are
/// accepted (and delivered) until the bound, then refused with 4000 and
/// counted; once NATS is back, sends are accepted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_behind_on_its_event_log_refuses_sends_until_it_catches_up() {
    let relay = Relay::start(&nats_url()).await;
    let options = ClusterOptions { nats_for: vec![("a".into(), relay.url.clone())], extra: "event_backlog_mb = 1\n".into(), ..Default::default() };
    let cluster = Cluster::start(&["a"], options).await;
    let a = cluster.node("a");
    let mut receiver = a.agent("receiver", json!({})).await;
    let mut sender = a.agent("sender", json!({})).await;
    a.wait_ready(200, "before the cut").await;
    send_locally(&mut sender, &mut receiver, "receiver", "before the cut").await;

    relay.cut();
    a.wait_ready(503, "node a cut from NATS").await;
    // Each message_sent event carries the 200 kB payload: the sixth cannot fit.
    let pad = "x".repeat(200_000);
    let (mut accepted, mut refusal) = (Vec::new(), None);
    for n in 0..40u64 {
        let resp = sender.call("map/send", json!({"to": {"agent": "receiver"}, "payload": {"n": n, "pad": pad}})).await;
        if resp["result"]["delivered"] == json!(["receiver"]) {
            accepted.push(n);
            continue;
        }
        refusal = Some(resp);
        break;
    }
    let refusal = refusal.unwrap_or_else(|| sender.fail("40 sends of 200 kB each were all accepted while the event log could not take one (bound: 1 MiB)"));
    assert_eq!(refusal["error"]["code"], 4000, "the send past the backlog bound: {refusal}");
    assert_eq!(refusal["error"]["data"]["retryable"], true, "the send past the backlog bound: {refusal}");
    assert_eq!(refusal["error"]["data"]["retryAfterMs"], 1000, "the send past the backlog bound: {refusal}");
    assert!((1..=6).contains(&accepted.len()), "sends accepted while the log was cut, with a 1 MiB bound and 200 kB events: {accepted:?}");
    for n in &accepted {
        receiver.expect_note(&format!("the accepted message {n}"), ANSWER, |m| is_message_with(m, "n", &json!(n))).await;
    }
    let metrics = common::http(&a.gw.addr(), "GET", "/metrics", &[], b"").await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.lines().any(|l| l.starts_with("map_sends_refused_total{reason=\"event_backlog\"}") && !l.ends_with(" 0")),
        "/metrics counts no refusal:\n{text}"
    );

    relay.restore();
    a.wait_ready(200, "NATS restored").await;
    let probe = async || {
        let resp = sender.call("map/send", json!({"to": {"agent": "receiver"}, "payload": {"after": true}})).await;
        if resp["result"]["delivered"] == json!(["receiver"]) {
            return Ok(());
        }
        assert_eq!(resp["error"]["code"], 4000, "a send while the backlog drains: {resp}");
        Err(resp)
    };
    if let Err(resp) = wait::until(REPLICATION, probe).await {
        panic!("sends still refused {REPLICATION:?} after NATS came back (last: {resp})\n{}", cluster.logs());
    }
    receiver.expect_note("the message after the log caught up", ANSWER, |m| is_message_with(m, "after", &json!(true))).await;
}
