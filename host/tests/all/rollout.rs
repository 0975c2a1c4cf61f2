//! Rollouts across a cluster, black-box: three nodes (a, b, c) load the
//! echo plugin from a file in their own folders. A reload on a makes every
//! node serve the digest a now serves; c, whose file is still the old one
//! and who never had the new one, cannot, keeps the old version and says
//! so in the rollout's report; a rollback returns every node to the digest
//! the rollout replaced, from the components each node kept. A node that
//! was down during a rollout, or restarts after one, serves the rollout's
//! versions when it comes back.
//!
//! Needs PostgreSQL and NATS with JetStream, as `cluster.rs` does.

use crate::common;

use common::cluster::*;
use common::signing::sha256_hex;
use common::*;
use serde_json::{json, Value};

async fn version(node: &Node) -> Value {
    let mut c = node.connect("client").await;
    c.ok("echo/version", json!({})).await
}

/// The rollout as node `at` tells it, once every node has reported.
async fn reported(at: &Node, id: &str, nodes: usize) -> Value {
    let probe = async || {
        let r = http(&at.gw.addr(), "GET", &format!("/admin/rollout/{id}"), &[], b"").await;
        let view = r.json()["rollout"].clone();
        if view["nodes"].as_object().is_some_and(|n| n.len() == nodes) {
            Ok(view)
        } else {
            Err(r.text())
        }
    };
    wait::eventually(REPLICATION, "every node reported", probe).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_reaches_every_node_a_node_that_cannot_stays_and_says_so_and_rollback_returns() {
    let (v1, v2) = (fixture("echo-v1.wasm"), fixture("echo-v2.wasm"));
    // No older version is kept beyond what a rollback needs.
    let server = "keep_versions = 0".into();
    let options = ClusterOptions {
        files: vec![("echo.wasm".into(), v1.clone())],
        extra: "\n[plugins.echo]\npath = \"echo.wasm\"\n".into(),
        server,
        ..Default::default()
    };
    let cluster = Cluster::start(&["a", "b", "c"], options).await;
    let (a, b, c) = (cluster.node("a"), cluster.node("b"), cluster.node("c"));
    for node in [a, b, c] {
        assert_eq!(version(node).await, json!({"version": "1.0.0"}));
    }

    // The new version reaches a's and b's folders, not c's.
    for node in [a, b] {
        std::fs::copy(&v2, node.gw.dir.path().join("echo.wasm")).unwrap();
    }
    let r = http(&a.gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["rollout"].as_str().map(str::to_string).unwrap_or_else(|| panic!("no rollout id: {}", r.text()));
    let view = reported(c, &id, 3).await;
    assert_eq!(view["pins"]["echo"], json!(sha256_hex(&v2)), "{view}");
    assert_eq!(view["nodes"]["a"]["state"], "done", "{view}");
    assert_eq!(view["nodes"]["b"]["state"], "done", "{view}");
    assert_eq!(view["nodes"]["b"]["digests"]["echo"], json!(sha256_hex(&v2)));
    assert_eq!(view["nodes"]["c"]["state"], "failed", "{view}");
    assert!(view["nodes"]["c"]["error"].as_str().is_some_and(|e| e.contains("has no component with SHA-256")), "{view}");
    assert_eq!(view["nodes"]["c"]["digests"]["echo"], json!(sha256_hex(&v1)), "c says it serves the old one");
    assert_eq!(version(a).await, json!({"version": "2.0.0"}));
    assert_eq!(version(b).await, json!({"version": "2.0.0"}));
    assert_eq!(version(c).await, json!({"version": "1.0.0"}));

    // Rollback (asked on b): every node back to v1, a and b from the copies they kept.
    let r = http(&b.gw.addr(), "POST", "/admin/rollback", &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let back = r.json()["rollout"].clone();
    assert_eq!(back["kind"], "rollback");
    assert_eq!(back["pins"]["echo"], json!(sha256_hex(&v1)), "{back}");
    let view = reported(a, back["id"].as_str().unwrap(), 3).await;
    for node in ["a", "b", "c"] {
        assert_eq!(view["nodes"][node]["state"], "done", "{view}");
    }
    for node in [a, b, c] {
        assert_eq!(version(node).await, json!({"version": "1.0.0"}), "node {}", node.name);
    }
    assert_eq!(http(&a.gw.addr(), "GET", "/admin/rollout/nope", &[], b"").await.status, 404);
}

/// The cluster's current rollout outlives its nodes. Every node moves to v2;
/// c is down while a rollback returns the others to v1, and b is killed
/// after it. Both come back on v1 (from the copies they kept), though their
/// files still name v2, and report so; a then rolls the cluster forward
/// again and every node follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_down_during_a_rollout_or_killed_after_it_comes_back_on_the_rollouts_versions() {
    let (v1, v2) = (fixture("echo-v1.wasm"), fixture("echo-v2.wasm"));
    let options =
        ClusterOptions { files: vec![("echo.wasm".into(), v1.clone())], extra: "\n[plugins.echo]\npath = \"echo.wasm\"\n".into(), ..Default::default() };
    let mut cluster = Cluster::start(&["a", "b", "c"], options).await;
    for node in &cluster.nodes {
        std::fs::copy(&v2, node.gw.dir.path().join("echo.wasm")).unwrap();
    }
    let r = http(&cluster.node("a").gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let forward = r.json()["rollout"].as_str().unwrap().to_string();
    let view = reported(cluster.node("a"), &forward, 3).await;
    for node in ["a", "b", "c"] {
        assert_eq!(view["nodes"][node]["digests"]["echo"], json!(sha256_hex(&v2)), "{view}");
    }

    // c is down during the rollback; b is killed after it.
    cluster.kill9("c");
    let r = http(&cluster.node("a").gw.addr(), "POST", "/admin/rollback", &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let back = r.json()["rollout"]["id"].as_str().unwrap().to_string();
    let view = reported(cluster.node("a"), &back, 2).await;
    assert_eq!(view["nodes"]["b"]["digests"]["echo"], json!(sha256_hex(&v1)), "{view}");
    cluster.kill9("b");

    cluster.restart("b");
    cluster.restart("c");
    for node in &cluster.nodes {
        assert_eq!(version(node).await, json!({"version": "1.0.0"}), "node {} serves the rollback's version, not its file's", node.name);
    }
    let view = reported(cluster.node("a"), &back, 3).await;
    for node in ["b", "c"] {
        assert_eq!(view["nodes"][node]["state"], "done", "{view}");
        assert_eq!(view["nodes"][node]["digests"]["echo"], json!(sha256_hex(&v1)), "{view}");
    }
    // A restarted node knows the rollout: it can roll the cluster back again (to v2).
    let r = http(&cluster.node("c").gw.addr(), "POST", "/admin/rollback", &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let again = r.json()["rollout"]["id"].as_str().unwrap().to_string();
    let view = reported(cluster.node("b"), &again, 3).await;
    for node in ["a", "b", "c"] {
        assert_eq!(view["nodes"][node]["state"], "done", "{view}");
    }
    for node in &cluster.nodes {
        assert_eq!(version(node).await, json!({"version": "2.0.0"}), "node {}", node.name);
    }
}
