//! Plugin dispatch overhead: `echo/call` through the echo component (pooled)
//! and `state/count` through a singleton, against the same gateway path with
//! a native handler, per call (p50/p99), plus the cost of one fresh
//! instantiation, and a gRPC unary call through the singleton over a real
//! HTTP/2 connection (the `h2` client), answered in one `grpc-unary`
//! callback and through `grpc-handler`'s four, beside the same calls to a
//! bare hyper HTTP/2 server (the floor on this machine).
//!
//! Then the audit example (examples/audit) built in Rust, Python,
//! JavaScript and C: component size, start-up with a cold and a warm artifact
//! cache, call latency and instantiation.
//!
//! Run: `scripts/build-plugins.sh --fixtures && cargo bench -p map-gateway --bench plugin_dispatch`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use map_config::{Config, InstanceMode, PluginConfig};
use map_core::{Conn, Gateway};

// The allocator the gateway ships with (main.rs), so that the rows measure
// the gateway as it runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CALLS: usize = 20_000;
const WARMUP: usize = 2_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn measure(gw: &std::sync::Arc<Gateway>, conn: &mut Conn, frame: &str) -> Vec<Duration> {
    measure_n(gw, conn, frame, CALLS).await
}

/// `calls` timed calls of `frame` after a warm-up, sorted.
async fn measure_n(gw: &std::sync::Arc<Gateway>, conn: &mut Conn, frame: &str, calls: usize) -> Vec<Duration> {
    for _ in 0..WARMUP {
        gw.handle_frame(conn, frame.as_bytes()).await.expect("an answer");
    }
    let mut out = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let answer = gw.handle_frame(conn, frame.as_bytes()).await.expect("an answer");
        out.push(t.elapsed());
        assert!(answer.contains("\"result\""), "call failed: {answer}");
    }
    out.sort();
    out
}

/// A connection of the default tenant, after `map/connect`.
async fn connected(gw: &std::sync::Arc<Gateway>) -> Conn {
    let (tx, mut rx) = map_core::outbox::channel(1024, 1 << 30);
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let mut conn = Conn::new(tx, true, "bench");
    gw.handle_frame(&mut conn, br#"{"jsonrpc":"2.0","id":0,"method":"map/connect","params":{"protocolVersion":1}}"#).await;
    conn
}

/// `n` fresh instantiations (and `init`) of the plugin serving `method`, sorted.
async fn instantiations(gw: &Gateway, method: &str, n: usize) -> anyhow::Result<Vec<Duration>> {
    let tenant = gw.tenants.get("default").expect("default tenant");
    let tp = map_plugin_host::of(&tenant).method(method).expect("the plugin is loaded");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(tp.time_instantiation().await?);
    }
    out.sort();
    Ok(out)
}

const GRPC_CALLS: usize = 5_000;
/// The gRPC rows take turns in rounds of this many calls, so that a change
/// in the machine's speed during the run falls on all of them alike.
const GRPC_ROUND: usize = 500;

/// Serve the gateway on a loopback port, for unary gRPC calls from a plain
/// HTTP/2 client (`GrpcClient`).
async fn serve_gateway(gw: std::sync::Arc<Gateway>) -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(map_gateway::transport::serve(gw, listener, None));
    Ok(addr)
}

/// The floor for the gRPC rows: a bare hyper HTTP/2 server that reads the
/// request's message and echoes it with an OK status trailer (no gateway,
/// no plugin), on the same runtime.
async fn bare_h2_echo() -> anyhow::Result<std::net::SocketAddr> {
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                let message = req.into_body().collect().await?.to_bytes();
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                let frames = [Ok::<_, std::convert::Infallible>(Frame::data(message)), Ok(Frame::trailers(trailers))];
                let body = StreamBody::new(futures_util::stream::iter(frames));
                Ok::<_, hyper::Error>(http::Response::builder().header("content-type", "application/grpc").body(body).expect("a response"))
            });
            let conn =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new()).serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::spawn(conn);
        }
    });
    Ok(addr)
}

/// Time unary calls to `echo.v1.Echo/<method>` at each of `targets` over
/// one HTTP/2 connection each, after a warm-up, in alternating rounds; each
/// target's times sorted.
async fn grpc_rounds(targets: &[(std::net::SocketAddr, &str)]) -> anyhow::Result<Vec<Vec<Duration>>> {
    let mut clients = Vec::new();
    for &(addr, method) in targets {
        let mut client = GrpcClient::connect(addr, method).await?;
        for _ in 0..WARMUP {
            client.call().await?;
        }
        clients.push(client);
    }
    let mut times = vec![Vec::with_capacity(GRPC_CALLS); targets.len()];
    for _ in 0..GRPC_CALLS / GRPC_ROUND {
        for (client, times) in clients.iter_mut().zip(&mut times) {
            for _ in 0..GRPC_ROUND {
                times.push(client.call().await?);
            }
        }
    }
    times.iter_mut().for_each(|t| t.sort());
    Ok(times)
}

/// Unary calls to one method over one HTTP/2 connection: request headers,
/// one length-prefixed message, the reply and its `grpc-status` trailer.
struct GrpcClient {
    client: h2::client::SendRequest<bytes::Bytes>,
    uri: String,
}

impl GrpcClient {
    async fn connect(addr: std::net::SocketAddr, method: &str) -> anyhow::Result<GrpcClient> {
        let (client, conn) = h2::client::handshake(tokio::net::TcpStream::connect(addr).await?).await?;
        tokio::spawn(conn);
        Ok(GrpcClient { client: client.ready().await?, uri: format!("http://{addr}/echo.v1.Echo/{method}") })
    }

    /// One call, timed.
    async fn call(&mut self) -> anyhow::Result<Duration> {
        use bytes::{BufMut, BytesMut};
        // Msg { text: "hello" }
        let message = b"\x0a\x05hello";
        let started = Instant::now();
        let request = http::Request::post(&self.uri).header("content-type", "application/grpc").header("te", "trailers").body(())?;
        let (response, mut send) = self.client.send_request(request, false)?;
        let mut frame = BytesMut::with_capacity(5 + message.len());
        frame.put_u8(0);
        frame.put_u32(message.len() as u32);
        frame.put_slice(message);
        send.send_data(frame.freeze(), true)?;
        let mut body = response.await?.into_body();
        let mut got = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            got += chunk.len();
            body.flow_control().release_capacity(chunk.len())?;
        }
        let trailers = body.trailers().await?.unwrap_or_default();
        anyhow::ensure!(trailers.get("grpc-status").is_some_and(|s| s == "0") && got == 5 + message.len(), "gRPC call failed: {trailers:?}");
        let took = started.elapsed();
        std::future::poll_fn(|cx| self.client.poll_ready(cx)).await?;
        Ok(took)
    }
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
        let mut conn = connected(&gw).await;

        let params = r#"{"text":"hello","n":42,"tags":["a","b","c"],"nested":{"ok":true}}"#;
        let plugin = measure(&gw, &mut conn, &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"echo/call","params":{params}}}"#)).await;
        let single = measure(&gw, &mut conn, r#"{"jsonrpc":"2.0","id":1,"method":"state/count","params":{}}"#).await;
        let native = measure(&gw, &mut conn, &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"map/subscribe.ack","params":{params}}}"#)).await;

        let inst = instantiations(&gw, "echo/call", 200).await?;

        let addr = serve_gateway(gw.clone()).await?;
        let bare = bare_h2_echo().await?;
        let rows = grpc_rounds(&[(addr, "Unary"), (addr, "Callbacks"), (bare, "Unary")]).await?;
        let [grpc, callbacks, bare]: [Vec<Duration>; 3] = rows.try_into().expect("a row per target");

        println!("plugin dispatch, {CALLS} calls each, in-process (no socket); gRPC {GRPC_CALLS} calls over loopback HTTP/2");
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
        println!(
            "| gRPC unary through a plugin, one grpc-unary callback (echo.v1.Echo/Unary, singleton, loopback HTTP/2) | {:.1} | {:.1} |",
            micros(percentile(&grpc, 0.5)),
            micros(percentile(&grpc, 0.99))
        );
        println!(
            "| the same through grpc-handler's four callbacks (echo.v1.Echo/Callbacks) | {:.1} | {:.1} |",
            micros(percentile(&callbacks, 0.5)),
            micros(percentile(&callbacks, 0.99))
        );
        println!(
            "| the same calls to a bare hyper HTTP/2 echo (no gateway, the floor) | {:.1} | {:.1} |",
            micros(percentile(&bare, 0.5)),
            micros(percentile(&bare, 0.99))
        );
        println!("| fresh instantiation (pooling allocator) | {:.1} | {:.1} |", micros(percentile(&inst, 0.5)), micros(percentile(&inst, 0.99)));
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_dir_all(data);

    println!();
    println!("the audit example in four languages: audit/stats ({LANG_CALLS} calls, in-process), start-up to ready with a cold and a warm compiled-artifact cache, fresh instantiation");
    println!("| language | component | start, cold cache | start, warm cache | call p50 µs | call p99 µs | instantiation p50 µs | instantiation p99 µs |");
    println!("|---|---|---|---|---|---|---|---|");
    let builds = [
        ("Rust", root.join("target/guests/wasm32-wasip2/release/audit.wasm")),
        ("Python", root.join("examples/audit/python/audit.wasm")),
        ("JavaScript", root.join("examples/audit/js/audit.wasm")),
        ("C", root.join("examples/audit/c/audit.wasm")),
    ];
    for (lang, wasm) in builds {
        anyhow::ensure!(wasm.exists(), "{} is missing: run scripts/build-plugins.sh --fixtures", wasm.display());
        rt.block_on(language_row(lang, wasm))?;
    }
    Ok(())
}

const LANG_CALLS: usize = 5_000;

/// One row of the language table: the same extension built in `lang`.
async fn language_row(lang: &str, wasm: PathBuf) -> anyhow::Result<()> {
    let data = std::env::temp_dir().join(format!("map-gateway-bench-{}-{lang}", std::process::id()));
    let mut config = Config::default();
    config.server.data_dir = data.clone();
    let plugin = PluginConfig { path: wasm.clone(), memory_mb: 64, deadline_ms: 5000, ..PluginConfig::default() };
    config.plugins = Some([("audit".to_string(), plugin)].into());
    let size = std::fs::metadata(&wasm)?.len() as f64 / (1024.0 * 1024.0);
    let started = Instant::now();
    drop(map_gateway::app::start(config.clone(), None).await?);
    let cold = started.elapsed();
    let started = Instant::now();
    let gw = map_gateway::app::start(config, None).await?;
    let warm = started.elapsed();
    let mut conn = connected(&gw).await;
    let calls = measure_n(&gw, &mut conn, r#"{"jsonrpc":"2.0","id":1,"method":"audit/stats","params":{}}"#, LANG_CALLS).await;
    let inst = instantiations(&gw, "audit/stats", 50).await?;
    println!(
        "| {lang} | {size:.2} MiB | {:.0} ms | {:.0} ms | {:.1} | {:.1} | {:.0} | {:.0} |",
        cold.as_secs_f64() * 1000.0,
        warm.as_secs_f64() * 1000.0,
        micros(percentile(&calls, 0.5)),
        micros(percentile(&calls, 0.99)),
        micros(percentile(&inst, 0.5)),
        micros(percentile(&inst, 0.99))
    );
    let _ = std::fs::remove_dir_all(data);
    Ok(())
}
