//! The `map/send` hot path in process (no socket): time and heap allocations
//! per 1:1 send, from the frame's bytes to the answer and the recipient's
//! queued `map/message`. Allocations are counted exactly, so a change to the
//! path shows up here even on a noisy machine.
//!
//! Run: `cargo bench -p map-gateway --bench core_send`

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use map_config::Config;
use map_core::{Conn, Gateway};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SENDS: u64 = 200_000;

fn main() -> anyhow::Result<()> {
    let mut config = Config::default();
    config.server.data_dir = std::env::temp_dir().join(format!("map-gateway-core-send-{}", std::process::id()));
    config.limits.replay_events = 10_000;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let gw = Gateway::new(config);
        let connect = br#"{"jsonrpc":"2.0","id":0,"method":"map/connect","params":{"protocolVersion":1,"participantType":"agent"}}"#;
        let register = br#"{"jsonrpc":"2.0","id":1,"method":"map/agents/register","params":{"name":"bench","role":"bench"}}"#;
        let (tx_a, mut rx_a) = map_core::outbox::channel(1 << 20, 1 << 30);
        let (tx_b, mut rx_b) = map_core::outbox::channel(1 << 20, 1 << 30);
        let mut a = Conn::new(tx_a, true, "bench");
        let mut b = Conn::new(tx_b, true, "bench");
        for conn in [&mut a, &mut b] {
            gw.handle_frame(conn, connect).await.expect("connected");
        }
        gw.handle_frame(&mut a, register).await.expect("registered");
        let answer = gw.handle_frame(&mut b, register).await.expect("registered");
        let answer: serde_json::Value = serde_json::from_str(&answer)?;
        let to = answer["result"]["agent"]["id"].as_str().expect("an agent id").to_string();
        let frame = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"map/send","params":{{"to":{{"agent":"{to}"}},"payload":{{"bt":123456789,"text":"map-bench payload"}}}}}}"#
        );

        let mut run = async |n: u64| {
            for _ in 0..n {
                let answer = gw.handle_frame(&mut a, frame.as_bytes()).await.expect("an answer");
                assert!(answer.contains(r#""delivered":[""#), "send failed: {answer}");
                drop(answer);
                rx_b.try_recv().expect("the message was queued");
                while rx_a.try_recv().is_some() {}
            }
        };
        // Warm up past the replay log's capacity, so eviction is part of the steady state.
        run(20_000).await;
        let allocs = ALLOCS.load(Ordering::Relaxed);
        let t = Instant::now();
        run(SENDS).await;
        let ns = t.elapsed().as_nanos() as f64 / SENDS as f64;
        let per_send = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / SENDS as f64;
        println!("map/send 1:1 in process, {SENDS} sends, one thread");
        println!("| ns per send | heap allocations per send |");
        println!("|---|---|");
        println!("| {ns:.0} | {per_send:.1} |");
        anyhow::Ok(())
    })
}
