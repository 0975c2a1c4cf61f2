//! `map-gateway plugin new`: the project it writes builds for
//! wasm32-wasip2 as is, loads into the gateway and answers its methods
//! (a store write with an event, a read, a plugin-range error, -32602).
//! `plugin install` and the reload it prints for the configured listener,
//! and the command line's errors: one line, whatever RUST_BACKTRACE says.
//!
//! The build goes to `target/scaffold` in this checkout, so its
//! dependencies are compiled once and later runs only build the project.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::json;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn plugin_new(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(["plugin", "new"]).args(args).output().expect("run map-gateway plugin new")
}

/// `cargo build --release --target wasm32-wasip2` in `dir`; the component's path.
fn build(dir: &Path, lib: &str) -> PathBuf {
    let target = repo().join("target/scaffold");
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo");
    assert!(out.status.success(), "the generated project does not build:\n{}", String::from_utf8_lossy(&out.stderr));
    let wasm = target.join("wasm32-wasip2/release").join(format!("{lib}.wasm"));
    assert!(wasm.exists(), "{} is missing", wasm.display());
    wasm
}

#[tokio::test]
async fn a_plugin_from_plugin_new_builds_loads_and_answers() {
    let tmp = TempDir::new("scaffold");
    let dir = tmp.path().join("scaffold-notes");
    let out = plugin_new(&["scaffold-notes", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "plugin new failed: {}", String::from_utf8_lossy(&out.stderr));
    for file in ["Cargo.toml", "src/lib.rs", "README.md", "Cargo.lock"] {
        assert!(dir.join(file).exists(), "{file} was not written");
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(readme.contains("[plugins.scaffold-notes]"), "the README has the config stanza");
    assert!(readme.contains(r#"capabilities["x-scaffold-notes"]"#), "the README names the capability key map/connect shows: {readme}");

    let wasm = build(&dir, "scaffold_notes");
    // The plugin guide's loop: a gateway loading its plugin folder, then
    // `plugin install` (into that folder) and a reload.
    let plugin_dir = tmp.path().join("plugins");
    std::fs::create_dir(&plugin_dir).unwrap();
    let gw = Gateway::start_config(&format!("plugin_dir = {:?}", plugin_dir.to_string_lossy()), TENANTS);
    // The gateway's own listener, which `plugin install` names in the reload it prints.
    let config = tmp.path().join("install.toml");
    std::fs::write(&config, format!("[server]\nlisten = \"127.0.0.1:{}\"\nplugin_dir = {:?}\n", gw.port, plugin_dir.to_string_lossy())).unwrap();
    let out = Command::new(BIN).args(["plugin", "install"]).arg(&wasm).arg("--config").arg(&config).output().unwrap();
    assert!(out.status.success(), "plugin install failed: {}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("scaffold-notes.wasm"), "{printed}");
    // Run the reload it prints, as a user pastes it.
    let reload = printed
        .lines()
        .find_map(|l| l.split_once("loads it with: "))
        .map(|(_, cmd)| cmd.to_string())
        .unwrap_or_else(|| panic!("no reload command in {printed}"));
    let reloaded = Command::new("bash").args(["-c", &format!("{reload} --fail-with-body -s")]).output().unwrap();
    assert!(reloaded.status.success(), "{reload}: {}{}", String::from_utf8_lossy(&reloaded.stdout), String::from_utf8_lossy(&reloaded.stderr));

    let (mut ws, connected) = gw.ws_connected("client", None).await;
    let ext = connected["capabilities"]["extensions"].as_array().unwrap().iter().find(|e| e["name"] == "x-scaffold-notes").cloned();
    let ext = ext.unwrap_or_else(|| panic!("the plugin is listed: {connected}"));
    assert_eq!(ext["uri"], "x-scaffold-notes:1", "outside the MAP registry: the x- form");
    assert_eq!(ext["methods"], json!(["scaffold-notes/put", "scaffold-notes/get"]));
    assert_eq!(connected["capabilities"]["x-scaffold-notes"], json!({"enabled": true}));

    ws.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["scaffold-notes.put"]}})).await;
    let item = ws.call_ok("scaffold-notes/put", json!({"text": "hello"})).await;
    let id = item["id"].as_str().expect("an id").to_string();
    assert!(id.starts_with("item-") && id.len() == "item-".len() + 26, "{id}");
    assert_eq!(item["text"], "hello");
    assert_eq!(item["createdBy"], connected["participantId"]);

    let event = ws.notification("map/event", WAIT).await.expect("the put emits an event");
    assert_eq!(event["params"]["event"]["type"], "scaffold-notes.put", "{event}");
    assert_eq!(event["params"]["event"]["data"]["itemId"], id.as_str());

    assert_eq!(ws.call_ok("scaffold-notes/get", json!({"itemId": id})).await, item, "read back as stored");
    let missing = ws.call("scaffold-notes/get", json!({"itemId": "item-nope"})).await;
    // 90000 + 1000 × (FNV-1a-32("scaffold-notes") mod 900), + 1
    assert_eq!(err_code(&missing), 857_001, "{missing}");
    assert_eq!(err(&missing)["data"]["details"]["itemId"], "item-nope");
    let malformed = ws.call("scaffold-notes/put", json!({"txt": 1})).await;
    assert_eq!(err_code(&malformed), -32602, "{malformed}");
    assert!(err(&malformed)["message"].as_str().unwrap().contains("missing field `text`"), "{malformed}");
}

#[test]
fn plugin_new_refuses_bad_names_taken_folders_and_a_missing_sdk() {
    let tmp = TempDir::new("scaffold-refuse");
    let taken = tmp.path().join("taken");
    std::fs::create_dir_all(&taken).unwrap();
    std::fs::write(taken.join("keep.txt"), "mine").unwrap();
    let path = |name: &str| tmp.path().join(name).to_string_lossy().to_string();
    let (a, b, c, t, sdk) = (path("a"), path("b"), path("c"), path("taken"), path(""));
    let cases: [(&[&str], &str); 4] = [
        (&["Bad_Name", "--dir", &a], "plugin name"),
        (&["map", "--dir", &b], "core"),
        (&["ok", "--dir", &t], "not empty"),
        (&["ok", "--dir", &c, "--sdk", &sdk], "no map-plugin-sdk"),
    ];
    for (args, why) in cases {
        let out = plugin_new(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(why), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(taken.join("keep.txt")).unwrap(), "mine", "nothing was overwritten");
    assert!(!tmp.path().join("a").exists() && !tmp.path().join("c").exists());
}

#[test]
fn plugin_install_refuses_what_is_not_a_component_and_a_listed_config() {
    let tmp = TempDir::new("install-refuse");
    let file = |name: &str, bytes: &[u8]| {
        let p = tmp.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let module = file("module.wasm", b"\0asm\x01\0\0\0");
    let text = file("notes.wasm", b"hello");
    let component = file("task_board.wasm", b"\0asm\x0d\0\x01\0");
    let listed = file("listed.toml", b"[plugins.mail]\npath = \"mail.wasm\"\n");
    let dir = file("dir.toml", format!("[server]\nplugin_dir = {:?}\n", tmp.path().join("pl").to_string_lossy()).as_bytes());
    let install = |wasm: &Path, config: &Path| Command::new(BIN).args(["plugin", "install"]).arg(wasm).arg("--config").arg(config).output().unwrap();
    for (wasm, config, says) in [(&module, &dir, "core Wasm module"), (&text, &dir, "not a Wasm component"), (&component, &listed, "[plugins.task-board]")] {
        let out = install(wasm, config);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{}: {stderr}", wasm.display());
    }
    let out = install(&component, &dir);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no plugin folder"), "a missing folder is not made");
    std::fs::create_dir(tmp.path().join("pl")).unwrap();
    let out = install(&component, &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(tmp.path().join("pl/task-board.wasm").exists(), "the crate's file name becomes the plugin's name");
}

#[test]
fn plugin_install_prints_the_reload_of_the_configured_listener() {
    let tmp = TempDir::new("install-listen");
    let wasm = tmp.path().join("notes.wasm");
    std::fs::write(&wasm, b"\0asm\x0d\0\x01\0").unwrap();
    std::fs::create_dir(tmp.path().join("pl")).unwrap();
    let cases = [
        ("listen = \"127.0.0.1:4811\"", "", "curl -X POST 'http://127.0.0.1:4811/admin/reload?wait=true'"),
        (
            "listen = \"0.0.0.0:4812\"",
            "[admin]\ntoken = \"admin-s3cret\"\n",
            "curl -X POST -H \"authorization: Bearer $ADMIN_TOKEN\" 'http://127.0.0.1:4812/admin/reload?wait=true'",
        ),
        ("listen = \"[::]:4813\"", "[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n", "curl -X POST 'https://[::1]:4813/admin/reload?wait=true'"),
    ];
    for (listen, more, reload) in cases {
        let config = tmp.path().join("gateway.toml");
        std::fs::write(&config, format!("[server]\n{listen}\nplugin_dir = \"pl\"\n{more}")).unwrap();
        let out = Command::new(BIN).args(["plugin", "install"]).arg(&wasm).arg("--config").arg(&config).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && stdout.contains(reload), "{listen}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(!stdout.contains("admin-s3cret"), "the admin token is named, never printed: {stdout}");
    }
}

#[test]
fn a_user_error_is_one_line_even_with_rust_backtrace_set() {
    let tmp = TempDir::new("cli-errors");
    let missing = tmp.path().join("missing.wasm");
    let absent = tmp.path().join("absent.toml");
    let runs: [&[&std::ffi::OsStr]; 4] = [
        &["plugin".as_ref(), "install".as_ref(), missing.as_os_str()],
        &["plugin".as_ref(), "install".as_ref(), missing.as_os_str(), "--config".as_ref(), absent.as_os_str()],
        &["plugin".as_ref(), "verify".as_ref(), missing.as_os_str(), "--signer".as_ref(), "ed25519:nope".as_ref()],
        &["check".as_ref(), "--config".as_ref(), absent.as_os_str()],
    ];
    for args in runs {
        for backtrace in ["1", "full"] {
            let out = Command::new(BIN).args(args).env("RUST_BACKTRACE", backtrace).env_remove("RUST_LIB_BACKTRACE").output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} failed");
            assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: one line, no backtrace or cause list:\n{stderr}");
            assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        }
    }
    // The cause is on that line; asking for the library backtrace shows one.
    let out = Command::new(BIN).args(["plugin", "install"]).arg(&missing).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("missing.wasm") && stderr.contains("No such file"), "{stderr}");
    let out = Command::new(BIN).args(["plugin", "install"]).arg(&missing).env("RUST_LIB_BACKTRACE", "1").output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Stack backtrace"),
        "RUST_LIB_BACKTRACE=1 is the debug switch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
