//! Plugin runtime v2, black-box: a component of the 0.1.0 contract still
//! loading, singletons that keep state and survive their own traps, timers,
//! observers that cannot loop, and plugin work that cannot starve the core.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

fn stateful(mode: &str) -> String {
    format!("[plugins.state]\npath = {:?}\nmode = {mode:?}\ndeadline_ms = 500\n", fixture("stateful.wasm"))
}

fn legacy() -> String {
    format!("[plugins.legacy]\npath = {:?}\n", fixture("legacy.wasm"))
}

#[tokio::test]
async fn a_component_built_against_0_1_0_still_loads_and_works() {
    let gw = Gateway::start_with(1 << 20, &legacy());
    let (mut ws, connected) = gw.ws_connected("agent", None).await;
    let uris: Vec<&str> = connected["capabilities"]["extensions"].as_array().unwrap().iter().filter_map(|e| e["uri"].as_str()).collect();
    assert!(uris.contains(&"urn:map:ext:legacy:1"), "{connected}");
    assert_eq!(ws.call_ok("legacy/echo", json!({"hello": "old"})).await, json!({"hello": "old"}));
    // Its 0.1.0 interceptor export observes sends, through its 0.1.0 store import.
    ws.call_ok("map/agents/register", json!({"agentId": "old-inbox"})).await;
    let sent = ws.call_ok("map/send", json!({"to": "old-inbox", "payload": 1, "meta": {"legacy": "note"}})).await;
    let id = sent["messageId"].clone();
    let deadline = Instant::now() + WAIT;
    loop {
        let seen = ws.call_ok("legacy/seen", json!({})).await;
        if seen["last"] == id {
            break;
        }
        assert!(Instant::now() < deadline, "the 0.1.0 interceptor never saw {id}: {seen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_observer_that_resends_what_it_sees_stops_after_four_hops() {
    let gw = Gateway::start_with(1 << 20, &legacy());
    let (mut ws, _) = gw.ws_connected("agent", None).await;
    ws.call_ok("map/agents/register", json!({"agentId": "echo-chamber"})).await;
    ws.call_ok("map/send", json!({"to": "echo-chamber", "payload": "ping", "meta": {"legacy": "loop"}})).await;
    // The original and four re-sends arrive; the fourth re-send is not observed again.
    for n in 0..5 {
        let note = ws.notification("map/message", WAIT).await.unwrap_or_else(|| panic!("message {n} of 5 never came"));
        assert_eq!(note["params"]["message"]["payload"], "ping");
    }
    // A marker behind them in the observer's queue: once it is seen, no loop message is pending.
    let marker = ws.call_ok("map/send", json!({"to": "echo-chamber", "payload": "marker", "meta": {"legacy": "note"}})).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let seen = ws.call_ok("legacy/seen", json!({})).await;
        if seen["last"] == marker["messageId"] {
            assert_eq!(seen["loops"], 4, "{seen}");
            break;
        }
        assert!(Instant::now() < deadline, "the marker was never observed: {seen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = ws.notification("map/message", WAIT).await.expect("the marker arrives");
    assert_eq!(next["params"]["message"]["payload"], "marker", "no sixth loop message: {next}");
}

#[tokio::test]
async fn a_singleton_keeps_state_and_reinitialises_after_its_own_trap() {
    let gw = Gateway::start_with(1 << 20, &stateful("singleton"));
    let (mut a, _) = gw.ws_connected("client", None).await;
    let (mut b, _) = gw.ws_connected("client", None).await;
    // One instance serves every session of the tenant: the count carries across them.
    assert_eq!(a.call_ok("state/count", json!({})).await, json!({"calls": 1, "boots": 1}));
    assert_eq!(b.call_ok("state/count", json!({})).await, json!({"calls": 2, "boots": 1}));
    assert_eq!(a.call_ok("state/count", json!({})).await, json!({"calls": 3, "boots": 1}));
    let trapped = b.call("state/trap", json!({})).await;
    assert_eq!(err(&trapped)["code"], -32603, "{trapped}");
    // A fresh instance: memory is gone, `init` ran again (it counts boots in the store).
    assert_eq!(a.call_ok("state/count", json!({})).await, json!({"calls": 1, "boots": 2}));
    assert!(gw.log().contains("singleton failed"), "the failure is logged");
    // And shown to the operator.
    let status = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
    let health = &status["tenants"][0];
    assert_eq!(health["plugin"], "state", "{status}");
    assert_eq!(health["mode"], "singleton", "{status}");
    assert_eq!(health["health"]["failures"], 0, "the call after the trap succeeded: {status}");
    assert!(health["health"]["lastError"].as_str().unwrap().contains("trapped"), "{status}");
    assert_eq!(health["calls"]["ok"], 4, "{status}");
    assert_eq!(health["calls"]["trap"], 1, "{status}");
    assert_eq!(health["recentFailures"][0]["outcome"], "trap", "{status}");
    assert!(health["recentFailures"][0]["reason"].as_str().unwrap().contains("trapped"), "{status}");
}

#[tokio::test]
async fn pooled_instances_do_not_share_memory_but_run_init() {
    let gw = Gateway::start_with(1 << 20, &stateful("pooled"));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let first = ws.call_ok("state/count", json!({})).await;
    assert_eq!(first["calls"], 1, "{first}");
    assert!(first["boots"].as_u64().unwrap() >= 1, "init ran before the first call: {first}");
}

#[tokio::test]
async fn timers_fire_and_cancelled_ones_do_not() {
    let gw = Gateway::start_with(1 << 20, &stateful("singleton"));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    ws.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["state.timer"]}})).await;
    ws.call_ok("state/timer", json!({"delayMs": 20, "tag": "first"})).await;
    let doomed = ws.call_ok("state/timer", json!({"delayMs": 150, "tag": "cancelled"})).await;
    assert_eq!(ws.call_ok("state/cancel", json!({"timer": doomed["timer"]})).await, json!({"cancelled": true}));
    assert_eq!(ws.call_ok("state/cancel", json!({"timer": doomed["timer"]})).await, json!({"cancelled": false}));
    // Due after the cancelled one would have been.
    ws.call_ok("state/timer", json!({"delayMs": 300, "tag": "last"})).await;
    let mut tags = Vec::new();
    while tags.len() < 2 {
        let (event, _) = ws.notification_where(WAIT, |n| n["method"] == "map/event").await;
        let event = event.expect("a timer event");
        tags.push(event["params"]["event"]["data"]["tag"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(tags, ["first", "last"]);
    assert_eq!(ws.call_ok("state/fired", json!({})).await, json!({"fired": ["first", "last"]}));
    // A delay beyond seven days is refused with the plugin's own error.
    let far = ws.call("state/timer", json!({"delayMs": 8u64 * 24 * 3600 * 1000, "tag": "far"})).await;
    assert_eq!(err(&far)["code"], 31000, "{far}");
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

/// A one-route-per-path HTTP/1.1 server for outbound requests: `/small`
/// answers a short text, `/big` 5,000 bytes. Returns its address.
async fn http_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = if String::from_utf8_lossy(&got).starts_with("GET /big ") { "x".repeat(5000) } else { "hello outbound".to_string() };
                let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(body.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn outbound_http_reaches_allowed_hosts_only() {
    let allowed = http_server().await;
    let other = http_server().await;
    let plugins = format!("{}outbound_hosts = [{allowed:?}]\noutbound_max_bytes = 1000\n", stateful("singleton"));
    let gw = Gateway::start_with(1 << 20, &plugins);
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let fetched = ws.call_ok("state/fetch", json!({"authority": allowed, "path": "/small"})).await;
    assert_eq!(fetched, json!({"status": 200, "body": "hello outbound"}));
    // Another port on the same host is not listed: denied, and logged.
    let denied = ws.call("state/fetch", json!({"authority": other, "path": "/small"})).await;
    assert_eq!(err(&denied)["code"], 31002, "{denied}");
    assert!(err(&denied)["message"].as_str().unwrap().contains("HttpRequestDenied"), "{denied}");
    assert!(gw.log().contains("outbound request denied"), "{}", gw.log());
    // A response over outbound_max_bytes is refused.
    let big = ws.call("state/fetch", json!({"authority": allowed, "path": "/big"})).await;
    assert!(err(&big)["message"].as_str().unwrap().contains("HttpResponseBodySize"), "{big}");
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
