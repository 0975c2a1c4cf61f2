//! Plugin dispatch overhead: `echo/call` through the echo component (pooled)
//! and `state/count` through a singleton, against the same gateway path with
//! a native handler, per call (p50/p99), plus the cost of one fresh
//! instantiation.
//!
//! Run: `scripts/build-plugins.sh --fixtures && cargo bench -p map-gateway --bench plugin_dispatch`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use map_gateway::config::{Config, InstanceMode, PluginConfig};
use map_gateway::core::{Conn, Gateway};

const CALLS: usize = 20_000;
const WARMUP: usize = 2_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn measure(gw: &std::sync::Arc<Gateway>, conn: &mut Conn, frame: &str) -> Vec<Duration> {
    for _ in 0..WARMUP {
        gw.handle_frame(conn, frame.as_bytes()).await.expect("an answer");
    }
    let mut out = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        let answer = gw.handle_frame(conn, frame.as_bytes()).await.expect("an answer");
        out.push(t.elapsed());
        assert!(answer.contains("\"result\""), "call failed: {answer}");
    }
    out.sort();
    out
}

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let echo = root.join("target/fixtures/echo-v1.wasm");
    let state = root.join("target/fixtures/stateful.wasm");
    for f in [&echo, &state] {
        anyhow::ensure!(f.exists(), "{} is missing: run scripts/build-plugins.sh --fixtures", f.display());
    }
    let data = std::env::temp_dir().join(format!("map-gateway-bench-{}", std::process::id()));
    let mut config = Config::default();
    config.server.data_dir = data.clone();
    let singleton = PluginConfig { path: state, mode: InstanceMode::Singleton, ..PluginConfig::default() };
    config.plugins = Some([("echo".to_string(), PluginConfig { path: echo, ..PluginConfig::default() }), ("state".to_string(), singleton)].into());

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let gw = map_gateway::app::start(config, None).await?;
        let (tx, mut rx) = map_gateway::core::outbox::channel(1024, 1 << 30);
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let mut conn = Conn::new(tx, true, "bench");
        gw.handle_frame(&mut conn, br#"{"jsonrpc":"2.0","id":0,"method":"map/connect","params":{"protocolVersion":1}}"#).await;

        let params = r#"{"text":"hello","n":42,"tags":["a","b","c"],"nested":{"ok":true}}"#;
        let plugin = measure(&gw, &mut conn, &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"echo/call","params":{params}}}"#)).await;
        let single = measure(&gw, &mut conn, r#"{"jsonrpc":"2.0","id":1,"method":"state/count","params":{}}"#).await;
        let native = measure(&gw, &mut conn, &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"map/subscribe.ack","params":{params}}}"#)).await;

        let tenant = gw.tenants.get("default").expect("default tenant");
        let tp = map_gateway::plugins::of(&tenant).method("echo/call").expect("echo is loaded");
        let mut inst = Vec::new();
        for _ in 0..200 {
            inst.push(tp.time_instantiation().await?);
        }
        inst.sort();

        println!("plugin dispatch, {CALLS} calls each, in-process (no socket)");
        println!("| path | p50 µs | p99 µs |");
        println!("|---|---|---|");
        println!("| native handler (map/subscribe.ack) | {:.1} | {:.1} |", micros(percentile(&native, 0.5)), micros(percentile(&native, 0.99)));
        println!("| echo plugin (echo/call) | {:.1} | {:.1} |", micros(percentile(&plugin, 0.5)), micros(percentile(&plugin, 0.99)));
        println!("| singleton plugin (state/count) | {:.1} | {:.1} |", micros(percentile(&single, 0.5)), micros(percentile(&single, 0.99)));
        println!(
            "| plugin overhead (echo) | {:.1} | {:.1} |",
            micros(percentile(&plugin, 0.5)) - micros(percentile(&native, 0.5)),
            micros(percentile(&plugin, 0.99)) - micros(percentile(&native, 0.99))
        );
        println!("| fresh instantiation (pooling allocator) | {:.1} | {:.1} |", micros(percentile(&inst, 0.5)), micros(percentile(&inst, 0.99)));
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_dir_all(data);
    Ok(())
}
