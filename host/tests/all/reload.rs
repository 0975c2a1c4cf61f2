//! Reloads in the background: `POST /admin/reload` answers 202 at once,
//! the plugins already loaded keep answering while a slow component (the
//! Python audit example, compiled cold) compiles, and `GET
//! /admin/reload/ID` follows the reload to `done`, or to `failed` with the
//! reason while the old plugins stay.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// How long a cold compile of the Python component may take on a busy runner.
const COMPILE: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(50);

fn audit_wasm() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/audit/python/audit.wasm");
    assert!(p.exists(), "{} is missing: run scripts/build-plugins.sh", p.display());
    p
}

/// The echo fixture, and the audit plugin at `audit` if given; one anonymous tenant.
fn plugins(audit: Option<&PathBuf>) -> String {
    let mut text = format!("[plugins.echo]\npath = {:?}\n", fixture("echo-v1.wasm"));
    if let Some(path) = audit {
        text += &format!("[plugins.audit]\npath = {path:?}\nmemory_mb = 64\ndeadline_ms = 5000\n");
    }
    text + "[auth]\nanonymous_tenant = \"default\"\n[[tenants]]\nid = \"default\"\n"
}

/// The gateway's own cache (empty at start), so the audit component compiles cold.
const OWN_CACHE: &str = "cache_dir = \"\"";

async fn post_reload(gw: &Gateway) -> (Value, String) {
    let started = Instant::now();
    let r = http(&gw.addr(), "POST", "/admin/reload", &[], b"").await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(started.elapsed() < Duration::from_secs(5), "202 after {:?}", started.elapsed());
    let location = r.header("location").expect("a Location to poll").to_string();
    let job = r.json()["reload"].clone();
    assert_eq!(job["state"], "running", "{job}");
    assert_eq!(location, format!("/admin/reload/{}", job["id"].as_str().unwrap()));
    (job, location)
}

async fn reload_state(gw: &Gateway, location: &str) -> Value {
    let r = http(&gw.addr(), "GET", location, &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["reload"].clone()
}

/// Poll until the reload has ended: its last state.
async fn ended(gw: &Gateway, location: &str) -> Value {
    let probe = async || match reload_state(gw, location).await {
        job if job["state"] != "running" => Ok(job),
        job => Err(job),
    };
    match wait::until(COMPILE, probe).await {
        Ok(job) => job,
        Err(job) => panic!("reload still running after {COMPILE:?}: {job}\n{}", gw.log_tail(20)),
    }
}

#[tokio::test]
async fn a_reload_compiles_in_the_background_while_the_loaded_plugins_answer() {
    let gw = Gateway::start_config(OWN_CACHE, &plugins(None));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}));
    write_config_server(gw.dir.path(), OWN_CACHE, &plugins(Some(&audit_wasm())));
    let (job, location) = post_reload(&gw).await;

    // Asked for while it runs: queued behind it, and one more joins that one.
    let (queued, queued_at) = post_reload(&gw).await;
    assert_eq!(queued["queuedBehind"], job["id"], "{queued}");
    let (joined, _) = post_reload(&gw).await;
    assert_eq!(joined["id"], queued["id"], "a reload already queued is the one to wait for");

    // The compile runs; echo answers and the admin API too.
    let mut answered_while_running = 0;
    loop {
        assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}));
        let state = reload_state(&gw, &location).await;
        if state["state"] != "running" {
            assert_eq!(state["state"], "done", "{state}\n{}", gw.log_tail(20));
            break;
        }
        answered_while_running += 1;
        if answered_while_running == 1 {
            let listed = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
            let names: Vec<&str> = listed["plugins"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
            assert_eq!(names, ["echo"], "the running reload is not swapped in yet: {listed}");
        }
        // Pacing the calls made while the reload runs (their count is checked), not a wait.
        tokio::time::sleep(POLL).await;
    }
    assert!(answered_while_running > 0, "no call was answered while the reload ran (it ended before the first poll)");
    let done = reload_state(&gw, &location).await;
    let audit = done["status"]["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "audit").cloned();
    assert_eq!(audit.expect("audit in the status of the done reload")["artifact"], "compiled", "{done}");
    assert_eq!(ws.call_within("audit/stats", json!({}), Duration::from_secs(10)).await["result"], json!({"total": 0, "bySender": {}}));
    assert_eq!(ended(&gw, &queued_at).await["state"], "done", "the queued reload runs after the first");
}

#[tokio::test]
async fn a_failed_reload_says_why_and_the_old_plugins_stay() {
    let gw = Gateway::start_config(OWN_CACHE, &plugins(None));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let broken = gw.dir.path().join("broken.wasm");
    std::fs::write(&broken, b"not a component").unwrap();
    write_config_server(gw.dir.path(), OWN_CACHE, &plugins(Some(&broken)));
    let (_, location) = post_reload(&gw).await;
    let job = ended(&gw, &location).await;
    assert_eq!(job["state"], "failed", "{job}");
    let error = job["error"].as_str().unwrap_or_default();
    assert!(error.contains("plugin audit") && error.contains("broken.wasm"), "the reason names the plugin and its file: {job}");
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}), "the old plugins serve");
    // The latest reload, without an id; its failure is also the plugins' last error.
    let latest = http(&gw.addr(), "GET", "/admin/reload", &[], b"").await.json();
    assert_eq!(latest["reload"]["id"], job["id"]);
    let listed = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
    assert!(listed["lastError"].as_str().is_some_and(|e| e.contains("plugin audit")), "{listed}");
    // `?wait=true` answers at the end, as 422 for a failure.
    let waited = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(waited.status, 422, "{}", waited.text());
    assert!(waited.json()["error"].as_str().unwrap_or_default().contains("plugin audit"), "{}", waited.text());
    assert_eq!(http(&gw.addr(), "GET", "/admin/reload/nope", &[], b"").await.status, 404);
    assert_eq!(http(&gw.addr(), "DELETE", "/admin/reload", &[], b"").await.status, 405);
}
