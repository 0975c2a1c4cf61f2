//! gRPC served for a plugin, driven by a client from another toolchain
//! (Python `grpcio`, stubs generated from `tests/grpc/echo.proto` at test
//! time). `scripts/setup.sh --tests` installs it into `target/pyenv`.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

#[tokio::test]
async fn a_plugin_serves_every_grpc_stream_kind_to_a_grpcio_client() {
    let extra = format!(
        r#"
[plugins.state]
path = {:?}
mode = "singleton"
deadline_ms = 1000
config = {{ generation = "1" }}
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
"#,
        fixture("stateful.wasm")
    );
    let dir = TempDir::new("grpc");
    let config = write_config(dir.path(), 1 << 20, &extra);
    let gw = Gateway::launch(dir, config.clone());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/grpc/echo_client.py");
    let out = tokio::task::spawn_blocking(move || Command::new(python()).arg(script).arg(gw.addr()).arg("acme-key").arg(&config).output().map(|o| (o, gw)))
        .await
        .unwrap()
        .expect("python runs");
    let (out, gw) = out;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the grpcio client failed:\n{stdout}\n{stderr}\ngateway log:\n{}", gw.log());
    assert!(stdout.contains("backpressure: ok") && stdout.contains("hot swap: ok") && stdout.contains("singleton failure ends its streams: ok"), "{stdout}");
    eprintln!("{stdout}");
}

/// The standard plugins as `scripts/build-plugins.sh` leaves them.
fn standard_plugins() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    assert!(dir.join("uap.wasm").exists(), "{} has no uap.wasm: run scripts/build-plugins.sh", dir.display());
    dir
}

fn uap_gateway() -> (Gateway, PathBuf) {
    let server = format!("plugin_dir = {:?}\nmax_message_bytes = 4194304", standard_plugins());
    let extra = r#"
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
plugins = ["uap"]
plugin_config = { uap = { acceptanceTimeoutMs = 500 } }
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
plugins = ["uap"]
"#;
    let dir = TempDir::new("uap");
    let config = write_config_server(dir.path(), &server, extra);
    (Gateway::launch(dir, config.clone()), config)
}

/// Run `tests/grpc/<script>` with these arguments after the gateway's address and the key.
async fn python_script(gw: Gateway, script: &str, args: &[&str]) -> (String, Gateway) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/grpc").join(script);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (out, gw) = tokio::task::spawn_blocking(move || Command::new(python()).arg(script).arg(gw.addr()).args(args).output().map(|o| (o, gw)))
        .await
        .unwrap()
        .expect("python runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the grpcio agents failed:\n{stdout}\n{stderr}\ngateway log:\n{}", gw.log());
    eprintln!("{stdout}");
    (stdout, gw)
}

#[tokio::test]
async fn the_uap_hub_serves_grpcio_agents_and_map_clients() {
    let (gw, _) = uap_gateway();
    let (stdout, gw) = python_script(gw, "uap_agents.py", &["acme-key"]).await;
    for check in [
        "happy path: ok",
        "rejection: ok",
        "acceptance timeout: ok",
        "cancel: ok",
        "disconnect mid-session: ok",
        "translation: ok",
        "struct values: ok",
        "malformed traffic: ok",
        "listing: ok",
    ] {
        assert!(stdout.contains(check), "{check} missing from:\n{stdout}");
    }
    // Another tenant's hub has none of acme's agents or jobs.
    let (mut globex, _) = gw.ws_connected("client", Some(api_key("globex-key"))).await;
    assert_eq!(globex.call_ok("uap/list", serde_json::json!({})).await["jobs"], serde_json::json!([]));
    assert_eq!(globex.call_ok("uap/agents", serde_json::json!({})).await["agents"], serde_json::json!([]));
    // The hub's own counters and gauges, at the gateway's /metrics.
    let text = http(&gw.addr(), "GET", "/metrics", &[], b"").await.text();
    let value = |series: &str| text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse::<f64>().ok());
    for status in ["queued", "proposed", "running", "completed", "failed", "cancelled"] {
        let n = value(&format!(r#"map_plugin_uap_jobs_total{{tenant="acme",plugin="uap",status="{status}"}}"#));
        assert!(n.is_some_and(|n| n >= 1.0), "jobs {status}:\n{text}");
    }
    assert!(value(r#"map_plugin_uap_jobs_running{tenant="acme",plugin="uap"}"#).is_some(), "{text}");
    assert!(!text.contains(r#"tenant="globex",plugin="uap",status"#), "globex ran no jobs");
}

#[tokio::test]
async fn fifty_uap_agents_complete_five_hundred_jobs_exactly_once() {
    let (gw, _) = uap_gateway();
    let (stdout, _gw) = python_script(gw, "uap_load.py", &["globex-key", "50", "500"]).await;
    assert!(stdout.contains("each executed exactly once"), "{stdout}");
}

#[tokio::test]
async fn a_killed_uap_hub_fails_running_jobs_and_keeps_queued_ones() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let (gw, _) = uap_gateway();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/grpc/uap_restart.py");
    let addr = gw.addr();
    let out = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(python())
            .arg(script)
            .arg(addr)
            .arg("globex-key")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python runs");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        if line.trim() != "ready" {
            let out = child.wait_with_output().unwrap();
            panic!("phase one failed: {line}{}\ngateway log:\n{}", String::from_utf8_lossy(&out.stderr), gw.log());
        }
        let gw = gw.kill_and_restart();
        writeln!(child.stdin.take().unwrap(), "{}", gw.addr()).unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status.success(), rest, stderr, gw.log())
    })
    .await
    .unwrap();
    let (ok, stdout, stderr, log) = out;
    assert!(ok && stdout.contains("restart: ok"), "{stdout}\n{stderr}\ngateway log:\n{log}");
}
