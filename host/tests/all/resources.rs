//! Memory under large payloads, measured from outside: the gateway's
//! resident set (VmRSS) grows within about twice the configured byte
//! limits while large events pass, and comes back near where it started
//! once they have left the replay log and the outboxes; connections that
//! were sent a large message do not keep a buffer of its size.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const REPLAY_BYTES: u64 = 16 * MIB;
const OUTBOX_BYTES: u64 = 8 * MIB;
/// Events the replay log keeps: this many small sends push every large one out.
const REPLAY_EVENTS: usize = 500;
/// What the limits allow the process to hold, and the growth allowed: twice that.
const LIMITS: u64 = REPLAY_BYTES + OUTBOX_BYTES;
const GROWTH: u64 = 2 * LIMITS;
/// "Near the baseline" once the large events are gone.
const SETTLED: u64 = LIMITS / 3;

fn start() -> Gateway {
    Gateway::start_config(
        "max_message_bytes = 2097152",
        &format!("[limits]\nreplay_events = {REPLAY_EVENTS}\nreplay_bytes = {REPLAY_BYTES}\noutbox_frames = 4096\noutbox_bytes = {OUTBOX_BYTES}\n{TENANTS}"),
    )
}

/// The process's resident set in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the gateway's /proc status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmRSS in kB");
    kib * 1024
}

/// A sender with an agent of its own: what it sends comes back to it.
async fn sender(gw: &Gateway) -> (Ws, String) {
    let (mut ws, _) = gw.ws_connected("agent", None).await;
    ws.call_ok("map/agents/register", json!({"agentId": "loader"})).await;
    (ws, "loader".to_string())
}

/// Send `count` messages of `size` payload bytes to `to`; the highest RSS seen.
async fn load(ws: &mut Ws, to: &str, count: usize, size: usize, pid: u32) -> u64 {
    let payload = Value::String("x".repeat(size));
    let mut peak = rss(pid);
    for i in 0..count {
        ws.call_ok("map/send", json!({"to": {"agent": to}, "payload": payload})).await;
        // The message itself comes back as a notification: drop it.
        ws.take_kept();
        if i % 8 == 0 {
            peak = peak.max(rss(pid));
        }
    }
    peak.max(rss(pid))
}

/// Wait until the RSS is at most `bound`: the last value read, as `Err` when it never got there.
async fn rss_settles(pid: u32, bound: u64, within: Duration) -> Result<u64, u64> {
    wait::until(within, async || match rss(pid) {
        now if now <= bound => Ok(now),
        now => Err(now),
    })
    .await
}

/// Push the large events out of the replay log with small ones.
async fn flush_the_log(ws: &mut Ws, to: &str, pid: u32) {
    load(ws, to, REPLAY_EVENTS, 16, pid).await;
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / MIB as f64)
}

#[tokio::test]
async fn a_subscriber_that_never_reads_costs_no_more_than_the_limits() {
    let gw = start();
    let pid = gw.pid();
    let (mut ws, me) = sender(&gw).await;
    let (mut slow, _) = gw.ws_connected("client", None).await;
    let sub = slow.call_ok("map/subscribe", json!({})).await;
    flush_the_log(&mut ws, &me, pid).await;
    let baseline = rss(pid);

    // 100 MB of 100 KiB events: six times the replay log, twelve times the outbox.
    let peak = load(&mut ws, &me, 1000, 100 << 10, pid).await;
    assert!(peak <= baseline + GROWTH, "RSS grew by {} with limits of {} (baseline {})", mib(peak - baseline), mib(LIMITS), mib(baseline));

    // The subscriber catches up and leaves, and small events replace the large ones.
    slow.call_ok("map/unsubscribe", json!({"subscriptionId": sub["subscriptionId"]})).await;
    slow.take_kept();
    slow.close().await;
    flush_the_log(&mut ws, &me, pid).await;
    let settled = rss_settles(pid, baseline + SETTLED, Duration::from_secs(10)).await;
    eprintln!("RSS: baseline {}, peak {}, then {:?}", mib(baseline), mib(peak), settled.map(mib).map_err(mib));
    assert!(settled.is_ok(), "RSS stayed at {} after the data was gone (baseline {}, peak {})", mib(settled.unwrap_err()), mib(baseline), mib(peak));
}

#[tokio::test]
async fn large_sends_with_nobody_subscribed_cost_no_more_than_the_limits() {
    let gw = start();
    let pid = gw.pid();
    let (mut ws, me) = sender(&gw).await;
    flush_the_log(&mut ws, &me, pid).await;
    let baseline = rss(pid);

    // 400 MiB of 1 MiB messages: 25 times the replay log.
    let peak = load(&mut ws, &me, 400, 1 << 20, pid).await;
    assert!(peak <= baseline + GROWTH, "RSS grew by {} with limits of {} (baseline {})", mib(peak - baseline), mib(LIMITS), mib(baseline));

    flush_the_log(&mut ws, &me, pid).await;
    let settled = rss_settles(pid, baseline + SETTLED, Duration::from_secs(10)).await;
    eprintln!("RSS: baseline {}, peak {}, then {:?}", mib(baseline), mib(peak), settled.map(mib).map_err(mib));
    assert!(settled.is_ok(), "RSS stayed at {} after the data was gone (baseline {}, peak {})", mib(settled.unwrap_err()), mib(baseline), mib(peak));
}

#[tokio::test]
async fn connections_that_were_sent_a_large_message_keep_no_large_buffers() {
    const RECEIVERS: usize = 24;
    let gw = start();
    let pid = gw.pid();
    let (mut ws, me) = sender(&gw).await;
    let mut receivers = Vec::new();
    for i in 0..RECEIVERS {
        let (mut r, _) = gw.ws_connected("agent", None).await;
        r.call_ok("map/agents/register", json!({"agentId": format!("receiver-{i}")})).await;
        receivers.push(r);
    }
    flush_the_log(&mut ws, &me, pid).await;
    let baseline = rss(pid);

    // Each connection writes one 1 MiB message, and stays open.
    let payload = Value::String("x".repeat(1 << 20));
    for (i, r) in receivers.iter_mut().enumerate() {
        ws.call_ok("map/send", json!({"to": {"agent": format!("receiver-{i}")}, "payload": payload})).await;
        let got = r.notification("map/message", WAIT).await.expect("the large message");
        assert_eq!(got["params"]["message"]["payload"].as_str().map(str::len), Some(1 << 20));
    }
    flush_the_log(&mut ws, &me, pid).await;
    let settled = rss_settles(pid, baseline + SETTLED, Duration::from_secs(10)).await;
    eprintln!("RSS: baseline {}, then {:?} with {RECEIVERS} connections open", mib(baseline), settled.map(mib).map_err(mib));
    assert!(settled.is_ok(), "RSS stayed at {} with {RECEIVERS} connections that were sent 1 MiB each (baseline {})", mib(settled.unwrap_err()), mib(baseline));
}
