//! The MAP extension registry's rules at plugin load: registered URIs,
//! error ranges and `map/` namespaces belong to their extensions,
//! experimental ones take `x-` names and codes from 90000 up, and the
//! ranges of different extensions are disjoint. The standard plugins
//! follow them, and the default plugin set (everything in `plugins/dist`)
//! includes the tasks extension.

use crate::common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};

/// The misbehaving fixture declaring what `config` (a TOML inline table) says.
fn misbehave(name: &str, config: &str) -> String {
    format!("[plugins.{name}]\npath = {:?}\nconfig = {config}\n", fixture("misbehave.wasm"))
}

/// Start the gateway on `plugins`; it must refuse to start. Its log.
fn refused(plugins: &str) -> String {
    let dir = TempDir::new("registry");
    let path = write_config(dir.path(), 65536, &format!("{TENANTS}\n{plugins}"));
    let out = std::process::Command::new(BIN).args(["serve", "--listen", "127.0.0.1:0", "--config"]).arg(&path).output().unwrap();
    assert!(!out.status.success(), "the gateway started with {plugins}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_plugin_taking_a_registered_extensions_codes_is_refused() {
    let log = refused(&misbehave("bad", r#"{ errors = "14000" }"#));
    assert!(
        log.contains("breaks the MAP extension registry") && log.contains("overlaps 14000..=14999 of the registered extension urn:map:ext:tasks:1"),
        "{log}"
    );
}

#[test]
fn an_experimental_plugin_with_a_registry_uri_is_refused() {
    let log = refused(&misbehave("bad", r#"{ name = "x-bad", errors = "93000" }"#));
    assert!(log.contains("never takes a urn:map:ext: URI"), "{log}");
    let log = refused(&misbehave("bad", r#"{ name = "x-bad", uri = "x-bad:1", errors = "20000" }"#));
    assert!(log.contains("must be 90000 or above"), "{log}");
}

#[test]
fn two_extensions_with_overlapping_ranges_are_refused() {
    let plugins = format!("{}{}", misbehave("bad", "{}"), misbehave("bad2", r#"{ prefix = "bad2", uri = "urn:map:ext:other:1" }"#));
    let log = refused(&plugins);
    assert!(log.contains("plugins bad and bad2") && log.contains("the ranges of different extensions must be disjoint"), "{log}");
}

#[tokio::test]
async fn an_experimental_plugin_in_its_own_range_loads() {
    let gw = Gateway::start_with(65536, &format!("{TENANTS}\n{}", misbehave("bad", r#"{ name = "x-bad", uri = "x-bad:1", errors = "93000" }"#)));
    let (mut ws, connected) = gw.ws_connected("client", None).await;
    let ext = extensions(&connected).into_iter().find(|e| e["uri"] == "x-bad:1").expect("x-bad:1 advertised");
    assert_eq!(ext["name"], "x-bad");
    assert_eq!(ws.call_ok("bad/ok", json!({})).await["ok"], true);
}

fn extensions(connected: &Value) -> Vec<Value> {
    connected["capabilities"]["extensions"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_standard_plugins_advertise_registered_or_experimental_identities() {
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    let built = ["uap", "mamp", "tasks", "a2a"].iter().all(|p| dist.join(format!("{p}.wasm")).exists());
    assert!(built, "{} lacks the standard plugins: run scripts/build-plugins.sh", dist.display());
    let server = format!("max_message_bytes = 65536\nplugin_dir = {:?}", dist.to_string_lossy());
    let gw = Gateway::start_config(&server, TENANTS);
    let (mut ws, connected) = gw.ws_connected("agent", None).await;
    let caps = &connected["capabilities"];
    let uris: Vec<String> = extensions(&connected).iter().filter_map(|e| e["uri"].as_str().map(String::from)).collect();
    for (uri, name, group) in [
        ("x-uap:1", "x-uap", "x-uap"),
        ("x-mamp:1", "x-mamp", "x-mamp"),
        ("x-a2a:1", "x-a2a", "x-a2a"),
        ("urn:map:ext:mail:1", "mail", "mail"),
        ("urn:map:ext:trajectory:1", "trajectory", "trajectory"),
        ("urn:map:ext:tasks:1", "tasks", "tasks"),
    ] {
        let ext = extensions(&connected).into_iter().find(|e| e["uri"] == uri).unwrap_or_else(|| panic!("{uri} advertised: {uris:?}"));
        assert_eq!(ext["name"], name, "{ext}");
        assert_eq!(caps[group]["enabled"], true, "capability group {group}: {caps}");
    }
    assert!(caps.get("uap").is_none() && caps.get("mamp").is_none() && caps.get("a2a").is_none(), "the experimental groups take the x- names: {caps}");
    for gone in ["urn:map:ext:uap:1", "urn:map:ext:mamp:1", "urn:map:ext:a2a:1"] {
        assert!(!uris.iter().any(|u| u == gone), "{gone} is in no registry: {uris:?}");
    }
    // Their errors moved with them: UAP 91000–91999, MAMP 92000–92999, A2A 93000–93999.
    assert_eq!(err_code(&ws.call("uap/get", json!({"jobId": "job-none"})).await), 91000);
    ws.call_ok("map/agents/register", json!({"agentId": "registry-alice"})).await;
    assert_eq!(err_code(&ws.call("mamp/conversation", json!({"conversationId": "none"})).await), 92000);
    assert_eq!(err_code(&ws.call("a2a/task/get", json!({"taskId": "none"})).await), 93000);
    // The tasks plugin serves the registered map/tasks/ namespace, and no other map/ method.
    assert_eq!(err_code(&ws.call("map/tasks/assign", json!({"taskId": "task-none", "agentId": "x"})).await), 14001);
    // map/resources/ is the core's, over the types plugins provide through their `resources` export.
    assert_eq!(ws.call_ok("map/resources/list", json!({"type": "x-tasks/task"})).await["cursor"], Value::Null);
}
