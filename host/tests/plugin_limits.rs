//! What bounds a plugin's work, black-box: deadlines, memory caps, a
//! tenant's share of a plugin, the engine-wide instance budget, storage
//! quotas, and the walls between tenants (one tenant's plugin work neither
//! slows nor sees another's, nor the core's). What a plugin does within its
//! bounds is in `plugins.rs`.
//!
//! Time here is measured against what the gateway does, not the wall clock
//! alone: a call meant not to wait must be answered while the calls it must
//! not wait for are still running (the admin API counts them), so a loaded
//! machine slows a test without failing it.

mod common;

use std::time::{Duration, Instant};

use common::plugins::*;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn each_misbehaviour_costs_only_its_own_call() {
    // A 1 MiB message limit also caps results: bad/oversized returns 3 MiB.
    let gw = Gateway::start_with(1 << 20, &config(&misbehave_and_echo(), r#"["bad"]"#, r#"["echo"]"#, ""));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let cases = [
        ("bad/loop", "timed out after 300 ms"),
        ("bad/trap", "trapped"),
        ("bad/oom", "memory limit of 32 MiB"),
        ("bad/oversized", "oversized result"),
        ("bad/malformed", "malformed JSON"),
        ("bad/wrong-code", "outside its range"),
    ];
    for (method, reason) in cases {
        let started = Instant::now();
        let resp = ws.call(method, json!({})).await;
        plugin_failure(&resp, reason);
        assert!(started.elapsed() < Duration::from_millis(300 + 1500), "{method} took {:?}", started.elapsed());
        // The same connection, the same plugin: the next call works.
        let next = ws.call_ok("bad/ok", json!({})).await;
        assert_eq!(next["ok"], true, "after {method}");
    }
    // Core methods were never affected.
    ws.call_ok("map/agents/list", json!({})).await;
}

#[tokio::test]
async fn a_slow_call_does_not_hold_up_the_next_requests_of_its_socket() {
    let gw = start(&config(&misbehave_and_echo(), r#"["bad"]"#, r#"["echo"]"#, ""));
    let (mut ws, _) = tenant_ws(&gw, "acme-key").await;
    ws.send_text(&request(1, "bad/loop", json!({})).to_string()).await;
    ws.send_text(&request(2, "bad/ok", json!({})).to_string()).await;
    ws.send_text(&request(3, "map/agents/list", json!({})).to_string()).await;
    // The later requests are answered while the loop still runs, then the loop's failure comes.
    let ids: Vec<i64> = [ws.answer().await, ws.answer().await].iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.contains(&2) && ids.contains(&3), "answered before the slow call: {ids:?}");
    let slow = ws.answer().await;
    assert_eq!(slow["id"], 1);
    plugin_failure(&slow, "timed out");
}

#[tokio::test]
async fn one_tenant_gets_a_bounded_share_of_a_plugin() {
    let plugins = misbehave_and_echo().replace("memory_mb = 32\n", "memory_mb = 32\nmax_concurrency = 2\n");
    let gw = start(&config(&plugins, r#"["bad"]"#, r#"["bad"]"#, ""));
    let mut flood = Vec::new();
    for _ in 0..8 {
        flood.push(tenant_ws(&gw, "acme-key").await.0);
    }
    let (mut other, _) = tenant_ws(&gw, "globex-key").await;
    for (i, ws) in flood.iter_mut().enumerate() {
        ws.send_text(&request(i, "bad/loop", json!({})).to_string()).await;
    }
    // Another tenant of the same plugin is not held up.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    assert_eq!(other.call_ok("bad/ok", json!({})).await["tenant"], "globex");
    assert!(started.elapsed() < Duration::from_millis(250), "globex waited {:?}", started.elapsed());
    let mut exhausted = 0;
    for ws in &mut flood {
        let resp = ws.answer().await;
        match err(&resp)["code"].as_i64() {
            Some(4000) => {
                exhausted += 1;
                assert!(err(&resp)["data"]["retryAfterMs"].as_u64().unwrap() > 0, "{resp}");
            }
            _ => plugin_failure(&resp, "timed out"),
        }
    }
    assert!(exhausted >= 4, "two run, the rest wait a deadline at most: {exhausted} of 8 got 4000");
}

#[tokio::test]
async fn a_looping_plugin_does_not_stall_other_tenants() {
    let gw = start(&config(&misbehave_and_echo(), r#"["bad"]"#, r#"["echo"]"#, ""));
    let (mut looping, _) = tenant_ws(&gw, "acme-key").await;
    let (mut other, _) = tenant_ws(&gw, "globex-key").await;
    looping.send_text(&request(1, "bad/loop", json!({})).to_string()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let echoed = other.call_ok("echo/call", json!({"n": 7})).await;
    assert_eq!(echoed, json!({"n": 7}));
    assert!(started.elapsed() < Duration::from_millis(250), "globex waited {:?} behind acme's loop", started.elapsed());
    let resp = looping.answer().await;
    plugin_failure(&resp, "timed out");
}

#[tokio::test]
async fn the_engine_wide_instance_budget_retires_idle_instances_and_queues_the_rest() {
    // Room for one live instance across every tenant and plugin; the same
    // component twice, with a long and a short deadline, for two tenants.
    let text = format!(
        r#"
[plugins.bad]
path = {:?}
deadline_ms = 300
[plugins.echo]
path = {:?}
deadline_ms = 2000
[plugins.echo2]
path = {:?}
deadline_ms = 100
[auth]
anonymous_tenant = "acme"
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
plugins = ["bad"]
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
plugins = ["echo"]
[[tenants]]
id = "initech"
api_keys = ["initech-key"]
plugins = ["echo2"]
"#,
        fixture("misbehave.wasm"),
        fixture("echo-v1.wasm"),
        fixture("echo-v2.wasm")
    );
    let gw = Gateway::start_config("max_instances = 1", &text);
    let (mut acme, _) = tenant_ws(&gw, "acme-key").await;
    let (mut globex, _) = tenant_ws(&gw, "globex-key").await;
    let (mut initech, _) = tenant_ws(&gw, "initech-key").await;
    // Each call finds the one ticket held by the other tenant's idle instance,
    // which gives way at once.
    for round in 0..3 {
        let started = Instant::now();
        assert_eq!(acme.call_ok("bad/ok", json!({})).await["tenant"], "acme");
        assert_eq!(globex.call_ok("echo/call", json!({"round": round})).await, json!({"round": round}));
        assert!(started.elapsed() < Duration::from_millis(250), "round {round} waited {:?}", started.elapsed());
    }
    // A busy instance does not give way: a call waits for it to end…
    acme.send_text(&request(1, "bad/loop", json!({})).to_string()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    assert_eq!(globex.call_ok("echo/call", json!({"n": 1})).await, json!({"n": 1}));
    assert!(started.elapsed() >= Duration::from_millis(150), "it waited for the loop to be stopped: {:?}", started.elapsed());
    plugin_failure(&acme.answer().await, "timed out");
    // … or, past its own deadline, is told to come back later.
    acme.send_text(&request(2, "bad/loop", json!({})).to_string()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = initech.call("echo/call", json!({})).await;
    assert_eq!(err_code(&refused), 4000, "{refused}");
    assert!(err(&refused)["message"].as_str().unwrap().contains("most plugin instances (1)"), "{refused}");
    assert!(err(&refused)["data"]["retryAfterMs"].as_u64().unwrap() > 0, "{refused}");
    plugin_failure(&acme.answer().await, "timed out");
    assert_eq!(initech.call_ok("echo/call", json!({"after": true})).await, json!({"after": true}));
}

/// The misbehaving fixture with these limits, for tenants acme and globex (credentials required).
fn misbehave_for_two_tenants(deadline_ms: u64, memory_mb: u64) -> Gateway {
    let text = format!(
        "[plugins.bad]\npath = {:?}\ndeadline_ms = {deadline_ms}\nmemory_mb = {memory_mb}\n\
         [auth]\nanonymous_tenant = \"\"\n[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-key\"]\n[[tenants]]\nid = \"globex\"\napi_keys = [\"globex-key\"]\n",
        fixture("misbehave.wasm")
    );
    Gateway::start_with(1 << 20, &text)
}

#[tokio::test]
async fn a_plugin_spinning_in_one_tenant_does_not_slow_the_core_of_another() {
    let gw = misbehave_for_two_tenants(1500, 32);
    let mut flood = Vec::new();
    for _ in 0..16 {
        flood.push(gw.ws_connected("client", Some(api_key("acme-key"))).await.0);
    }
    for (i, ws) in flood.iter_mut().enumerate() {
        ws.send_text(&request(i, "bad/loop", json!({})).to_string()).await;
    }
    let (mut other, _) = gw.ws_connected("agent", Some(api_key("globex-key"))).await;
    other.call_ok("map/agents/register", json!({"agentId": "steady"})).await;
    let mut slowest = Duration::ZERO;
    for i in 0..50 {
        let started = Instant::now();
        other.call_ok("map/send", json!({"to": "steady", "payload": i})).await;
        slowest = slowest.max(started.elapsed());
    }
    // Plugin code runs on threads of its own: the core answers as if idle.
    assert!(slowest < Duration::from_millis(150), "slowest map/send took {slowest:?} while another tenant's plugin spun");
    for ws in &mut flood {
        let resp = ws.answer().await;
        assert!(resp.get("error").is_some(), "{resp}");
    }
}

#[tokio::test]
async fn calls_holding_much_memory_keep_their_deadline_and_spare_other_tenants() {
    let gw = misbehave_for_two_tenants(800, 128);
    let mut hogs = Vec::new();
    for _ in 0..6 {
        hogs.push(gw.ws_connected("client", Some(api_key("acme-key"))).await.0);
    }
    let started = Instant::now();
    for (i, ws) in hogs.iter_mut().enumerate() {
        ws.send_text(&request(i, "bad/hog", json!({})).to_string()).await;
    }
    let (mut other, _) = gw.ws_connected("client", Some(api_key("globex-key"))).await;
    let asked = Instant::now();
    assert_eq!(other.call_ok("bad/ok", json!({})).await["tenant"], "globex");
    assert!(asked.elapsed() < Duration::from_millis(400), "globex waited {:?} beside the memory hogs", asked.elapsed());
    for ws in &mut hogs {
        let resp = ws.answer().await;
        assert!(err(&resp)["data"]["details"]["reason"].as_str().unwrap_or_default().contains("timed out"), "{resp}");
    }
    // 800 ms each, in parallel: the deadline holds, give or take scheduling.
    assert!(started.elapsed() < Duration::from_millis(1800), "the hogs took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_tenant_flooding_storage_is_refused_and_others_keep_writing() {
    let gw = misbehave_for_two_tenants(5000, 128);
    let (mut flooder, _) = gw.ws_connected("client", Some(api_key("acme-key"))).await;
    // Over the per-call bound: refused before it reaches the database.
    flooder.send_text(&request(1, "bad/flood", json!({"count": "200000"})).to_string()).await;
    let refused = flooder.next_frame(Duration::from_secs(30)).await.expect("an answer to the oversized batch");
    assert!(err(&refused)["message"].as_str().unwrap_or_default().contains("at most 10000 operations"), "{refused}");
    // The largest allowed batches, back to back on several connections, while
    // another tenant writes: every one of the other tenant's writes succeeds.
    let mut floods = Vec::new();
    for _ in 0..4 {
        floods.push(gw.ws_connected("client", Some(api_key("acme-key"))).await.0);
    }
    for (i, ws) in floods.iter_mut().enumerate() {
        for n in 0..3 {
            ws.send_text(&request(i * 10 + n, "bad/flood", json!({"count": "10000"})).to_string()).await;
        }
    }
    let (mut other, _) = gw.ws_connected("client", Some(api_key("globex-key"))).await;
    for i in 0..100 {
        other.call_ok("bad/put", json!({"key": format!("k{i}"), "value": "steady"})).await;
    }
    for ws in &mut floods {
        for _ in 0..3 {
            let resp = ws.next_frame(Duration::from_secs(60)).await.expect("an answer to each allowed batch");
            assert_eq!(resp["result"]["written"], 10000, "{resp}");
        }
    }
    assert_eq!(other.call_ok("bad/get", json!({"key": "k99"})).await["value"], "steady");
}

#[tokio::test]
async fn plugin_storage_is_walled_per_tenant() {
    let gw = start(&config(&misbehave_and_echo(), r#"["bad"]"#, r#"["bad"]"#, ""));
    let (mut acme, _) = tenant_ws(&gw, "acme-key").await;
    let (mut globex, _) = tenant_ws(&gw, "globex-key").await;
    acme.call_ok("bad/put", json!({"key": "k1", "value": "acme-secret"})).await;
    // Same plugin, same collection and key, other tenant: nothing there.
    assert_eq!(globex.call_ok("bad/get", json!({"key": "k1"})).await, json!({"value": null}));
    globex.call_ok("bad/put", json!({"key": "k1", "value": "globex-own"})).await;
    assert_eq!(acme.call_ok("bad/get", json!({"key": "k1"})).await, json!({"value": "acme-secret"}));
    assert_eq!(globex.call_ok("bad/get", json!({"key": "k1"})).await, json!({"value": "globex-own"}));
    // Each caller record names its own tenant.
    assert_eq!(acme.call_ok("bad/ok", json!({})).await["tenant"], "acme");
}

fn extension_uris(connect: &Value) -> Vec<String> {
    connect["capabilities"]["extensions"].as_array().into_iter().flatten().filter_map(|e| e["uri"].as_str().map(String::from)).collect()
}

#[tokio::test]
async fn tenants_see_only_their_own_plugins() {
    let gw = start(&config(&misbehave_and_echo(), r#"["echo"]"#, r#"["bad"]"#, ""));
    let (mut acme, acme_hello) = tenant_ws(&gw, "acme-key").await;
    let (mut globex, globex_hello) = tenant_ws(&gw, "globex-key").await;
    let (a, g) = (extension_uris(&acme_hello), extension_uris(&globex_hello));
    assert!(a.contains(&"urn:map:ext:echo:1".to_string()) && !a.contains(&"urn:map:ext:misbehave:1".to_string()), "{a:?}");
    assert!(g.contains(&"urn:map:ext:misbehave:1".to_string()) && !g.contains(&"urn:map:ext:echo:1".to_string()), "{g:?}");
    assert_eq!(acme_hello["capabilities"]["echo"], json!({"enabled": true}));
    assert!(acme_hello["capabilities"].get("misbehave").is_none());
    assert_eq!(err_code(&acme.call("bad/ok", json!({})).await), -32601);
    assert_eq!(err_code(&globex.call("echo/call", json!({})).await), -32601);
    assert_eq!(acme.call_ok("echo/call", json!({"x": 1})).await, json!({"x": 1}));
    assert_eq!(globex.call_ok("bad/ok", json!({})).await["tenant"], "globex");
    // The default tenant has every plugin.
    let (_, default_hello) = gw.ws_connected("client", None).await;
    assert_eq!(extension_uris(&default_hello).iter().filter(|u| u.starts_with("urn:map:ext:e") || u.contains("misbehave")).count(), 2);
}
