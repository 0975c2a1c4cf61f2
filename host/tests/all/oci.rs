//! Plugins from an OCI registry, black-box, against Debian's
//! `docker-registry` (the CNCF distribution registry) on loopback, which
//! `scripts/setup.sh --tests` installs: `plugin push`, a gateway pulling by
//! tag and by digest, an offline start from its cache, a reload that cannot
//! reach the registry (422, the old version serves), a registry that asks
//! for a login (HTTP Basic from `[oci.auth]`), and a tampered blob,
//! an unsigned artifact and a wrongly signed one refused.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::signing::*;
use common::*;
use serde_json::json;

const REGISTRY: &str = "/usr/bin/docker-registry";

/// A registry on a free loopback port, storing under `dir`; killed on drop.
struct Registry {
    child: Child,
    port: u16,
    store: PathBuf,
}

impl Registry {
    fn start(dir: &Path, port: Option<u16>) -> Registry {
        Registry::start_with(dir, port, "")
    }

    /// A registry that asks for `user`'s login (HTTP Basic, an htpasswd file).
    fn with_login(dir: &Path, user: &str, password: &str) -> Registry {
        let htpasswd = dir.join("htpasswd");
        std::fs::write(&htpasswd, format!("{user}:{}\n", bcrypt::hash(password, 4).unwrap())).unwrap();
        Registry::start_with(dir, None, &format!("auth:\n  htpasswd:\n    realm: test\n    path: {}\n", htpasswd.display()))
    }

    fn start_with(dir: &Path, port: Option<u16>, more_yaml: &str) -> Registry {
        assert!(Path::new(REGISTRY).exists(), "{REGISTRY} is missing: run scripts/setup.sh --tests (Debian package docker-registry)");
        let port = port.unwrap_or_else(|| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
        let store = dir.join("registry");
        let config = dir.join(format!("registry-{port}.yml"));
        let yaml = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n{more_yaml}",
            store.display()
        );
        std::fs::write(&config, yaml).unwrap();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        let child = Command::new(REGISTRY).arg("serve").arg(&config).stdout(Stdio::null()).stderr(log).spawn().expect("start docker-registry");
        let registry = Registry { child, port, store };
        registry.wait_ready();
        registry
    }

    /// Until `GET /v2/` answers (the registry's own readiness signal).
    fn wait_ready(&self) {
        use std::io::{Read, Write};
        let answers = || -> std::io::Result<String> {
            let mut s = std::net::TcpStream::connect(self.host())?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"GET /v2/ HTTP/1.0\r\nHost: registry\r\n\r\n")?;
            let mut head = [0u8; 12];
            s.read_exact(&mut head)?;
            Ok(String::from_utf8_lossy(&head).into_owned())
        };
        // 401: up, and asking for a login.
        let probe = || match answers() {
            Ok(head) if head.ends_with("200") || head.ends_with("401") => Ok(()),
            Ok(head) => Err(head),
            Err(e) => Err(e.to_string()),
        };
        wait::eventually_blocking(Duration::from_secs(30), "docker-registry ready", probe);
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn source(&self, repo_tag: &str) -> String {
        format!("oci://{}/{repo_tag}", self.host())
    }

    /// Replace the stored bytes of a blob (same length), as a corrupted or hostile registry would.
    fn tamper(&self, digest_hex: &str) {
        let data = self.store.join("docker/registry/v2/blobs/sha256").join(&digest_hex[..2]).join(digest_hex).join("data");
        let mut bytes = std::fs::read(&data).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&data, bytes).unwrap();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `plugin push --insecure`: the pushed manifest's digest.
fn push(wasm: &Path, target: &str) -> String {
    let out = succeeded(&run(&["plugin".as_ref(), "push".as_ref(), wasm.as_os_str(), target.as_ref(), "--insecure".as_ref()]));
    out.split("sha256:").nth(1).map(|rest| format!("sha256:{}", &rest[..64])).unwrap_or_else(|| panic!("no digest in {out}"))
}

/// `[server]` lines and the rest of a config loading echo from `source`.
fn config(registry: &Registry, signers: &str, source: &str) -> (String, String) {
    (
        format!("plugin_signers = [{signers}]"),
        format!(
            "[oci]\ninsecure = [{:?}]\n[plugins.echo]\nsource = {source:?}\n[auth]\nanonymous_tenant = \"default\"\n[[tenants]]\nid = \"default\"\n",
            registry.host()
        ),
    )
}

/// `map-gateway check` of such a config: its output, and whether it passed.
fn check(dir: &Path, server: &str, rest: &str) -> (bool, String) {
    let path = write_config_server(dir, server, rest);
    let out = run(&["check".as_ref(), "--config".as_ref(), path.as_os_str()]);
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
async fn plugins_come_from_a_registry_by_tag_and_digest_and_start_offline_from_the_cache() {
    let work = TempDir::new("oci");
    let registry = Registry::start(work.path(), None);
    let (key, public) = keygen(work.path(), "release");
    let v1 = copy("echo-v1.wasm", work.path(), "v1.wasm");
    sign(&v1, &key);
    let v2 = copy("echo-v2.wasm", work.path(), "v2.wasm");
    sign(&v2, &key);
    let signers = format!("{public:?}");
    push(&v1, &registry.source("plugins/echo:stable"));
    let v2_digest = push(&v2, &registry.source("plugins/echo:next"));

    let (server, rest) = config(&registry, &signers, &registry.source("plugins/echo:stable"));
    let mut gw = Gateway::start_config(&server, &rest);
    let (mut ws, _) = gw.ws_connected("client", None).await;
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}), "by tag");
    let listed = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
    assert_eq!(listed["plugins"][0]["digest"], json!(sha256_hex(&v1)), "{listed}");

    // By digest, on reload.
    let (_, by_digest) = config(&registry, &signers, &format!("oci://{}/plugins/echo@{v2_digest}", registry.host()));
    write_config_server(gw.dir.path(), &server, &by_digest);
    let done = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(done.status, 200, "{}", done.text());
    let (mut ws, _) = gw.ws_connected("client", None).await;
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "2.0.0"}), "by digest");

    // The registry goes away: a restart serves from the cache; a reload that must look a tag up fails.
    let port = registry.port;
    drop(registry);
    gw.terminate();
    let gw = gw.restart();
    let (mut ws, _) = gw.ws_connected("client", None).await;
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "2.0.0"}), "offline, from the cache");
    write_config_server(gw.dir.path(), &server, &rest.replace("echo:stable", "echo:next"));
    let refused = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(refused.status, 422, "{}", refused.text());
    assert!(refused.text().contains("pulling"), "{}", refused.text());
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "2.0.0"}), "the old version serves on");

    // Back online, the reload looks the tag up again.
    let registry = Registry::start(work.path(), Some(port));
    let done = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(done.status, 200, "{}", done.text());
    drop(registry);
}

#[test]
fn tampered_unsigned_and_wrongly_signed_artifacts_are_refused() {
    let work = TempDir::new("oci-refused");
    let registry = Registry::start(work.path(), None);
    let (key, public) = keygen(work.path(), "release");
    let (rogue, _) = keygen(work.path(), "rogue");
    let signers = format!("{public:?}");
    let good = copy("echo-v1.wasm", work.path(), "good.wasm");
    sign(&good, &key);
    push(&good, &registry.source("plugins/echo:good"));
    let (server, rest) = config(&registry, &signers, &registry.source("plugins/echo:good"));
    let (passed, said) = check(work.path(), &server, &rest);
    assert!(passed && said.contains("echo 1.0.0"), "{said}");

    // Each refusal names the reference the configuration wrote, not the cache it was pulled into.
    let refused = |tag: &str, says: &str| {
        let source = registry.source(&format!("plugins/echo:{tag}"));
        let (passed, said) = check(work.path(), &server, &config(&registry, &signers, &source).1);
        assert!(!passed && said.contains(says), "{tag}: {said}");
        assert!(said.contains(&format!("{source} {says}")) && !said.contains("plugin.wasm"), "{tag}: names {source}, not the cache: {said}");
    };
    let unsigned = copy("echo-v2.wasm", work.path(), "unsigned.wasm");
    push(&unsigned, &registry.source("plugins/echo:unsigned"));
    refused("unsigned", "is not signed");

    let rogue_signed = copy("echo-v2.wasm", work.path(), "rogue.wasm");
    sign(&rogue_signed, &rogue);
    push(&rogue_signed, &registry.source("plugins/echo:rogue"));
    refused("rogue", "is signed by key");

    // A signature made for another component, pushed beside this one.
    let swapped = copy("echo-v1.wasm", work.path(), "swapped.wasm");
    sign(&swapped, &key);
    std::fs::copy(fixture("echo-v2.wasm"), &swapped).unwrap();
    push(&swapped, &registry.source("plugins/echo:swapped"));
    refused("swapped", "was signed as");

    let tampered = copy("echo-v2.wasm", work.path(), "tampered.wasm");
    sign(&tampered, &key);
    push(&tampered, &registry.source("plugins/echo:tampered"));
    registry.tamper(&sha256_hex(&tampered));
    let (passed, said) = check(work.path(), &server, &config(&registry, &signers, &registry.source("plugins/echo:tampered")).1);
    // oci-client checks blob digests as it pulls; the gateway checks again before writing.
    assert!(!passed && (said.contains("Invalid digest") || said.contains("not the one its manifest names")), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_tenants_run_two_versions_of_one_plugin() {
    let work = TempDir::new("oci-versions");
    let registry = Registry::start(work.path(), None);
    let v1_digest = push(&fixture("echo-v1.wasm"), &registry.source("plugins/echo:1"));
    push(&fixture("echo-v2.wasm"), &registry.source("plugins/echo:2"));
    let pinned = format!("oci://{}/plugins/echo@{v1_digest}", registry.host());
    let rest = format!(
        "[oci]\ninsecure = [{:?}]\n[plugins.echo]\nsource = {:?}\n[auth]\nanonymous_tenant = \"default\"\n[[tenants]]\nid = \"default\"\n[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-key\"]\nplugin_versions = {{ echo = {pinned:?} }}\n",
        registry.host(),
        registry.source("plugins/echo:2")
    );
    let gw = Gateway::start_config("", &rest);
    let (mut moved_on, _) = gw.ws_connected("client", None).await;
    let (mut kept_back, _) = gw.ws_connected("client", Some(api_key("acme-key"))).await;
    assert_eq!(moved_on.call_ok("echo/version", json!({})).await, json!({"version": "2.0.0"}));
    assert_eq!(kept_back.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}), "acme keeps the version it pinned");
    let listed = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
    let versions: Vec<&str> = listed["plugins"].as_array().unwrap().iter().filter(|p| p["name"] == "echo").filter_map(|p| p["version"].as_str()).collect();
    assert_eq!(versions.len(), 2, "both versions loaded: {listed}");
    let by_tenant: Vec<(String, String)> =
        listed["tenants"].as_array().unwrap().iter().map(|t| (t["tenant"].as_str().unwrap().to_string(), t["version"].as_str().unwrap().to_string())).collect();
    assert!(by_tenant.contains(&("acme".into(), "1.0.0".into())) && by_tenant.contains(&("default".into(), "2.0.0".into())), "{by_tenant:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_that_asks_for_a_login_gets_the_configured_one() {
    let work = TempDir::new("oci-login");
    let registry = Registry::with_login(work.path(), "ci", "s3cret-pass");
    let oci = |auth: &str| format!("[oci]\ninsecure = [{:?}]\n{auth}", registry.host());
    let login = format!("auth = {{ {:?} = {{ username = \"ci\", password = \"s3cret-pass\" }} }}\n", registry.host());
    // plugin push reads [oci] from --config.
    let push_config = work.path().join("push.toml");
    std::fs::write(&push_config, oci(&login)).unwrap();
    let pushed = run(&[
        "plugin".as_ref(),
        "push".as_ref(),
        fixture("echo-v1.wasm").as_os_str(),
        registry.source("plugins/echo:1").as_ref(),
        "--config".as_ref(),
        push_config.as_os_str(),
    ]);
    succeeded(&pushed);
    let rest = |auth: &str| {
        format!(
            "{}[plugins.echo]\nsource = {:?}\n[auth]\nanonymous_tenant = \"default\"\n[[tenants]]\nid = \"default\"\n",
            oci(auth),
            registry.source("plugins/echo:1")
        )
    };
    let (passed, said) = check(work.path(), "", &rest(""));
    assert!(!passed && said.contains("Not authorized"), "anonymous is refused: {said}");
    let gw = Gateway::start_config("", &rest(&login));
    let (mut ws, _) = gw.ws_connected("client", None).await;
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}));
    let shown = succeeded(&run(&["config".as_ref(), "--config".as_ref(), gw.config.as_os_str()]));
    assert!(!shown.contains("s3cret-pass"), "map-gateway config redacts the registry password: {shown}");
}

/// A copy of a fixture that is a version of its own: the same component
/// with a custom section naming `n` appended (so its SHA-256 differs).
fn variant(fixture_name: &str, dir: &Path, n: u8) -> PathBuf {
    let mut bytes = std::fs::read(fixture(fixture_name)).unwrap();
    let name = b"map-test-variant";
    // A custom section: id 0, its size, then the name (length-prefixed) and the payload.
    bytes.extend_from_slice(&[0, (1 + name.len() + 1) as u8, name.len() as u8]);
    bytes.extend_from_slice(name);
    bytes.push(n);
    let to = dir.join(format!("variant-{n}.wasm"));
    std::fs::write(&to, bytes).unwrap();
    to
}

/// The entries of a folder, sorted (none when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    names.sort();
    names
}

/// `data_dir/components` keeps what serves and `keep_versions` older
/// versions per plugin; `data_dir/oci` keeps what the configuration's
/// sources name. The rest goes after each load; a version pruned from both
/// comes back from the registry when the configuration names it again.
#[tokio::test(flavor = "multi_thread")]
async fn kept_components_and_pulled_artifacts_are_pruned_to_what_may_still_be_needed() {
    let work = TempDir::new("oci-prune");
    let registry = Registry::start(work.path(), None);
    let versions: Vec<PathBuf> = (1..=4).map(|n| variant("echo-v1.wasm", work.path(), n)).collect();
    let manifests: Vec<String> = versions.iter().enumerate().map(|(i, v)| push(v, &registry.source(&format!("plugins/echo:{}", i + 1)))).collect();
    let server = "keep_versions = 1";
    let (_, rest) = config(&registry, "", &registry.source("plugins/echo:1"));
    let gw = Gateway::start_config(server, &rest);
    let data = gw.dir.path().join("data");
    assert_eq!(entries(&data.join("components")), vec![sha256_hex(&versions[0])]);
    for i in 1..4 {
        let (_, rest) = config(&registry, "", &registry.source(&format!("plugins/echo:{}", i + 1)));
        write_config_server(gw.dir.path(), server, &rest);
        let done = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
        assert_eq!(done.status, 200, "{}", done.text());
        let mut kept = vec![sha256_hex(&versions[i]), sha256_hex(&versions[i - 1])];
        kept.sort();
        assert_eq!(entries(&data.join("components")), kept, "after loading version {}: the one serving and one older", i + 1);
        let pulled = manifests[i].trim_start_matches("sha256:").to_string();
        assert_eq!(entries(&data.join("oci")), vec![pulled, "tags.json".to_string()], "after loading version {}: what the configuration names", i + 1);
    }
    // Version 1 was pruned from both: naming it again pulls it again.
    write_config_server(gw.dir.path(), server, &rest);
    let done = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(done.status, 200, "{}", done.text());
    let listed = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
    assert_eq!(listed["plugins"][0]["digest"], json!(sha256_hex(&versions[0])), "{listed}");
    let (mut ws, _) = gw.ws_connected("client", None).await;
    assert_eq!(ws.call_ok("echo/version", json!({})).await, json!({"version": "1.0.0"}));
}
