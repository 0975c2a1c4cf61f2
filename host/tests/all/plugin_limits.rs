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

use crate::common;

use std::time::{Duration, Instant};

use common::plugins::*;
use common::*;
use serde_json::{json, Value};

/// The deadline of `bad` where a test needs its loop running while something
/// else happens: room for a loaded machine to do that, short enough to keep
/// the test quick.
const LOOP_MS: u64 = 2000;
/// How long past its deadline a call may take to be answered before the test
/// gives up on it (only a loaded machine needs more than a moment).
const SLACK: Duration = Duration::from_secs(10);

fn misbehave_and_echo_looping_long() -> String {
    misbehave_and_echo().replace("deadline_ms = 300", &format!("deadline_ms = {LOOP_MS}"))
}

/// Fails if any of these sockets has received a frame (read without waiting).
async fn assert_unanswered(sockets: &mut [Ws], what: &str) {
    for ws in sockets {
        if let Ok(Some(frame)) = ws.try_next_frame(Duration::ZERO).await {
            panic!("{what}: {frame}");
        }
    }
}

#[tokio::test]
async fn each_misbehaviour_costs_only_its_own_call() {
    // A 1 MiB message limit also caps results: bad/oversized returns 3 MiB.
    // The long deadline lets bad/oom reach its memory cap first on a loaded machine.
    let gw = Gateway::start_with(1 << 20, &config(&misbehave_and_echo_looping_long(), r#"["bad"]"#, r#"["echo"]"#, ""));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let timed_out = format!("timed out after {LOOP_MS} ms");
    let cases = [
        ("bad/loop", timed_out.as_str()),
        ("bad/trap", "trapped"),
        ("bad/oom", "memory limit of 32 MiB"),
        ("bad/oversized", "oversized result"),
        ("bad/malformed", "malformed JSON"),
        ("bad/wrong-code", "outside its range"),
    ];
    for (method, reason) in cases {
        // Ended by the gateway (the loop at its deadline), not left to run.
        let resp = ws.call_within(method, json!({}), SLACK).await;
        plugin_failure(&resp, reason);
        // The same connection, the same plugin: the next call works.
        let next = ws.call_ok("bad/ok", json!({})).await;
        assert_eq!(next["ok"], true, "after {method}");
    }
    // Core methods were never affected.
    ws.call_ok("map/agents/list", json!({})).await;
}

#[tokio::test]
async fn a_slow_call_does_not_hold_up_the_next_requests_of_its_socket() {
    let gw = start(&config(&misbehave_and_echo_looping_long(), r#"["bad"]"#, r#"["echo"]"#, ""));
    let (mut ws, _) = tenant_ws(&gw, "acme-key").await;
    ws.send_text(&request(1, "bad/loop", json!({})).to_string()).await;
    ws.send_text(&request(2, "bad/ok", json!({})).to_string()).await;
    ws.send_text(&request(3, "map/agents/list", json!({})).to_string()).await;
    // The later requests are answered while the loop still runs, then the loop's failure comes.
    let ids: Vec<i64> = [ws.answer().await, ws.answer().await].iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.contains(&2) && ids.contains(&3), "answered before the slow call: {ids:?}");
    let slow = ws.answer_within(SLACK).await;
    assert_eq!(slow["id"], 1);
    plugin_failure(&slow, "timed out");
}

#[tokio::test]
async fn one_tenant_gets_a_bounded_share_of_a_plugin() {
    let plugins = misbehave_and_echo_looping_long().replace("memory_mb = 32\n", "memory_mb = 32\nmax_concurrency = 2\n");
    let gw = start(&config(&plugins, r#"["bad"]"#, r#"["bad"]"#, ""));
    let mut flood = Vec::new();
    for _ in 0..8 {
        flood.push(tenant_ws(&gw, "acme-key").await.0);
    }
    let (mut other, _) = tenant_ws(&gw, "globex-key").await;
    for (i, ws) in flood.iter_mut().enumerate() {
        ws.send_text(&request(i, "bad/loop", json!({})).to_string()).await;
    }
    // Another tenant of the same plugin is not held up: answered while acme's
    // two loops run and its other calls wait (each ends a deadline later).
    until_running(&gw, "acme", "bad", 2).await;
    assert_eq!(ok(&other.call_within("bad/ok", json!({}), SLACK).await)["tenant"], "globex");
    assert_unanswered(&mut flood, "globex was answered only after acme's calls").await;
    let mut exhausted = 0;
    for ws in &mut flood {
        let resp = ws.answer_within(SLACK).await;
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
    let gw = start(&config(&misbehave_and_echo_looping_long(), r#"["bad"]"#, r#"["echo"]"#, ""));
    let (mut looping, _) = tenant_ws(&gw, "acme-key").await;
    let (mut other, _) = tenant_ws(&gw, "globex-key").await;
    looping.send_text(&request(1, "bad/loop", json!({})).to_string()).await;
    until_running(&gw, "acme", "bad", 1).await;
    let echoed = other.call_within("echo/call", json!({"n": 7}), SLACK).await;
    assert_eq!(ok(&echoed), &json!({"n": 7}));
    assert_unanswered(std::slice::from_mut(&mut looping), "globex was answered only after acme's loop").await;
    let resp = looping.answer_within(SLACK).await;
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
deadline_ms = 1000
[plugins.echo]
path = {:?}
deadline_ms = 5000
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
    // which gives way at once (waiting for it instead, the call would be
    // refused at its deadline, or answered after `WAIT`).
    for round in 0..3 {
        assert_eq!(acme.call_ok("bad/ok", json!({})).await["tenant"], "acme");
        assert_eq!(globex.call_ok("echo/call", json!({"round": round})).await, json!({"round": round}));
    }
    // A busy instance does not give way: a call waits for it to end…
    let loop_sent = Instant::now();
    acme.send_text(&request(1, "bad/loop", json!({})).to_string()).await;
    until_running(&gw, "acme", "bad", 1).await;
    assert_eq!(ok(&globex.call_within("echo/call", json!({"n": 1}), SLACK).await), &json!({"n": 1}));
    // The loop's 1000 ms count from after it was sent, so this holds however slow the machine.
    assert!(loop_sent.elapsed() >= Duration::from_millis(1000), "answered {:?} after the loop was sent, before it was stopped", loop_sent.elapsed());
    plugin_failure(&acme.answer_within(SLACK).await, "timed out");
    // … or, past its own deadline (100 ms, within the loop's 1000), is told to come back later.
    acme.send_text(&request(2, "bad/loop", json!({})).to_string()).await;
    until_running(&gw, "acme", "bad", 1).await;
    let refused = initech.call_within("echo/call", json!({}), SLACK).await;
    assert_eq!(err_code(&refused), 4000, "{refused}");
    assert!(err(&refused)["message"].as_str().unwrap().contains("most plugin instances (1)"), "{refused}");
    assert!(err(&refused)["data"]["retryAfterMs"].as_u64().unwrap() > 0, "{refused}");
    plugin_failure(&acme.answer_within(SLACK).await, "timed out");
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
    let gw = misbehave_for_two_tenants(LOOP_MS, 32);
    let mut flood = Vec::new();
    for _ in 0..16 {
        flood.push(gw.ws_connected("client", Some(api_key("acme-key"))).await.0);
    }
    let (mut other, _) = gw.ws_connected("agent", Some(api_key("globex-key"))).await;
    other.call_ok("map/agents/register", json!({"agentId": "steady"})).await;
    for (i, ws) in flood.iter_mut().enumerate() {
        ws.send_text(&request(i, "bad/loop", json!({})).to_string()).await;
    }
    until_running(&gw, "acme", "bad", 16).await;
    for i in 0..50 {
        ok(&other.call_within("map/send", json!({"to": "steady", "payload": i}), SLACK).await);
    }
    // Plugin code runs on threads of its own: the core answered every send
    // while all sixteen loops still spun.
    assert_unanswered(&mut flood, "the core's answers waited for another tenant's spinning plugin").await;
    for ws in &mut flood {
        let resp = ws.answer_within(SLACK).await;
        assert!(resp.get("error").is_some(), "{resp}");
    }
}

#[tokio::test]
async fn calls_holding_much_memory_keep_their_deadline_and_spare_other_tenants() {
    // Six instances filling 100 MiB each take a while to start (over a second
    // on a busy machine): the deadline leaves room for all six to run at once.
    let gw = misbehave_for_two_tenants(3 * LOOP_MS, 128);
    let mut hogs = Vec::new();
    for _ in 0..6 {
        hogs.push(gw.ws_connected("client", Some(api_key("acme-key"))).await.0);
    }
    let (mut other, _) = gw.ws_connected("client", Some(api_key("globex-key"))).await;
    for (i, ws) in hogs.iter_mut().enumerate() {
        ws.send_text(&request(i, "bad/hog", json!({})).to_string()).await;
    }
    // The six run side by side, not one after another …
    until_running(&gw, "acme", "bad", 6).await;
    // … another tenant is answered while they hold their memory …
    assert_eq!(ok(&other.call_within("bad/ok", json!({}), SLACK).await)["tenant"], "globex");
    assert_unanswered(&mut hogs, "globex was answered only after the memory hogs").await;
    // … and each is stopped by its deadline.
    for ws in &mut hogs {
        let resp = ws.answer_within(SLACK).await;
        assert!(err(&resp)["data"]["details"]["reason"].as_str().unwrap_or_default().contains("timed out"), "{resp}");
    }
}

#[tokio::test]
async fn a_tenant_flooding_storage_is_refused_and_others_keep_writing() {
    // A deadline no batch comes near: the writes queue for one writer, slowly on a loaded machine.
    let gw = misbehave_for_two_tenants(30_000, 128);
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

/// A call's wait for the store is not the plugin's time: a `mail/create`
/// held up by another process's lock on the database for longer than the
/// mail plugin's deadline (and the outer bound past it) is answered with
/// its conversation once the lock goes, and the conversation is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_kept_waiting_by_the_store_past_its_deadline_still_succeeds() {
    const DEADLINE_MS: u64 = 300;
    let mail = cluster::standard_plugins().join("mail.wasm");
    let gw = Gateway::start_config("max_message_bytes = 65536", &format!("[plugins.mail]\npath = {mail:?}\ndeadline_ms = {DEADLINE_MS}\n"));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    ok(&ws.call("mail/create", json!({"subject": "before the lock"})).await);

    // Another process takes the database's write lock; the gateway's writer waits for it.
    let db = rusqlite::Connection::open(gw.dir.path().join("data").join("gateway.db")).expect("the store's file opens");
    db.execute_batch("BEGIN IMMEDIATE").expect("the write lock");
    let call = tokio::spawn(async move {
        let answer = ws.call_within("mail/create", json!({"subject": "held up"}), SLACK).await;
        (ws, answer)
    });
    // Held for the deadline, the outer bound's 500 ms past it, and as long
    // again: how long the call is kept waiting is what is tested.
    tokio::time::sleep(Duration::from_millis(2 * (DEADLINE_MS + 500))).await;
    assert!(!call.is_finished(), "the call waits for the store while the lock is held");
    db.execute_batch("ROLLBACK").expect("the lock is let go");

    let (mut ws, answer) = call.await.expect("the call task");
    let id = ok(&answer)["conversation"]["id"].as_str().unwrap_or_else(|| panic!("{answer}")).to_string();
    let got = ws.call("mail/get", json!({"conversationId": id})).await;
    assert_eq!(ok(&got)["conversation"]["subject"], "held up", "{got}");
}
