//! The credentials extension (`cred/*`) end to end: a gateway whose tenant
//! grants scopes per principal, a static provider with secrets from the
//! environment and the file, and OAuth2 providers against a token endpoint
//! this test serves. Secrets must reach the granted agent and nothing else:
//! not other callers, not events, not the log, not `map-gateway config`.

use crate::common;

use std::sync::Arc;

use base64::Engine;
use common::*;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const GITHUB_TOKEN: &str = "ghp-STATIC-secret-from-env-7f3a";
const WRITE_KEY: &str = "LITERAL-write-key-91bc";
const CLIENT_SECRET: &str = "oauth-CLIENT-secret-55d1";
const ACCESS_TOKEN: &str = "at-ISSUED-by-endpoint-c0ffee";
/// Every secret of the test: none may show anywhere but in a granted answer.
const SECRETS: &[&str] = &[GITHUB_TOKEN, WRITE_KEY, CLIENT_SECRET, ACCESS_TOKEN];

/// A request the token endpoint received.
#[derive(Clone, Debug)]
struct Seen {
    head: String,
    body: String,
}

/// A token endpoint on loopback: it answers by the requested scope and keeps what it received.
struct TokenEndpoint {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl TokenEndpoint {
    async fn start() -> TokenEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, keep.clone()));
            }
        });
        TokenEndpoint { port, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }
}

/// One HTTP/1.1 exchange: read the head and the body its Content-Length
/// announces, answer by the form's `scope`.
async fn answer(mut stream: tokio::net::TcpStream, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let (head, body) = loop {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        raw.extend_from_slice(&buf[..n]);
        let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&raw[..end]).to_string();
        let len: usize = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())).unwrap_or(0);
        if raw.len() >= end + 4 + len {
            break (head, String::from_utf8_lossy(&raw[end + 4..end + 4 + len]).to_string());
        }
    };
    let scope = form_urlencoded::parse(body.as_bytes()).find(|(k, _)| k == "scope").map(|(_, v)| v.to_string()).unwrap_or_default();
    seen.lock().push(Seen { head, body });
    let (status, text) = match scope.as_str() {
        "api.read" => ("200 OK", json!({"access_token": ACCESS_TOKEN, "token_type": "Bearer", "expires_in": 3600}).to_string()),
        "corp:refused" => ("400 Bad Request", json!({"error": "invalid_scope", "error_description": "no such scope"}).to_string()),
        "corp:garbage" => ("200 OK", "this is not JSON".to_string()),
        _ => ("503 Service Unavailable", String::new()),
    };
    let reply = format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}", text.len());
    let _ = stream.write_all(reply.as_bytes()).await;
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// Tenant `acme` with the broker (alice may read GitHub repos and use corp
/// and down scopes on `acme/*`), tenant `globex` without one.
fn config(token_port: u16, down_port: u16, bob_grant: &str) -> String {
    format!(
        r#"
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = [{{ secret = "alice-key", principal = "alice" }}, {{ secret = "bob-key", principal = "bob" }}]
[tenants.credentials.providers.github]
type = "static"
secrets = {{ "github:repo:read" = {{ type = "bearer_token", value = "env:MAP_TEST_CRED_GITHUB_TOKEN" }}, "github:repo:write" = {{ type = "api_key", value = "{WRITE_KEY}" }} }}
[tenants.credentials.providers.corp]
type = "oauth2"
token_url = "http://127.0.0.1:{token_port}/oauth/token"
client_id = "gateway client"
client_secret = "env:MAP_TEST_CRED_CLIENT_SECRET"
scopes = ["corp:*"]
oauth_scopes = {{ "corp:read" = "api.read" }}
[tenants.credentials.providers.down]
type = "oauth2"
token_url = "http://127.0.0.1:{down_port}/token"
client_id = "gw"
client_secret = "{CLIENT_SECRET}"
scopes = ["down:*"]
timeout_ms = 2000
[[tenants.credentials.grants]]
principal = "alice"
scopes = ["github:repo:read", "corp:*", "down:*"]
resources = ["acme/*"]
{bob_grant}
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
"#
    )
}

/// The secrets the configuration names by `env:` (the gateway's environment),
/// and debug lines too: none of them may carry a secret either.
const ENV: &[(&str, &str)] =
    &[("MAP_TEST_CRED_GITHUB_TOKEN", GITHUB_TOKEN), ("MAP_TEST_CRED_CLIENT_SECRET", CLIENT_SECRET), ("MAP_GATEWAY_LOG", "map_gateway=debug,map_core=debug")];

fn start(config: &str) -> Gateway {
    Gateway::start_config_env("max_message_bytes = 65536", config, ENV)
}

/// An agent session of `key`'s principal that declared the credentials flags, with agent `agent_id`.
async fn agent(gw: &Gateway, key: &str, agent_id: &str, flags: Value) -> (Ws, Value) {
    let mut ws = gw.ws().await;
    let params = json!({"protocolVersion": 1, "participantType": "agent", "auth": api_key(key), "capabilities": {"credentials": flags}});
    let connected = ws.call_ok("map/connect", params).await;
    ws.call_ok("map/agents/register", json!({"agentId": agent_id})).await;
    (ws, connected)
}

/// A client of `key` subscribed to the credential events.
async fn watcher(gw: &Gateway, key: &str) -> Ws {
    let (mut ws, _) = gw.ws_connected("client", Some(api_key(key))).await;
    ws.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["credential.issued", "credential.denied"]}})).await;
    ws
}

async fn event(ws: &mut Ws, kind: &str) -> Value {
    let n = ws.take_where(WAIT, |n| n["method"] == "map/event" && n["params"]["event"]["type"] == kind).await.unwrap_or_else(|| panic!("no {kind} event"));
    assert_no_secret("an event", &n.to_string());
    n["params"]["event"].clone()
}

fn assert_no_secret(place: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{place} holds the secret {secret}:\n{text}");
    }
}

async fn get(ws: &mut Ws, scope: &str, resource: &str) -> Value {
    ws.call("cred/get", json!({"scope": scope, "resource": resource})).await
}

#[tokio::test]
async fn static_secrets_go_to_granted_agents_only() {
    let gw = start(&config(closed_port().await, closed_port().await, ""));
    let mut watch = watcher(&gw, "bob-key").await;
    let (mut alice, connected) = agent(&gw, "alice-key", "alice-bot", json!({"canGet": true, "canList": true})).await;
    assert_eq!(connected["capabilities"]["credentials"], json!({"enabled": true, "canGet": true, "canList": true, "canStatus": true}));
    assert!(connected["capabilities"]["extensions"].as_array().unwrap().iter().any(|e| e["uri"] == "urn:map:ext:credentials:1"), "{connected}");

    let issued = ok(&get(&mut alice, "github:repo:read", "acme/frontend").await).clone();
    assert_eq!(issued, json!({"credentialType": "bearer_token", "credential": {"token": GITHUB_TOKEN, "tokenType": "Bearer"}}));
    let e = event(&mut watch, "credential.issued").await;
    assert_eq!(e["data"], json!({"agentId": "alice-bot", "scope": "github:repo:read", "resource": "acme/frontend", "credentialType": "bearer_token"}));
    assert_eq!(e["source"], "alice-bot");

    // Not granted: another scope, another resource, another principal.
    for (scope, resource, why) in [("github:repo:write", "acme/frontend", "not granted to this agent"), ("github:repo:read", "globex/site", "on resource")] {
        let resp = get(&mut alice, scope, resource).await;
        assert_error(&resp, &resp["id"], 11001, "credentials");
        assert!(err(&resp)["message"].as_str().unwrap().contains(why), "{resp}");
        assert_no_secret("a denial", &resp.to_string());
        let e = event(&mut watch, "credential.denied").await;
        assert_eq!((&e["data"]["agentId"], &e["data"]["scope"], &e["data"]["resource"]), (&json!("alice-bot"), &json!(scope), &json!(resource)));
        assert!(e["data"]["reason"].as_str().unwrap().contains(why), "{e}");
    }
    let (mut bob, _) = agent(&gw, "bob-key", "bob-bot", json!({"canGet": true})).await;
    let resp = get(&mut bob, "github:repo:read", "acme/frontend").await;
    assert_eq!(err_code(&resp), 11001, "{resp}");
    assert_eq!(event(&mut watch, "credential.denied").await["data"]["agentId"], "bob-bot");

    // Agents that did not declare the flag, and clients, are refused before the grants are read.
    let (mut undeclared, _) = agent(&gw, "alice-key", "alice-quiet", json!({"canStatus": true})).await;
    assert_eq!(err_code(&get(&mut undeclared, "github:repo:read", "acme/frontend").await), 1003);
    let (mut client, client_connect) = gw.ws_connected("client", Some(api_key("alice-key"))).await;
    assert_eq!(client_connect["capabilities"]["credentials"]["canGet"], false);
    assert_eq!(err_code(&get(&mut client, "github:repo:read", "acme/frontend").await), 1003);
    assert_eq!(err_code(&alice.call("cred/get", json!({"scope": "github:repo:read"})).await), -32602);
    assert_eq!(err_code(&alice.call("cred/get", json!(null)).await), -32602);
    assert_eq!(err_code(&undeclared.call("cred/list", json!({})).await), 1003);

    // Status for any session; the list of what the agent's principal holds.
    assert_eq!(client.call_ok("cred/status", json!({})).await, json!({"providers": ["corp", "down", "github"]}));
    let list = alice.call_ok("cred/list", json!({})).await;
    assert_eq!(list["agentId"], "alice-bot");
    assert_eq!(list["scopes"], json!(["github:repo:read", "corp:*", "down:*"]));
    assert_eq!(list["constraints"]["corp:*"], json!({"resources": ["acme/*"]}));

    // A tenant without a broker advertises none and answers 11000.
    let mut globex = gw.ws().await;
    let params = json!({"protocolVersion": 1, "participantType": "agent", "auth": api_key("globex-key"), "capabilities": {"credentials": {"canGet": true}}});
    let connected = globex.call_ok("map/connect", params).await;
    assert!(connected["capabilities"].get("credentials").is_none(), "{connected}");
    assert!(!connected["capabilities"]["extensions"].to_string().contains("credentials"), "{connected}");
    assert_eq!(err_code(&get(&mut globex, "github:repo:read", "acme/frontend").await), 11000);
    assert_eq!(err_code(&globex.call("cred/status", json!({})).await), 11000);

    // Reloading the configuration applies new grants.
    let bob_grant = "[[tenants.credentials.grants]]\nprincipal = \"bob\"\nscopes = [\"github:repo:write\"]\nresources = [\"*\"]";
    std::fs::write(&gw.config, config(closed_port().await, closed_port().await, bob_grant)).unwrap();
    let reload = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    let issued = ok(&get(&mut bob, "github:repo:write", "globex/anything").await).clone();
    assert_eq!(issued["credential"], json!({"apiKey": WRITE_KEY}));

    assert_no_secret("the log", &gw.log());
    assert_printed_config_has_no_secret(&gw);
}

fn assert_printed_config_has_no_secret(gw: &Gateway) {
    let out = std::process::Command::new(BIN).envs(ENV.iter().copied()).args(["config", "--config"]).arg(&gw.config).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_no_secret("map-gateway config", &text);
    assert!(text.contains("<redacted>") && text.contains("env:MAP_TEST_CRED_GITHUB_TOKEN") && text.contains("github:repo:read"), "{text}");
}

#[tokio::test]
async fn oauth2_tokens_come_from_the_token_endpoint_and_are_kept() {
    let endpoint = TokenEndpoint::start().await;
    let gw = start(&config(endpoint.port, closed_port().await, ""));
    let mut watch = watcher(&gw, "bob-key").await;
    let (mut alice, _) = agent(&gw, "alice-key", "alice-bot", json!({"canGet": true})).await;

    let first = ok(&get(&mut alice, "corp:read", "acme/api").await).clone();
    assert_eq!(first["credentialType"], "bearer_token");
    assert_eq!(first["credential"], json!({"token": ACCESS_TOKEN, "tokenType": "Bearer"}));
    let expires = first["expiresAt"].as_str().unwrap_or_else(|| panic!("no expiresAt: {first}"));
    assert!(expires.ends_with('Z') && expires.contains('T'), "ISO 8601: {expires}");
    let e = event(&mut watch, "credential.issued").await;
    assert_eq!((&e["data"]["credentialType"], &e["data"]["expiresAt"]), (&json!("bearer_token"), &json!(expires)));

    // The exchange: a form POST with the client's id and secret as HTTP Basic.
    let seen = endpoint.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].head.starts_with("POST /oauth/token HTTP/1.1"), "{}", seen[0].head);
    let header =
        |name: &str| seen[0].head.lines().find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string()));
    assert_eq!(header("content-type").as_deref(), Some("application/x-www-form-urlencoded"));
    let basic = header("authorization").and_then(|v| v.strip_prefix("Basic ").map(String::from)).expect("HTTP Basic");
    let decoded = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(basic).unwrap()).unwrap();
    assert_eq!(decoded, format!("gateway+client:{CLIENT_SECRET}"), "id and secret form-encoded (RFC 6749 2.3.1)");
    let form: Vec<(String, String)> = form_urlencoded::parse(seen[0].body.as_bytes()).into_owned().collect();
    assert_eq!(form, vec![("grant_type".into(), "client_credentials".into()), ("scope".into(), "api.read".into())]);

    // Kept until shortly before it expires: the second get asks nobody.
    assert_eq!(ok(&get(&mut alice, "corp:read", "acme/web").await)["credential"]["token"], ACCESS_TOKEN);
    assert_eq!(endpoint.seen().len(), 1);

    // Refused (400) and garbled answers fail; an unreachable or unavailable endpoint is unavailable.
    let refused = get(&mut alice, "corp:refused", "acme/api").await;
    assert_eq!(err_code(&refused), 11003, "{refused}");
    assert!(err(&refused)["message"].as_str().unwrap().contains("invalid_scope"), "{refused}");
    assert_eq!(err_code(&get(&mut alice, "corp:garbage", "acme/api").await), 11003);
    assert_eq!(err_code(&get(&mut alice, "corp:busy", "acme/api").await), 11002);
    let down = get(&mut alice, "down:deploy", "acme/api").await;
    assert_eq!(err_code(&down), 11002, "{down}");
    for resp in [&refused, &down] {
        assert_no_secret("an error", &resp.to_string());
    }
    assert_eq!(endpoint.seen().len(), 4, "one exchange per failed scope, none for the down endpoint");
    let denied = get(&mut alice, "corp:read", "globex/api").await;
    assert_eq!(err_code(&denied), 11001, "grants are checked before any provider");
    assert_eq!(endpoint.seen().len(), 4);

    let log = gw.log();
    assert!(log.contains("credentials provider failed"), "failures are logged:\n{log}");
    assert_no_secret("the log", &log);
    assert_printed_config_has_no_secret(&gw);
}

#[tokio::test]
async fn a_secret_that_cannot_be_read_stops_the_start_with_its_name() {
    let dir = TempDir::new("cred");
    let text = config(closed_port().await, closed_port().await, "").replace("MAP_TEST_CRED_GITHUB_TOKEN", "MAP_TEST_CRED_NEVER_SET");
    let path = write_config(dir.path(), 65536, &text);
    let out = std::process::Command::new(BIN).envs(ENV.iter().copied()).args(["check", "--config"]).arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "check passed without the variable: {stderr}");
    assert!(stderr.contains("MAP_TEST_CRED_NEVER_SET") && stderr.contains("github"), "{stderr}");
    assert_no_secret("check's output", &stderr);
}
