//! Compiled plugins shared through PostgreSQL, black-box: two nodes with
//! empty plugin caches of their own on one fresh database. Node a starts
//! first and compiles; node b then loads the artifact from the database
//! (`"artifact"` in `/admin/plugins` says where each plugin's code came
//! from) and keeps it in its own cache. A component both nodes load at the
//! same moment is compiled by one of them only.
//!
//! Needs PostgreSQL and NATS with JetStream (see `common::cluster`) and the
//! fixtures (`scripts/build-plugins.sh --fixtures`).

use crate::common;

use common::cluster::*;
use common::{fixture, http};
use serde_json::{json, Value};

/// Each node's own cache, under its data directory, empty at start.
fn options() -> ClusterOptions {
    let plugins = format!("[plugins.echo]\npath = {:?}\n", fixture("echo-v1.wasm"));
    ClusterOptions { server: "cache_dir = \"\"".into(), extra: plugins, ..Default::default() }
}

/// Where each loaded plugin's code came from on `node`, by name.
async fn artifacts(node: &Node) -> Value {
    let listed = http(&node.gw.addr(), "GET", "/admin/plugins", &[], b"").await;
    assert_eq!(listed.status, 200, "node {}: {}", node.name, listed.text());
    let mut by_name = serde_json::Map::new();
    for p in listed.json()["plugins"].as_array().expect("a plugin list") {
        by_name.insert(p["name"].as_str().unwrap().to_string(), p["artifact"].clone());
    }
    Value::Object(by_name)
}

#[tokio::test]
async fn a_node_loads_the_plugins_another_compiled_and_one_node_compiles_each() {
    let cluster = Cluster::start(&["a", "b"], options()).await;
    let (a, b) = (cluster.node("a"), cluster.node("b"));
    assert_eq!(artifacts(a).await, json!({"echo": "compiled"}), "{}", cluster.logs());
    assert_eq!(artifacts(b).await, json!({"echo": "shared"}), "{}", cluster.logs());
    assert!(b.gw.log().contains("loaded compiled code from the shared store"), "{}", b.log_tail());
    assert!(!b.gw.log().contains("compiled plugin"), "b compiled nothing: {}", b.log_tail());
    let cached = std::fs::read_dir(b.gw.dir.path().join("data/cache")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(cached, 1, "b keeps the shared artifact in its own cache");
    let mut client = b.connect("client").await;
    assert_eq!(client.ok("echo/version", json!({})).await, json!({"version": "1.0.0"}));

    // A plugin added on both nodes, reloaded on both at once: one compiles, the other waits and loads it.
    let added = format!("[plugins.state]\npath = {:?}\n", fixture("stateful.wasm"));
    for node in [a, b] {
        let text = std::fs::read_to_string(&node.gw.config).unwrap() + &added;
        std::fs::write(&node.gw.config, text).unwrap();
    }
    let (addr_a, addr_b) = (a.gw.addr(), b.gw.addr());
    let (ra, rb) = tokio::join!(http(&addr_a, "POST", "/admin/reload?wait=true", &[], b""), http(&addr_b, "POST", "/admin/reload?wait=true", &[], b""));
    assert_eq!((ra.status, rb.status), (200, 200), "{}\n{}", ra.text(), rb.text());
    let mut origins = vec![artifacts(a).await["state"].clone(), artifacts(b).await["state"].clone()];
    origins.sort_by_key(|v| v.to_string());
    assert_eq!(origins, [json!("compiled"), json!("shared")], "{}", cluster.logs());
}
