//! gRPC served for a plugin, driven by a client from another toolchain
//! (Python `grpcio`, stubs generated from `tests/grpc/echo.proto` at test
//! time). `scripts/setup.sh --tests` installs it into `target/pyenv`.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

fn python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let py = std::env::var_os("MAP_TEST_PYTHON").map(PathBuf::from).unwrap_or_else(|| root.join("target/pyenv/bin/python"));
    assert!(py.exists(), "{} is missing: run scripts/setup.sh --tests (it installs grpcio)", py.display());
    py
}

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
    assert!(stdout.contains("backpressure: ok") && stdout.contains("hot swap: ok"), "{stdout}");
    eprintln!("{stdout}");
}
