//! Pinned digests: a plugin entry with `sha256` loads only the component
//! with that digest. `check` prints every loaded digest and refuses a
//! mismatch; a reload to a file that does not match fails with 422 and the
//! old version keeps serving; `/admin/plugins` shows the digest in use.
//! Also the configuration mistakes around where a component comes from,
//! and the rollout endpoints of a gateway that is not in a cluster.

use crate::common;

use common::signing::sha256_hex;
use common::*;
use serde_json::json;

/// The echo plugin at `path`, pinned to `pin`; one anonymous tenant.
fn pinned(path: &std::path::Path, pin: &str) -> String {
    format!("[plugins.echo]\npath = {path:?}\nsha256 = {pin:?}\n[auth]\nanonymous_tenant = \"default\"\n[[tenants]]\nid = \"default\"\n")
}

#[test]
fn check_prints_the_digest_and_refuses_a_mismatch() {
    let dir = TempDir::new("digest-check");
    let echo = fixture("echo-v1.wasm");
    let digest = sha256_hex(&echo);
    let check = |pin: &str| {
        let path = write_config(dir.path(), 65536, &pinned(&echo, pin));
        std::process::Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap()
    };
    let good = check(&digest);
    let stdout = String::from_utf8_lossy(&good.stdout);
    assert!(good.status.success() && stdout.contains(&format!("echo 1.0.0 (sha256 {digest})")), "{stdout}{}", String::from_utf8_lossy(&good.stderr));

    let other = "0".repeat(64);
    let bad = check(&other);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && stderr.contains(&digest) && stderr.contains(&other) && stderr.contains("plugin echo"), "{stderr}");

    let malformed = check("abc");
    assert!(!malformed.status.success() && String::from_utf8_lossy(&malformed.stderr).contains("64 hexadecimal digits"));
}

#[tokio::test]
async fn a_reload_to_an_unpinned_file_fails_and_the_old_version_serves() {
    let v1 = fixture("echo-v1.wasm");
    let v2 = fixture("echo-v2.wasm");
    let gw = Gateway::start_config("", &pinned(&v1, &sha256_hex(&v1)));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}));
    let listed = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
    assert_eq!(listed["plugins"][0]["digest"], sha256_hex(&v1), "{listed}");

    // v2's file under v1's pin: refused, and v1 goes on answering.
    write_config_server(gw.dir.path(), "", &pinned(&v2, &sha256_hex(&v1)));
    let refused = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(refused.status, 422, "{}", refused.text());
    let error = refused.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains(&sha256_hex(&v2)) && error.contains("pins"), "{error}");
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}));

    // Pinned to v2's digest, it loads.
    write_config_server(gw.dir.path(), "", &pinned(&v2, &sha256_hex(&v2)));
    let done = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(done.status, 200, "{}", done.text());
    let (mut fresh, _) = gw.ws_connected("client", None).await;
    assert_eq!(fresh.call_ok("echo/version", json!({})).await, json!({"version": "2.0.0"}));
}

#[test]
fn check_refuses_bad_sources_and_versions_of_unknown_plugins() {
    let dir = TempDir::new("digest-bad-config");
    let echo = fixture("echo-v1.wasm");
    let tenants = "[auth]\nanonymous_tenant = \"default\"\n[[tenants]]\nid = \"default\"\n";
    for (plugin, says) in [
        ("source = \"http://registry.example/echo:1\"".to_string(), "source must be oci://"),
        (format!("path = {echo:?}\nsource = \"oci://registry.example/echo:1\""), "path or source, not both"),
        ("deadline_ms = 100".to_string(), "path (a file) or source"),
    ] {
        let path = write_config(dir.path(), 65536, &format!("[plugins.echo]\n{plugin}\n{tenants}"));
        let out = std::process::Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{plugin} → {stderr}");
    }
    let unknown = format!("[plugins.echo]\npath = {echo:?}\n{tenants}plugin_versions = {{ ghost = {echo:?} }}\n");
    let out = std::process::Command::new(BIN).args(["check", "--config"]).arg(write_config(dir.path(), 65536, &unknown)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("plugin_versions names ghost"), "{stderr}");
}

#[tokio::test]
async fn outside_a_cluster_there_is_no_rollout_to_show_or_roll_back() {
    let echo = fixture("echo-v1.wasm");
    let gw = Gateway::start_config("", &pinned(&echo, &sha256_hex(&echo)));
    let listed = http(&gw.addr(), "GET", "/admin/rollout", &[], b"").await;
    assert_eq!(listed.status, 404, "{}", listed.text());
    let back = http(&gw.addr(), "POST", "/admin/rollback", &[], b"").await;
    assert_eq!(back.status, 422, "{}", back.text());
    assert!(back.text().contains("not a cluster"), "{}", back.text());
    assert_eq!(http(&gw.addr(), "GET", "/admin/rollback", &[], b"").await.status, 405);
}
