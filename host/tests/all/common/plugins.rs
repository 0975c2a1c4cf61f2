//! Helpers for the plugin tests: configurations with the fixture components
//! (from `scripts/build-plugins.sh --fixtures`), the failure a broken plugin
//! call answers with, and what the admin API says is running.

use std::time::Duration;

use serde_json::Value;

use super::*;

/// Tenants: `default` (anonymous) gets every plugin; acme and globex get the lists given.
pub fn config(plugins: &str, acme: &str, globex: &str, storage: &str) -> String {
    format!(
        r#"
{storage}
{plugins}
[auth]
anonymous_tenant = "default"
[[tenants]]
id = "default"
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
plugins = {acme}
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
plugins = {globex}
"#
    )
}

pub fn misbehave_and_echo() -> String {
    format!("[plugins.bad]\npath = {:?}\ndeadline_ms = 300\nmemory_mb = 32\n[plugins.echo]\npath = {:?}\n", fixture("misbehave.wasm"), fixture("echo-v1.wasm"))
}

pub fn start(text: &str) -> Gateway {
    Gateway::start_with(8 << 20, text)
}

pub async fn tenant_ws(gw: &Gateway, key: &str) -> (Ws, Value) {
    gw.ws_connected("client", Some(api_key(key))).await
}

pub fn plugin_failure(resp: &Value, reason: &str) {
    let e = err(resp);
    assert_eq!(e["code"], -32603, "{resp}");
    assert_eq!(e["data"]["category"], "internal", "{resp}");
    assert_eq!(e["data"]["details"]["plugin"], "bad", "{resp}");
    let got = e["data"]["details"]["reason"].as_str().unwrap_or_default();
    assert!(got.contains(reason), "reason {got:?} should mention {reason:?}: {resp}");
    assert!(e["message"].as_str().unwrap_or_default().contains("Plugin bad"), "{resp}");
}

/// Calls of `plugin` that hold an instance in `tenant` now, as the admin API
/// counts them (0 before the tenant's first call).
pub async fn running(gw: &Gateway, tenant: &str, plugin: &str) -> u64 {
    let status = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await.json();
    let entries = status["tenants"].as_array().cloned().unwrap_or_default();
    entries.iter().find(|t| t["tenant"] == tenant && t["plugin"] == plugin).and_then(|t| t["instances"]["busy"].as_u64()).unwrap_or(0)
}

/// Wait until `n` calls of `plugin` run at once in `tenant` (polled; fails
/// after a generous deadline).
pub async fn until_running(gw: &Gateway, tenant: &str, plugin: &str, n: u64) {
    let mut seen = Vec::new();
    let probe = async || {
        let now = running(gw, tenant, plugin).await;
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        if now == n {
            Ok(())
        } else {
            Err(())
        }
    };
    if wait::until(Duration::from_secs(15), probe).await.is_err() {
        panic!("{n} calls of {plugin} never ran at once in {tenant} (seen, in turn: {seen:?})");
    }
}
