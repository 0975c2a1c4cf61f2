//! Plugin signatures, black-box: `plugin keygen|sign|verify`, a gateway
//! whose `server.plugin_signers` refuses unsigned, wrongly signed and
//! tampered components (at start, in `check`, and at reload with 422 while
//! the old version serves), a tenant's own signers, `plugin install`
//! carrying the signature along, and `plugin sign DIR` signing the standard
//! plugins, which a gateway with signers refuses unsigned like any other.

use crate::common;

use std::path::Path;

use common::signing::*;
use common::*;
use serde_json::json;

/// The echo plugin at `wasm`, an anonymous tenant, and `tenant` lines after it.
fn config(wasm: &Path, tenant: &str) -> String {
    format!("[plugins.echo]\npath = {wasm:?}\n[auth]\nanonymous_tenant = \"default\"\n[[tenants]]\nid = \"default\"\n{tenant}\n")
}

#[test]
fn keygen_sign_and_verify_from_the_command_line() {
    let dir = TempDir::new("sign-cli");
    let (key, public) = keygen(dir.path(), "release");
    assert!(public.starts_with("ed25519:"));
    #[cfg(unix)]
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions()) & 0o777, 0o600);
    let again = failed(&run(&["plugin".as_ref(), "keygen".as_ref(), "--out".as_ref(), dir.path().join("release").as_os_str()]));
    assert!(again.contains("never overwritten"), "{again}");

    let wasm = copy("echo-v1.wasm", dir.path(), "echo.wasm");
    sign(&wasm, &key);
    let verified = succeeded(&run(&["plugin".as_ref(), "verify".as_ref(), wasm.as_os_str(), "--signer".as_ref(), public.as_ref()]));
    assert!(verified.contains("signed by key"), "{verified}");
    let (_, other) = keygen(dir.path(), "other");
    let stranger = failed(&run(&["plugin".as_ref(), "verify".as_ref(), wasm.as_os_str(), "--signer".as_ref(), other.as_ref()]));
    assert!(stranger.contains("not a trusted signer"), "{stranger}");
    std::fs::copy(fixture("echo-v2.wasm"), &wasm).unwrap();
    let tampered = failed(&run(&["plugin".as_ref(), "verify".as_ref(), wasm.as_os_str(), "--signer".as_ref(), dir.path().join("release.pub").as_os_str()]));
    assert!(tampered.contains("was signed as"), "{tampered}");
}

#[tokio::test]
async fn a_gateway_with_signers_loads_only_what_they_signed() {
    let keys = TempDir::new("sign-keys");
    let (key, public) = keygen(keys.path(), "release");
    let (rogue, _) = keygen(keys.path(), "rogue");
    let signers = format!("plugin_signers = [{public:?}]");
    let v1 = copy("echo-v1.wasm", keys.path(), "v1.wasm");
    sign(&v1, &key);

    let gw = Gateway::start_config(&signers, &config(&v1, ""));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}));
    let listed = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
    assert!(listed["plugins"][0]["signer"].as_str().is_some_and(|s| s.len() == 16), "{listed}");

    let reload_to = |wasm: &Path| write_config_server(gw.dir.path(), &signers, &config(wasm, ""));
    let addr = gw.addr();
    let reload = || http(&addr, "POST", "/admin/reload?wait=true", &[], b"");
    let unsigned = copy("echo-v2.wasm", keys.path(), "unsigned.wasm");
    let rogue_signed = copy("echo-v2.wasm", keys.path(), "rogue.wasm");
    sign(&rogue_signed, &rogue);
    let tampered = copy("echo-v1.wasm", keys.path(), "tampered.wasm");
    sign(&tampered, &key);
    std::fs::copy(fixture("echo-v2.wasm"), &tampered).unwrap();
    for (wasm, says) in [(&unsigned, "is not signed"), (&rogue_signed, "not a trusted signer"), (&tampered, "was signed as")] {
        reload_to(wasm);
        let r = reload().await;
        assert_eq!(r.status, 422, "{}", r.text());
        assert!(r.text().contains(says) && r.text().contains("plugin echo"), "{says}: {}", r.text());
        assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}), "the signed version serves on");
    }
    let v2 = copy("echo-v2.wasm", keys.path(), "v2.wasm");
    sign(&v2, &key);
    reload_to(&v2);
    assert_eq!(reload().await.status, 200);
    let (mut fresh, _) = gw.ws_connected("client", None).await;
    assert_eq!(fresh.call_ok("echo/version", json!({})).await, json!({"version": "2.0.0"}));

    // `check` refuses the same way, and names the key it wanted.
    let path = write_config_server(keys.path(), &signers, &config(&unsigned, ""));
    let stderr = failed(&run(&["check".as_ref(), "--config".as_ref(), path.as_os_str()]));
    assert!(stderr.contains("is not signed"), "{stderr}");
}

#[test]
fn a_tenant_may_require_its_own_signers() {
    let dir = TempDir::new("sign-tenant");
    let (key, public) = keygen(dir.path(), "ours");
    let (theirs, _) = keygen(dir.path(), "theirs");
    let wasm = copy("echo-v1.wasm", dir.path(), "echo.wasm");
    let tenant = format!("[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-key\"]\nplugins = [\"echo\"]\nplugin_signers = [{public:?}]");
    let check = || {
        let path = write_config_server(dir.path(), "", &config(&wasm, &tenant));
        run(&["check".as_ref(), "--config".as_ref(), path.as_os_str()])
    };
    sign(&wasm, &theirs);
    let stderr = failed(&check());
    assert!(stderr.contains("not a trusted signer"), "{stderr}");
    sign(&wasm, &key);
    assert!(succeeded(&check()).contains("echo 1.0.0"));
}

#[test]
fn install_carries_the_signature_and_defaults_along() {
    let dir = TempDir::new("sign-install");
    let (key, public) = keygen(dir.path(), "k");
    let wasm = copy("echo-v1.wasm", dir.path(), "echo.wasm");
    std::fs::write(dir.path().join("echo.toml"), "deadline_ms = 2000\n").unwrap();
    sign(&wasm, &key);
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    succeeded(&run(&["plugin".as_ref(), "install".as_ref(), wasm.as_os_str(), "--plugin-dir".as_ref(), plugins.as_os_str()]));
    let installed = plugins.join("echo.wasm");
    assert!(plugins.join("echo.wasm.sig").exists() && plugins.join("echo.toml").exists());
    succeeded(&run(&["plugin".as_ref(), "verify".as_ref(), installed.as_os_str(), "--signer".as_ref(), public.as_ref()]));
}

#[test]
fn plugin_sign_of_a_folder_signs_the_standard_plugins_for_a_gateway_with_signers() {
    let dir = TempDir::new("sign-dist");
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dist).unwrap().flatten().map(|e| e.path()) {
        let ext = entry.extension().and_then(|x| x.to_str());
        if matches!(ext, Some("wasm" | "toml")) {
            std::fs::copy(&entry, plugins.join(entry.file_name().unwrap())).unwrap();
        }
        if ext == Some("wasm") {
            names.push(entry.file_stem().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(names.contains(&"mail".to_string()) && names.len() >= 5, "{} lacks the standard plugins: run scripts/build-plugins.sh", dist.display());
    let (key, public) = keygen(dir.path(), "release");
    // No [plugins] table: every component of plugin_dir loads, and each must be signed.
    let config = write_config_server(dir.path(), &format!("plugin_dir = {:?}\nplugin_signers = [{public:?}]", plugins.to_string_lossy()), "");
    let check = || run(&["check".as_ref(), "--config".as_ref(), config.as_os_str()]);
    let refused = failed(&check());
    assert!(
        refused.contains("is not signed") && refused.contains("plugin sign"),
        "the standard plugins are refused, and the error says how to sign them: {refused}"
    );

    let signed = succeeded(&run(&["plugin".as_ref(), "sign".as_ref(), plugins.as_os_str(), "--key".as_ref(), key.as_os_str()]));
    assert_eq!(signed.lines().count(), names.len(), "one signature per component: {signed}");
    let checked = succeeded(&check());
    for name in &names {
        assert!(checked.contains(&format!(": {name} ")) || checked.contains(&format!(", {name} ")), "{name} loads: {checked}");
    }
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let nothing = failed(&run(&["plugin".as_ref(), "sign".as_ref(), empty.as_os_str(), "--key".as_ref(), key.as_os_str()]));
    assert!(nothing.contains("holds no component"), "{nothing}");
}
