//! MAP federation between gateways, black-box: `map/federation/connect`
//! (every auth method, the two-round-trip negotiation, refusals), what a
//! peer's session sees and reaches, `map/federation/route` and its loop
//! checks across three gateways, messages between agents of two systems
//! both ways, the durable queue across a kill -9 of either side, imported
//! events, and the link's events.

use crate::common;

use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// How long a link may take to come up, or to come back after an outage
/// (its backoff has doubled a few times by then).
const LINK: Duration = Duration::from_secs(20);
/// A message through both gateways.
const ACROSS: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// A door in front of a gateway

/// A TCP relay with a port known before the gateway behind it starts (the
/// peers' configs name it), pointed at the gateway once it runs (again at
/// its new port after a restart), and shut to keep the peers out.
struct Door {
    port: u16,
    state: Arc<Mutex<DoorState>>,
}

struct DoorState {
    upstream: Option<u16>,
    shut: bool,
    stopped: bool,
    /// Both ends of every relayed connection, to cut them when shut.
    live: Vec<TcpStream>,
}

impl Door {
    fn new() -> Door {
        let listener = TcpListener::bind("127.0.0.1:0").expect("door listener");
        let port = listener.local_addr().expect("door address").port();
        let state = Arc::new(Mutex::new(DoorState { upstream: None, shut: false, stopped: false, live: Vec::new() }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for down in listener.incoming() {
                let Ok(down) = down else { continue };
                let upstream = {
                    let s = shared.lock().unwrap();
                    if s.stopped {
                        return;
                    }
                    s.upstream.filter(|_| !s.shut)
                };
                // No gateway behind the door, or shut: closed at once.
                let Some(upstream) = upstream else { continue };
                let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let _ = (down.set_nodelay(true), up.set_nodelay(true));
                let mut s = shared.lock().unwrap();
                if s.shut {
                    continue;
                }
                s.live.extend([down.try_clone(), up.try_clone()].into_iter().flatten());
                drop(s);
                relay(down, up);
            }
        });
        Door { port, state }
    }

    fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/map", self.port)
    }

    /// Relay to the gateway on this port from now on.
    fn point_at(&self, gateway: &Gateway) {
        self.state.lock().unwrap().upstream = Some(gateway.port);
    }

    /// Cut every relayed connection and refuse new ones.
    fn shut(&self) {
        let mut s = self.state.lock().unwrap();
        s.shut = true;
        for c in s.live.drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    fn open(&self) {
        self.state.lock().unwrap().shut = false;
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.shut();
        self.state.lock().unwrap().stopped = true;
        // Wake the accepting thread so that it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copy both ways; when either side ends, end both.
fn relay(a: TcpStream, b: TcpStream) {
    let pairs = [(a.try_clone(), b.try_clone()), (Ok(b), Ok(a))];
    for (from, to) in pairs {
        let (Ok(mut from), Ok(mut to)) = (from, to) else { continue };
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        });
    }
}

// ---------------------------------------------------------------------------
// Configurations

/// One gateway holding one tenant `me`, the system `me`, federated with the
/// systems `peers`: `(system id, its endpoint, what it is shown, what is
/// imported from it)`. Keys: `<me>-key` (principal `<me>-user`, the local
/// users) and `<peer>-at-<me>` (principal `<peer>`, what the peer presents
/// here); towards a peer this system presents `<me>-at-<peer>`. `limits`:
/// more lines of `[tenants.federation]`.
fn system_config(me: &str, endpoint: &str, limits: &str, peers: &[(&str, String, &str, &str)]) -> String {
    let mut keys = vec![format!("{{ secret = \"{me}-key\", principal = \"{me}-user\" }}")];
    keys.extend(peers.iter().map(|(p, ..)| format!("{{ secret = \"{p}-at-{me}\", principal = \"{p}\" }}")));
    let mut text = format!(
        "[auth]\nanonymous_tenant = \"\"\n[[tenants]]\nid = \"{me}\"\napi_keys = [{}]\n[tenants.federation]\nsystem_id = \"{me}\"\nendpoint = \"{endpoint}\"\n{limits}\n",
        keys.join(", ")
    );
    for (peer, peer_endpoint, expose, import) in peers {
        text.push_str(&format!(
            "[[tenants.federation.peers]]\nsystem_id = \"{peer}\"\nendpoint = \"{peer_endpoint}\"\nauth = {{ method = \"api-key\", credential = \"{me}-at-{peer}\" }}\nprincipal = \"{peer}\"\nexpose = {expose}\nimport_events = {import}\n"
        ));
    }
    text
}

/// Two systems, `acme` and `globex`, each on its own gateway behind a door.
struct Pair {
    acme: Gateway,
    globex: Gateway,
    acme_door: Door,
    globex_door: Door,
}

/// What each side shows the other and imports from it.
struct Terms {
    acme_shows: &'static str,
    acme_imports: &'static str,
    globex_shows: &'static str,
    globex_imports: &'static str,
}

const SHOW_ALL: &str = r#"{ agents = "all" }"#;

impl Pair {
    /// Doors first (each config names the other's), then the gateways.
    /// Globex starts first, so that agents registered on it (`before`)
    /// are there when acme's link comes up.
    async fn start(terms: Terms) -> Pair {
        Pair::start_with(terms, "").await
    }

    /// `start`, with more lines of `[tenants.federation]` on both sides.
    async fn start_with(terms: Terms, limits: &str) -> Pair {
        let (acme_door, globex_door) = (Door::new(), Door::new());
        let acme_config = system_config("acme", &acme_door.url(), limits, &[("globex", globex_door.url(), terms.acme_shows, terms.acme_imports)]);
        let globex_config = system_config("globex", &globex_door.url(), limits, &[("acme", acme_door.url(), terms.globex_shows, terms.globex_imports)]);
        let globex = Gateway::start_with(65536, &globex_config);
        globex_door.point_at(&globex);
        let acme = Gateway::start_with(65536, &acme_config);
        acme_door.point_at(&acme);
        Pair { acme, globex, acme_door, globex_door }
    }

    fn logs(&self) -> String {
        format!("--- acme log:\n{}\n--- globex log:\n{}", self.acme.log_tail(40), self.globex.log_tail(40))
    }
}

// ---------------------------------------------------------------------------
// Clients

/// A session of `participant_type` authenticated with this API key.
async fn session(gw: &Gateway, participant_type: &str, key: &str) -> Ws {
    gw.ws_connected(participant_type, Some(api_key(key))).await.0
}

/// A session with one registered agent `id` (`extra`: more register params).
async fn agent(gw: &Gateway, key: &str, id: &str, extra: Value) -> Ws {
    let mut ws = session(gw, "agent", key).await;
    let mut params = if extra.is_object() { extra } else { json!({}) };
    params["agentId"] = json!(id);
    let r = ws.call_ok("map/agents/register", params).await;
    assert_eq!(r["agent"]["id"], id, "{r}");
    ws
}

/// A session subscribed to these event types.
async fn watcher(gw: &Gateway, key: &str, types: &[&str]) -> Ws {
    let mut ws = session(gw, "client", key).await;
    let r = ws.call_ok("map/subscribe", json!({"filter": {"eventTypes": types}})).await;
    assert!(r["subscriptionId"].is_string(), "{r}");
    ws
}

/// The next `map/event` of this type whose data has these fields.
async fn event(ws: &mut Ws, kind: &str, data: Value, within: Duration) -> Option<Value> {
    let wanted = data.as_object().cloned().unwrap_or_default();
    let found = ws
        .take_where(within, |n| {
            let e = &n["params"]["event"];
            n["method"] == "map/event" && e["type"] == kind && wanted.iter().all(|(k, v)| &e["data"][k] == v)
        })
        .await;
    found.map(|n| n["params"]["event"].clone())
}

/// The next `map/message` this session receives: the message.
async fn message(ws: &mut Ws, within: Duration) -> Option<Value> {
    ws.notification("map/message", within).await.map(|n| n["params"]["message"].clone())
}

/// `map/agents/list`'s agents, by id.
async fn listed(ws: &mut Ws) -> Vec<Value> {
    ws.call_ok("map/agents/list", json!({})).await["agents"].as_array().cloned().unwrap_or_default()
}

fn ids(agents: &[Value]) -> Vec<String> {
    agents.iter().filter_map(|a| a["id"].as_str().map(String::from)).collect()
}

/// List until `id` is there (the mirror of a peer's agents is read at
/// link-up, on its agents' events, and every 5 s): that agent.
async fn wait_listed(ws: &mut Ws, id: &str, within: Duration) -> Value {
    let probe = async || {
        let agents = listed(ws).await;
        agents.iter().find(|a| a["id"] == id).cloned().ok_or_else(|| format!("{:?}", ids(&agents)))
    };
    wait::eventually(within, &format!("{id} listed"), probe).await
}

/// `map/send` with this `to` and payload: the whole response.
async fn send(ws: &mut Ws, to: Value, payload: Value) -> Value {
    ws.call_within("map/send", json!({"to": to, "payload": payload}), Duration::from_secs(8)).await
}

// ---------------------------------------------------------------------------
// Inbound: map/federation/connect and what a peer's session may do

/// One gateway, system `acme`, whose peers connect to it (no outbound
/// links): globex by API key, initech by bearer token, umbrella by the tenant's JWT, hooli by a federated JWT.
/// A second tenant has a key naming a principal `globex` too.
const INBOUND: &str = r#"
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = [{ secret = "acme-key", principal = "acme-user" }, { secret = "globex-at-acme", principal = "globex" }]
bearer_tokens = [{ secret = "initech-token", principal = "initech" }]
jwt = { secret = "acme-jwt-secret-0123456789", audience = "acme" }
[tenants.federation]
system_id = "acme"
endpoint = "ws://acme.example/map"
trusted_issuers = [{ issuer = "https://idp.hooli.example", secret = "hooli-issuer-secret-0123" }]
[[tenants.federation.peers]]
system_id = "hooli"
principal = "hooli"
[[tenants.federation.peers]]
system_id = "globex"
principal = "globex"
expose = { agents = "tagged", tags = ["partner"], scopes = ["shared"], events = ["scope_*"] }
[[tenants.federation.peers]]
system_id = "initech"
principal = "initech"
expose = { agents = "all" }
[[tenants.federation.peers]]
system_id = "umbrella"
principal = "umbrella"
[[tenants]]
id = "other"
api_keys = [{ secret = "other-key", principal = "globex" }]
"#;

const JWT_SECRET: &str = "acme-jwt-secret-0123456789";

fn jwt(sub: &str, secret: &str) -> String {
    use jsonwebtoken::{encode, EncodingKey, Header};
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({"sub": sub, "aud": "acme", "exp": now + 600});
    encode(&Header::default(), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
}

/// A challenge in this system's form (`map_chal_` and a ULID) made `age_ms` ago.
fn challenge_made(age_ms: u64) -> String {
    const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let at = now - age_ms;
    let time: String = (0..10).map(|i| CROCKFORD[((at >> (5 * (9 - i))) & 31) as usize] as char).collect();
    format!("map_chal_{time}0123456789ABCDEF")
}

fn connect_params(system: &str, auth: Option<Value>) -> Value {
    let mut p = json!({"systemId": system, "endpoint": format!("ws://{system}.example/map")});
    if let Some(a) = auth {
        p["auth"] = a;
    }
    p
}

/// The answer of a refused `map/federation/connect`: not a JSON-RPC error,
/// `connected: false` with a fresh challenge, and `error` 5002 when
/// credentials were given and refused.
fn assert_refused(resp: &Value, with_error: bool, what: &str) {
    let r = ok(resp);
    assert_eq!(r["connected"], false, "{what}: {resp}");
    assert_eq!(r["status"], "disconnected", "{resp}");
    let required = &r["authRequired"];
    assert_eq!(required["required"], true, "{resp}");
    assert!(required["challenge"].as_str().is_some_and(|c| c.starts_with("map_chal_")), "{resp}");
    let methods: Vec<&str> = required["methods"].as_array().unwrap_or_else(|| panic!("{resp}")).iter().filter_map(Value::as_str).collect();
    assert!(methods.contains(&"api-key") && methods.contains(&"bearer"), "{resp}");
    if with_error {
        assert_eq!(r["error"]["code"], 5002, "{resp}");
        assert!(r["error"]["message"].is_string(), "{resp}");
    } else {
        assert!(r.get("error").is_none(), "{resp}");
    }
}

#[tokio::test]
async fn connect_authenticates_the_peer_with_each_method_and_refuses_the_rest() {
    let gw = Gateway::start_with(65536, INBOUND);
    let mut events = watcher(&gw, "acme-key", &["federation_connected", "federation_disconnected"]).await;

    // Only gateway and system participants federate.
    let mut client = session(&gw, "client", "globex-at-acme").await;
    let r = client.call("map/federation/connect", connect_params("globex", Some(api_key("globex-at-acme")))).await;
    assert_eq!(err_code(&r), 1003, "{r}");
    let r = client.call("map/federation/route", json!({"systemId": "acme", "message": {"to": {"agent": "x"}}})).await;
    assert_eq!(err_code(&r), 1003, "{r}");

    let mut gateway = session(&gw, "gateway", "globex-at-acme").await;
    let r = gateway.call("map/federation/connect", json!({"systemId": "globex"})).await;
    assert_eq!(err_code(&r), -32602, "no endpoint: {r}");
    let r = gateway.call("map/federation/connect", json!({"endpoint": "ws://globex.example/map"})).await;
    assert_eq!(err_code(&r), -32602, "no systemId: {r}");
    let r = gateway.call("map/federation/connect", connect_params("nobody", Some(api_key("globex-at-acme")))).await;
    assert_eq!(err_code(&r), 5001, "not a peer: {r}");

    // Refused credentials: a wrong key, a key of this tenant for another
    // principal, another tenant's key naming the same principal, a JWT
    // with a wrong signature. Each answer carries a new challenge.
    for (auth, what) in [
        (api_key("no-such-key"), "wrong key"),
        (api_key("acme-key"), "this tenant's key for principal acme-user"),
        (api_key("other-key"), "tenant other's key for a principal globex"),
        (json!({"method": "bearer", "token": jwt("globex", "another-secret-0123456789")}), "JWT signed by someone else"),
    ] {
        let r = gateway.call("map/federation/connect", connect_params("globex", Some(auth))).await;
        assert_refused(&r, true, what);
    }
    // Two round trips: no credentials → a challenge; credentials with it → connected.
    let first = gateway.call("map/federation/connect", connect_params("globex", None)).await;
    assert_refused(&first, false, "no credentials");
    let challenge = ok(&first)["authRequired"]["challenge"].as_str().unwrap().to_string();
    // A challenge this system did not make, and one over 5 minutes old.
    for bad in ["map_chal_not-one-of-ours".to_string(), challenge_made(6 * 60 * 1000)] {
        let mut p = connect_params("globex", Some(json!({"method": "api-key", "credentials": "globex-at-acme"})));
        p["authContext"] = json!({"challenge": bad});
        let r = gateway.call("map/federation/connect", p).await;
        assert_refused(&r, true, &format!("challenge {bad}"));
    }
    let mut p = connect_params("globex", Some(json!({"method": "api-key", "credentials": "globex-at-acme"})));
    p["authContext"] = json!({"challenge": challenge});
    let r = gateway.call_ok("map/federation/connect", p).await;
    assert_eq!(r["connected"], true, "{r}");
    assert!(r["sessionId"].is_string(), "{r}");
    assert_eq!(r["principal"]["id"], "globex", "{r}");
    assert_eq!(r["peer"]["systemId"], "globex", "{r}");
    assert_eq!(r["peer"]["status"], "connected", "{r}");
    assert_eq!(r["systemInfo"]["name"], "acme", "{r}");
    assert_eq!(r["systemInfo"]["endpoint"], "ws://acme.example/map", "{r}");
    let e = event(&mut events, "federation_connected", json!({"systemId": "globex"}), WAIT).await.expect("federation_connected for globex");
    assert_eq!(e["data"]["direction"], "inbound", "{e}");
    assert_eq!(e["data"]["principal"], "globex", "{e}");
    assert_eq!(e["data"]["endpoint"], "ws://globex.example/map", "{e}");

    // Bearer token, in one request.
    let mut initech = gw.ws_connected("gateway", Some(json!({"method": "bearer", "token": "initech-token"}))).await.0;
    let r = initech.call_ok("map/federation/connect", connect_params("initech", Some(json!({"method": "bearer", "token": "initech-token"})))).await;
    assert_eq!(r["connected"], true, "{r}");
    assert_eq!(r["principal"]["id"], "initech", "{r}");
    // The bearer token is initech's, not globex's.
    let mut impostor = gw.ws_connected("system", Some(json!({"method": "bearer", "token": "initech-token"}))).await.0;
    let r = impostor.call("map/federation/connect", connect_params("globex", Some(json!({"method": "bearer", "credential": "initech-token"})))).await;
    assert_refused(&r, true, "initech's token for globex");

    // A JWT the tenant trusts, its subject the peer's principal.
    let token = jwt("umbrella", JWT_SECRET);
    let mut umbrella = gw.ws_connected("gateway", Some(json!({"method": "bearer", "token": token}))).await.0;
    let r = umbrella.call_ok("map/federation/connect", connect_params("umbrella", Some(json!({"method": "bearer", "token": token})))).await;
    assert_eq!(r["connected"], true, "{r}");
    assert_eq!(r["principal"]["id"], "umbrella", "{r}");
    let e = event(&mut events, "federation_connected", json!({"systemId": "umbrella"}), WAIT).await.expect("federation_connected for umbrella");
    assert_eq!(e["data"]["principal"], "umbrella", "{e}");

    // A peer's session ends: federation_disconnected.
    umbrella.close().await;
    let e = event(&mut events, "federation_disconnected", json!({"systemId": "umbrella"}), WAIT).await.expect("federation_disconnected for umbrella");
    assert_eq!(e["data"]["direction"], "inbound", "{e}");
    assert!(e["data"]["reason"].is_string(), "{e}");
}

/// A federated JWT: signed by a trusted issuer, for this system, naming the peer.
fn federated_jwt(iss: &str, aud: &str, sub: &str, hops: Option<(u64, u64)>) -> String {
    use jsonwebtoken::{encode, EncodingKey, Header};
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mut claims = json!({"iss": iss, "sub": sub, "aud": [aud], "exp": now + 600});
    if let Some((hop_count, max_hops)) = hops {
        claims["map:federation"] = json!({"originServer": "hooli", "hopCount": hop_count, "maxHops": max_hops});
    }
    encode(&Header::default(), &claims, &EncodingKey::from_secret(b"hooli-issuer-secret-0123")).unwrap()
}

#[tokio::test]
async fn a_federated_jwt_from_a_trusted_issuer_connects_within_its_hop_limit() {
    let gw = Gateway::start_with(65536, INBOUND);
    let good = federated_jwt("https://idp.hooli.example", "acme", "hooli", Some((1, 3)));
    let bearer = |t: &str| json!({"method": "bearer", "token": t});
    let (mut hooli, _) = gw.ws_connected("gateway", Some(bearer(&good))).await;
    let r = hooli.call_ok("map/federation/connect", connect_params("hooli", Some(json!({"method": "jwt", "credentials": good})))).await;
    assert_eq!(r["connected"], true, "{r}");
    assert_eq!(r["principal"]["id"], "hooli", "{r}");
    for (what, token) in [
        ("at its hop limit", federated_jwt("https://idp.hooli.example", "acme", "hooli", Some((3, 3)))),
        ("past this system's limit of 10", federated_jwt("https://idp.hooli.example", "acme", "hooli", Some((10, 50)))),
        ("for another system", federated_jwt("https://idp.hooli.example", "globex", "hooli", None)),
        ("from an issuer not trusted", federated_jwt("https://idp.evil.example", "acme", "hooli", None)),
        ("naming another peer's principal", federated_jwt("https://idp.hooli.example", "acme", "globex", None)),
    ] {
        let r = hooli.call("map/federation/connect", connect_params("hooli", Some(json!({"method": "bearer", "token": token})))).await;
        assert_refused(&r, true, what);
    }
}

#[tokio::test]
async fn a_peer_sees_and_reaches_only_what_is_exposed_to_it() {
    let gw = Gateway::start_with(65536, INBOUND);
    let mut bob = agent(&gw, "acme-key", "bob", json!({"metadata": {"tags": ["partner"]}})).await;
    let mut carol = agent(&gw, "acme-key", "carol", json!({"capabilityDescriptor": {"tags": ["partner", "billing"]}})).await;
    let mut eve = agent(&gw, "acme-key", "eve", json!({"metadata": {"tags": ["internal"]}})).await;

    let mut globex = session(&gw, "gateway", "globex-at-acme").await;
    let r = globex.call_ok("map/federation/connect", connect_params("globex", Some(api_key("globex-at-acme")))).await;
    assert_eq!(r["connected"], true, "{r}");
    let mut initech = gw.ws_connected("gateway", Some(json!({"method": "bearer", "token": "initech-token"}))).await.0;
    let r = initech.call_ok("map/federation/connect", connect_params("initech", Some(json!({"method": "bearer", "token": "initech-token"})))).await;
    assert_eq!(r["connected"], true, "{r}");

    // Tagged exposure: the tagged agents only, by metadata or capability tags.
    let mut seen = ids(&listed(&mut globex).await);
    seen.sort();
    assert_eq!(seen, ["bob", "carol"]);
    // Everything for a peer shown all agents.
    let mut seen = ids(&listed(&mut initech).await);
    seen.sort();
    assert_eq!(seen, ["bob", "carol", "eve"]);

    // Subscriptions: the exposed event types only (agents' lifecycle
    // events need agents = "all").
    let r = globex.call("map/subscribe", json!({"filter": {"eventTypes": ["scope_created"]}})).await;
    assert!(ok(&r)["subscriptionId"].is_string(), "{r}");
    for types in [json!(["message_sent"]), json!(["agent_registered"]), json!(["scope_created", "message_sent"]), json!([])] {
        let r = globex.call("map/subscribe", json!({"filter": {"eventTypes": types}})).await;
        assert_eq!(err_code(&r), 1003, "{types}: {r}");
    }
    let r = initech.call("map/subscribe", json!({"filter": {"eventTypes": ["agent_registered"]}})).await;
    assert!(ok(&r)["subscriptionId"].is_string(), "{r}");

    // A peer's principal is walled, connected as a system or not: it lists
    // the scopes shown to it, and reaches nothing beyond federating and reading.
    let mut owner = session(&gw, "client", "acme-key").await;
    for id in ["shared", "private"] {
        owner.call_ok("map/scopes/create", json!({"scopeId": id, "name": id})).await;
    }
    let scopes = globex.call_ok("map/scopes/list", json!({})).await;
    let names: Vec<&str> = scopes["scopes"].as_array().unwrap().iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(names, ["shared"], "{scopes}");
    let mut plain = session(&gw, "client", "globex-at-acme").await;
    for (method, params) in [
        ("map/agents/get", json!({"agentId": "eve"})),
        ("map/scopes/get", json!({"scopeId": "private"})),
        ("map/send", json!({"to": {"agent": "eve"}, "payload": {}})),
        ("map/agents/register", json!({"agentId": "mole"})),
        ("map/replay", json!({})),
        ("map/structure/graph", json!({})),
    ] {
        for ws in [&mut globex, &mut plain] {
            let r = ws.call(method, params.clone()).await;
            assert_eq!(err_code(&r), 1003, "{method}: {r}");
        }
    }
    let listed_plain = ids(&listed(&mut plain).await);
    assert!(!listed_plain.contains(&"eve".to_string()), "a walled session that never connected as a system lists the shown agents only: {listed_plain:?}");

    // Routes: to an exposed agent, in each form; from shows the peer's agent.
    let r = globex
        .call_ok("map/federation/route", json!({"systemId": "acme", "message": {"id": "m-1", "from": "gina", "to": {"agent": "bob"}, "payload": {"n": 1}}}))
        .await;
    assert_eq!(r["routed"], true, "{r}");
    assert_eq!(r["messageId"], "m-1", "{r}");
    let m = message(&mut bob, WAIT).await.expect("bob gets the routed message");
    assert_eq!(m["from"], "globex:agent:gina", "{m}");
    assert_eq!(m["id"], "m-1", "the routed message keeps its id: {m}");
    assert_eq!(m["payload"], json!({"n": 1}), "{m}");
    let envelope = json!({"payload": {"id": "m-2", "from": "gina", "to": "acme:agent:carol", "payload": {"n": 2}},
                          "federation": {"sourceSystem": "globex", "targetSystem": "acme", "hopCount": 0, "maxHops": 5, "path": ["globex"], "originTimestamp": 1}});
    let r = globex.call_ok("map/federation/route", json!({"systemId": "acme", "envelope": envelope})).await;
    assert_eq!(r["routed"], true, "{r}");
    let m = message(&mut carol, WAIT).await.expect("carol gets the enveloped message");
    assert_eq!(m["from"], "globex:agent:gina", "{m}");
    assert_eq!(m["payload"], json!({"n": 2}), "{m}");
    let r = globex
        .call_ok(
            "map/federation/route",
            json!({"systemId": "acme", "payload": {"id": "m-3", "from": "gina", "to": "agent:bob", "payload": {"n": 3}}, "maxHops": 3}),
        )
        .await;
    assert_eq!(r["routed"], true, "{r}");
    let m = message(&mut bob, WAIT).await.expect("bob gets the payload-form message");
    assert_eq!(m["payload"], json!({"n": 3}), "{m}");
    // The same message id again: not delivered twice.
    let r = globex
        .call_ok("map/federation/route", json!({"systemId": "acme", "message": {"id": "m-1", "from": "gina", "to": {"agent": "bob"}, "payload": {"n": 1}}}))
        .await;
    assert_eq!(r["routed"], true, "{r}");
    assert!(message(&mut bob, QUIET).await.is_none(), "a repeated message id is delivered once");
    // An id too long to keep: refused, not renamed.
    let long = "m".repeat(257);
    let r =
        globex.call("map/federation/route", json!({"systemId": "acme", "message": {"id": long, "from": "gina", "to": {"agent": "bob"}, "payload": {}}})).await;
    assert_eq!(err_code(&r), -32602, "{r}");

    // An agent not shown to globex, and one that does not exist: 5003, nothing delivered.
    for to in [json!({"agent": "eve"}), json!({"agent": "nobody"})] {
        let r = globex
            .call("map/federation/route", json!({"systemId": "acme", "message": {"id": format!("x-{}", to["agent"]), "from": "gina", "to": to, "payload": {}}}))
            .await;
        assert_eq!(err_code(&r), 5003, "{to}: {r}");
    }
    assert!(message(&mut eve, QUIET).await.is_none(), "eve is not shown to globex");
    // Initech sees eve, and reaches her.
    let r = initech
        .call_ok("map/federation/route", json!({"systemId": "acme", "message": {"id": "i-1", "from": "ian", "to": {"agent": "eve"}, "payload": {}}}))
        .await;
    assert_eq!(r["routed"], true, "{r}");
    assert_eq!(message(&mut eve, WAIT).await.expect("eve gets initech's message")["from"], "initech:agent:ian");

    // Speaking for another configured peer than the one connected as: 5003.
    let spoof = json!({"payload": {"id": "s-1", "from": "ian", "to": {"agent": "bob"}},
                       "federation": {"sourceSystem": "initech", "targetSystem": "acme", "hopCount": 0, "path": ["initech"], "originTimestamp": 1}});
    let r = globex.call("map/federation/route", json!({"systemId": "acme", "envelope": spoof})).await;
    assert_eq!(err_code(&r), 5003, "{r}");
    assert!(message(&mut bob, QUIET).await.is_none(), "a spoofed route delivers nothing");
}

#[tokio::test]
async fn only_a_session_connected_as_a_peer_routes_and_at_its_allowed_rate() {
    let gw = Gateway::start_with(65536, &INBOUND.replace("[tenants.federation]\n", "[tenants.federation]\nroutes_per_second = 3\n"));
    let mut eve = agent(&gw, "acme-key", "eve", json!({})).await;
    // The tenant's own user as a gateway, without map/federation/connect,
    // posing as globex's agent: 5002, nothing delivered.
    let mut rogue = session(&gw, "gateway", "acme-key").await;
    let forged = json!({"payload": {"id": "r-1", "from": "ceo", "to": {"agent": "eve"}, "payload": {"wire": "money"}},
                        "federation": {"sourceSystem": "globex", "targetSystem": "acme", "hopCount": 0, "path": ["globex"], "originTimestamp": 1}});
    let r = rogue.call("map/federation/route", json!({"systemId": "acme", "envelope": forged})).await;
    assert_eq!(err_code(&r), 5002, "{r}");
    let r = rogue.call("map/federation/route", json!({"systemId": "acme", "message": {"id": "r-2", "from": "ceo", "to": {"agent": "eve"}}})).await;
    assert_eq!(err_code(&r), 5002, "{r}");
    assert!(message(&mut eve, QUIET).await.is_none(), "a session that is no peer's delivers nothing");

    // Initech (shown everything) routes 3 a second; beyond: 4000 with retryAfterMs.
    let mut initech = gw.ws_connected("gateway", Some(json!({"method": "bearer", "token": "initech-token"}))).await.0;
    let r = initech.call_ok("map/federation/connect", connect_params("initech", Some(json!({"method": "bearer", "token": "initech-token"})))).await;
    assert_eq!(r["connected"], true, "{r}");
    for n in 0..3 {
        let r =
            initech.call("map/federation/route", json!({"systemId": "acme", "message": {"id": format!("i-{n}"), "from": "ian", "to": {"agent": "eve"}}})).await;
        assert_eq!(ok(&r)["routed"], true, "route {n}: {r}");
    }
    let r = initech.call("map/federation/route", json!({"systemId": "acme", "message": {"id": "i-3", "from": "ian", "to": {"agent": "eve"}}})).await;
    assert_eq!(err_code(&r), 4000, "{r}");
    let retry = err(&r)["data"]["retryAfterMs"].as_u64().unwrap_or_else(|| panic!("retryAfterMs in {r}"));
    assert!(retry > 0 && retry <= 1000, "{r}");
    for n in 0..3 {
        let m = message(&mut eve, WAIT).await.unwrap_or_else(|| panic!("allowed route {n} delivered"));
        assert_eq!(m["from"], "initech:agent:ian", "{m}");
    }
    assert!(message(&mut eve, QUIET).await.is_none(), "the refused route delivers nothing");
    // Allowed again once the wait is over (the time it names is what is tested).
    tokio::time::sleep(Duration::from_millis(retry)).await;
    let r = initech.call("map/federation/route", json!({"systemId": "acme", "message": {"id": "i-4", "from": "ian", "to": {"agent": "eve"}}})).await;
    assert_eq!(ok(&r)["routed"], true, "after retryAfterMs: {r}");
}

// ---------------------------------------------------------------------------
// Routing across three systems

/// Three systems in a line, a — b — c. Only b connects out (to both);
/// a and c take b's link in and show it everything.
struct Line {
    a: Gateway,
    b: Gateway,
    c: Gateway,
}

impl Line {
    fn start() -> Line {
        let a = Gateway::start_with(65536, &system_config("a", "ws://a.example/map", "", &[("b", String::new(), SHOW_ALL, "[]")]));
        let c = Gateway::start_with(65536, &system_config("c", "ws://c.example/map", "", &[("b", String::new(), SHOW_ALL, "[]")]));
        let b_config = system_config("b", "ws://b.example/map", "", &[("a", a.ws_url(), SHOW_ALL, "[]"), ("c", c.ws_url(), SHOW_ALL, "[]")]);
        let b = Gateway::start_with(65536, &b_config);
        Line { a, b, c }
    }
}

fn envelope(id: &str, to: &str, source: &str, target: &str, hops: u64, max_hops: u64, path: &[&str]) -> Value {
    json!({"payload": {"id": id, "from": "alice", "to": {"agent": to}, "payload": {"id": id}},
           "federation": {"sourceSystem": source, "targetSystem": target, "hopCount": hops, "maxHops": max_hops, "path": path, "originTimestamp": 1}})
}

#[tokio::test]
async fn routes_go_on_through_a_system_and_loops_and_long_routes_are_refused() {
    let line = Line::start();
    let mut carol = agent(&line.c, "c-key", "carol", json!({})).await;
    let mut anna = agent(&line.a, "a-key", "anna", json!({})).await;
    // b's links to a and c are up once b lists their agents.
    let mut b_user = session(&line.b, "client", "b-key").await;
    wait_listed(&mut b_user, "c:agent:carol", LINK).await;
    wait_listed(&mut b_user, "a:agent:anna", LINK).await;

    // A gateway session at b speaking for system a.
    let mut from_a = session(&line.b, "gateway", "a-at-b").await;
    let r = from_a.call_ok("map/federation/connect", connect_params("a", Some(api_key("a-at-b")))).await;
    assert_eq!(r["connected"], true, "{r}");

    // a → b → c: b carries it on, c delivers it.
    let r = from_a.call_within("map/federation/route", json!({"systemId": "c", "envelope": envelope("fwd-1", "carol", "a", "c", 0, 5, &["a"])}), ACROSS).await;
    assert_eq!(ok(&r)["routed"], true, "{r}; logs:\n{}\n{}", line.b.log_tail(30), line.c.log_tail(30));
    assert_eq!(ok(&r)["messageId"], "fwd-1", "{r}");
    let m = message(&mut carol, ACROSS).await.expect("carol gets the forwarded message");
    assert_eq!(m["from"], "a:agent:alice", "{m}");
    assert_eq!(m["id"], "fwd-1", "the forwarded message keeps its id: {m}");
    assert_eq!(m["payload"], json!({"id": "fwd-1"}), "{m}");

    // b on the path already: 5010 at b.
    let r = from_a.call("map/federation/route", json!({"systemId": "c", "envelope": envelope("loop-1", "carol", "a", "c", 1, 5, &["a", "b"])})).await;
    assert_eq!(err_code(&r), 5010, "{r}");
    // c on the path already: b carries it on, c refuses it, the refusal comes back.
    let r = from_a
        .call_within("map/federation/route", json!({"systemId": "c", "envelope": envelope("loop-3", "carol", "a", "c", 1, 5, &["a", "c"])}), ACROSS)
        .await;
    assert_eq!(err_code(&r), 5010, "{r}");
    // a → b → a: a routing to itself through b is a loop.
    let r = from_a.call_within("map/federation/route", json!({"systemId": "a", "envelope": envelope("loop-2", "anna", "a", "a", 0, 5, &["a"])}), ACROSS).await;
    assert_eq!(err_code(&r), 5010, "{r}");
    assert!(message(&mut anna, QUIET).await.is_none(), "a looped message is not delivered");
    // Hops: at the limit at b (5011), and one short at b but at the limit once it reaches c.
    let r = from_a.call("map/federation/route", json!({"systemId": "c", "envelope": envelope("hops-1", "carol", "a", "c", 3, 3, &["a"])})).await;
    assert_eq!(err_code(&r), 5011, "{r}");
    let r = from_a.call_within("map/federation/route", json!({"systemId": "c", "envelope": envelope("hops-2", "carol", "a", "c", 1, 2, &["a"])}), ACROSS).await;
    assert_eq!(err_code(&r), 5011, "{r}");
    // The payload form's maxHops.
    let r = from_a.call("map/federation/route", json!({"systemId": "b", "payload": {"id": "hops-3", "to": {"agent": "x"}}, "maxHops": 0})).await;
    assert_eq!(err_code(&r), 5011, "{r}");
    // A route to a system b does not know: 5001.
    let r = from_a.call("map/federation/route", json!({"systemId": "z", "envelope": envelope("z-1", "zed", "a", "z", 0, 5, &["a"])})).await;
    assert_eq!(err_code(&r), 5001, "{r}");
    // Claiming to come from c while connected as a: 5003.
    let r = from_a.call("map/federation/route", json!({"systemId": "c", "envelope": envelope("spoof-1", "carol", "c", "c", 0, 5, &["c"])})).await;
    assert_eq!(err_code(&r), 5003, "{r}");
    assert!(message(&mut carol, QUIET).await.is_none(), "refused routes deliver nothing");
}

// ---------------------------------------------------------------------------
// Two systems, each on its own gateway

#[tokio::test]
async fn agents_of_two_systems_message_each_other_by_both_address_forms() {
    let pair = Pair::start(Terms { acme_shows: SHOW_ALL, acme_imports: "[]", globex_shows: SHOW_ALL, globex_imports: "[]" }).await;
    let mut bob = agent(&pair.globex, "globex-key", "bob", json!({})).await;
    let mut alice = agent(&pair.acme, "acme-key", "alice", json!({})).await;
    // Each side's link is up once it lists the other's agent.
    wait_listed(&mut alice, "globex:agent:bob", LINK).await;
    wait_listed(&mut bob, "acme:agent:alice", LINK).await;

    for (n, to) in [(1, json!({"system": "globex", "agent": "bob"})), (2, json!("globex:agent:bob"))] {
        let r = send(&mut alice, to.clone(), json!({"n": n})).await;
        let r = ok(&r).clone();
        assert_eq!(r["delivered"], json!(["globex:agent:bob"]), "{to}: {r}; {}", pair.logs());
        assert!(r.get("queued").is_none(), "{r}");
        let m = message(&mut bob, ACROSS).await.unwrap_or_else(|| panic!("bob gets message {n}; {}", pair.logs()));
        assert_eq!(m["from"], "acme:agent:alice", "{m}");
        assert_eq!(m["payload"], json!({"n": n}), "{m}");
        // Under the id alice's send returned, so both sides can correlate.
        assert!(r["messageId"].is_string(), "{r}");
        assert_eq!(m["id"], r["messageId"], "bob's message keeps the sender's id: {m} / {r}");
    }
    // Bob answers to the address he was shown, and in the object form.
    for (n, to) in [(3, json!("acme:agent:alice")), (4, json!({"system": "acme", "agent": "alice"}))] {
        let r = send(&mut bob, to.clone(), json!({"n": n})).await;
        assert_eq!(ok(&r)["delivered"], json!(["acme:agent:alice"]), "{to}: {r}; {}", pair.logs());
        let m = message(&mut alice, ACROSS).await.unwrap_or_else(|| panic!("alice gets message {n}; {}", pair.logs()));
        assert_eq!(m["from"], "globex:agent:bob", "{m}");
        assert_eq!(m["payload"], json!({"n": n}), "{m}");
        assert_eq!(m["id"], ok(&r)["messageId"], "alice's message keeps the sender's id: {m} / {r}");
    }
    // {system, agent} naming this system is a local agent.
    let mut ann = agent(&pair.acme, "acme-key", "ann", json!({})).await;
    let r = send(&mut alice, json!({"system": "acme", "agent": "ann"}), json!({"n": 5})).await;
    assert_eq!(ok(&r)["delivered"], json!(["ann"]), "{r}");
    assert_eq!(message(&mut ann, WAIT).await.expect("ann gets a local message")["from"], "alice");
    // A system that is no peer: 5001.
    let r = send(&mut alice, json!({"system": "hooli", "agent": "gavin"}), json!({})).await;
    assert_eq!(err_code(&r), 5001, "{r}");
    let r = send(&mut alice, json!("hooli:agent:gavin"), json!({})).await;
    assert_eq!(err_code(&r), 5001, "{r}");
    // An agent the peer does not have: the peer's refusal is the send's error.
    let r = send(&mut alice, json!({"system": "globex", "agent": "nobody"}), json!({})).await;
    assert_eq!(err_code(&r), 5003, "{r}");
    // Nothing more arrived anywhere.
    assert!(message(&mut bob, QUIET).await.is_none(), "bob got each message once");
    assert!(message(&mut alice, Duration::ZERO).await.is_none(), "alice got each message once");
}

/// README's "Two organisations, step by step": each system shows the other
/// its agents tagged `partner`; alice (not tagged) writes to bob, who answers.
#[tokio::test]
async fn an_agent_not_shown_to_a_peer_is_answered_by_the_peer_it_wrote_to_for_the_reply_window() {
    const PARTNERS: &str = r#"{ agents = "tagged", tags = ["partner"] }"#;
    const WINDOW: Duration = Duration::from_secs(5);
    let terms = Terms { acme_shows: PARTNERS, acme_imports: "[]", globex_shows: PARTNERS, globex_imports: "[]" };
    let pair = Pair::start_with(terms, &format!("reply_window_secs = {}", WINDOW.as_secs())).await;
    let mut bob = agent(&pair.globex, "globex-key", "bob", json!({"metadata": {"tags": ["partner"]}})).await;
    let mut alice = agent(&pair.acme, "acme-key", "alice", json!({})).await;
    let mut carol = agent(&pair.acme, "acme-key", "carol", json!({})).await;
    let _dave = agent(&pair.acme, "acme-key", "dave", json!({"metadata": {"tags": ["partner"]}})).await;
    // Both links are up once each side lists the other's partner.
    wait_listed(&mut alice, "globex:agent:bob", LINK).await;
    wait_listed(&mut bob, "acme:agent:dave", LINK).await;

    // Before alice writes, she is not bob's to reach.
    let r = send(&mut bob, json!("acme:agent:alice"), json!({"n": 0})).await;
    assert_eq!(err_code(&r), 5003, "{r}");
    let r = send(&mut alice, json!({"system": "globex", "agent": "bob"}), json!({"n": 1})).await;
    let sent_at = tokio::time::Instant::now();
    assert_eq!(ok(&r)["delivered"], json!(["globex:agent:bob"]), "{r}; {}", pair.logs());
    let m = message(&mut bob, ACROSS).await.unwrap_or_else(|| panic!("bob gets alice's message; {}", pair.logs()));
    assert_eq!(m["from"], "acme:agent:alice", "{m}");
    // Bob answers to that address, in both forms.
    for (n, to) in [(2, m["from"].clone()), (3, json!({"system": "acme", "agent": "alice"}))] {
        let r = send(&mut bob, to.clone(), json!({"n": n})).await;
        assert_eq!(ok(&r)["delivered"], json!(["acme:agent:alice"]), "{to}: {r}; {}", pair.logs());
        let m = message(&mut alice, ACROSS).await.unwrap_or_else(|| panic!("alice gets bob's answer {n}; {}", pair.logs()));
        assert_eq!(m["from"], "globex:agent:bob", "{m}");
        assert_eq!(m["payload"], json!({"n": n}), "{m}");
    }
    // Alice is answerable, not shown: globex does not list her.
    let shown = ids(&listed(&mut bob).await);
    assert!(shown.contains(&"acme:agent:dave".to_string()) && !shown.iter().any(|id| id.contains("alice")), "{shown:?}");
    // Carol, who did not write, is still out of reach.
    let r = send(&mut bob, json!("acme:agent:carol"), json!({})).await;
    assert_eq!(err_code(&r), 5003, "{r}");
    assert!(message(&mut carol, QUIET).await.is_none(), "carol is not reachable from globex");
    assert!(sent_at.elapsed() < WINDOW, "the checks above ran within the reply window (took {:?})", sent_at.elapsed());

    // The window closes: bob's answer is refused again.
    tokio::time::sleep_until(sent_at + WINDOW + Duration::from_millis(300)).await;
    let r = send(&mut bob, json!("acme:agent:alice"), json!({"n": 4})).await;
    assert_eq!(err_code(&r), 5003, "after the reply window: {r}");
    // Alice writes again; she leaves and registers again: the grant went with her.
    let r = send(&mut alice, json!("globex:agent:bob"), json!({"n": 5})).await;
    assert_eq!(ok(&r)["delivered"], json!(["globex:agent:bob"]), "{r}");
    message(&mut bob, ACROSS).await.expect("bob gets message 5");
    let r = alice.call_ok("map/agents/unregister", json!({"agentId": "alice"})).await;
    assert!(r.is_object(), "{r}");
    alice.call_ok("map/agents/register", json!({"agentId": "alice"})).await;
    let r = send(&mut bob, json!("acme:agent:alice"), json!({"n": 6})).await;
    assert_eq!(err_code(&r), 5003, "alice registered anew has not written to globex: {r}");
    assert!(message(&mut alice, QUIET).await.is_none(), "refused answers deliver nothing");
}

#[tokio::test]
async fn a_peer_shown_tagged_agents_lists_and_reaches_those_only() {
    let globex_shows = r#"{ agents = "tagged", tags = ["partner"] }"#;
    let (acme_door, globex_door) = (Door::new(), Door::new());
    let globex = Gateway::start_with(65536, &system_config("globex", &globex_door.url(), "", &[("acme", acme_door.url(), globex_shows, "[]")]));
    globex_door.point_at(&globex);
    // On globex before acme starts, so acme's link sees them at link-up.
    let mut bob = agent(&globex, "globex-key", "bob", json!({"metadata": {"tags": ["partner"], "team": "sales"}})).await;
    let mut eve = agent(&globex, "globex-key", "eve", json!({})).await;
    let acme = Gateway::start_with(65536, &system_config("acme", &acme_door.url(), "", &[("globex", globex_door.url(), SHOW_ALL, "[]")]));
    acme_door.point_at(&acme);
    let mut alice = agent(&acme, "acme-key", "alice", json!({})).await;

    let shown = wait_listed(&mut alice, "globex:agent:bob", LINK).await;
    assert_eq!(shown["metadata"]["_federatedFrom"], "globex", "{shown}");
    assert_eq!(shown["metadata"]["_originalId"], "bob", "{shown}");
    assert_eq!(shown["metadata"]["team"], "sales", "the peer's metadata is kept: {shown}");
    let all = ids(&listed(&mut alice).await);
    assert!(!all.iter().any(|id| id.contains("eve")), "eve is not shown to acme: {all:?}");
    // Acme's own agents come first.
    assert_eq!(all.first().map(String::as_str), Some("alice"), "{all:?}");
    // A filtered list holds this system's agents only, whatever the filter.
    for filter in [
        json!({"filter": {"connected": true}}),
        json!({"filter": {"hasChildren": false}}),
        json!({"filter": {"tags": ["partner"]}}),
        json!({"tags": ["partner"]}),
    ] {
        let filtered = alice.call_ok("map/agents/list", filter.clone()).await;
        assert!(!filtered.to_string().contains("globex:agent:"), "{filter}: {filtered}");
    }

    let r = send(&mut alice, json!({"system": "globex", "agent": "eve"}), json!({"secret": true})).await;
    assert_eq!(err_code(&r), 5003, "{r}");
    let r = send(&mut alice, json!("globex:agent:eve"), json!({"secret": true})).await;
    assert_eq!(err_code(&r), 5003, "{r}");
    assert!(message(&mut eve, QUIET).await.is_none(), "eve is not reachable from acme");
    let r = send(&mut alice, json!({"system": "globex", "agent": "bob"}), json!({"hello": "bob"})).await;
    assert_eq!(ok(&r)["delivered"], json!(["globex:agent:bob"]), "{r}");
    assert_eq!(message(&mut bob, ACROSS).await.expect("bob is reachable")["from"], "acme:agent:alice");

    // Tagged later: shown within the mirror's 5 s refresh.
    let r = eve.call_ok("map/agents/update", json!({"agentId": "eve", "metadata": {"tags": ["partner"]}})).await;
    assert!(r["agent"].is_object(), "{r}");
    wait_listed(&mut alice, "globex:agent:eve", Duration::from_secs(8)).await;
}

#[tokio::test]
async fn events_a_peer_exposes_reach_subscribers_of_the_system_that_imports_them() {
    let pair = Pair::start(Terms {
        acme_shows: SHOW_ALL,
        acme_imports: r#"["scope_created"]"#,
        globex_shows: r#"{ agents = "all", events = ["scope_*"] }"#,
        globex_imports: "[]",
    })
    .await;
    let mut bob = agent(&pair.globex, "globex-key", "bob", json!({})).await;
    let mut alice = agent(&pair.acme, "acme-key", "alice", json!({})).await;
    wait_listed(&mut alice, "globex:agent:bob", LINK).await;
    let mut news = watcher(&pair.acme, "acme-key", &["scope_created", "scope_deleted"]).await;

    let r = bob.call_ok("map/scopes/create", json!({"scopeId": "deals", "name": "deals"})).await;
    assert!(r["scope"].is_object(), "{r}");
    let e =
        event(&mut news, "scope_created", json!({"system": "globex"}), ACROSS).await.unwrap_or_else(|| panic!("the imported scope_created; {}", pair.logs()));
    assert!(e["data"]["remoteEventId"].is_string(), "{e}");
    assert!(e.to_string().contains("deals"), "the peer's data is kept: {e}");
    // Exposed by globex but not imported by acme: not re-emitted.
    let r = bob.call_ok("map/scopes/delete", json!({"scopeId": "deals"})).await;
    assert!(!r.is_null(), "{r}");
    assert!(event(&mut news, "scope_deleted", json!({"system": "globex"}), QUIET).await.is_none(), "scope_deleted is not imported");
    // A scope acme makes itself is acme's event, without `system`.
    alice.call_ok("map/scopes/create", json!({"scopeId": "local", "name": "local"})).await;
    let e = event(&mut news, "scope_created", json!({}), WAIT).await.expect("acme's own scope_created");
    assert!(e["data"].get("system").is_none(), "{e}");

    // The link breaks and comes back (its session at globex resumed):
    // the next event is imported once, not once per link.
    let mut links = watcher(&pair.acme, "acme-key", &["federation_connected", "federation_disconnected"]).await;
    pair.globex_door.shut();
    event(&mut links, "federation_disconnected", json!({"systemId": "globex", "direction": "outbound"}), LINK).await.expect("acme's link to globex down");
    pair.globex_door.open();
    event(&mut links, "federation_connected", json!({"systemId": "globex", "direction": "outbound"}), LINK).await.expect("acme's link to globex back");
    bob.call_ok("map/scopes/create", json!({"scopeId": "deals-2", "name": "deals-2"})).await;
    let e = event(&mut news, "scope_created", json!({"system": "globex"}), ACROSS)
        .await
        .unwrap_or_else(|| panic!("imported after the link came back; {}", pair.logs()));
    assert!(e.to_string().contains("deals-2"), "{e}");
    assert!(event(&mut news, "scope_created", json!({"system": "globex"}), QUIET).await.is_none(), "imported once");
}

// ---------------------------------------------------------------------------
// Outages

#[tokio::test]
async fn messages_wait_while_the_peer_is_down_and_arrive_once_in_order_after_it_restarts() {
    let mut pair = Pair::start(Terms { acme_shows: SHOW_ALL, acme_imports: "[]", globex_shows: SHOW_ALL, globex_imports: "[]" }).await;
    let mut bob = agent(&pair.globex, "globex-key", "bob", json!({})).await;
    let mut alice = agent(&pair.acme, "acme-key", "alice", json!({})).await;
    wait_listed(&mut alice, "globex:agent:bob", LINK).await;
    wait_listed(&mut bob, "acme:agent:alice", LINK).await;
    let mut links = watcher(&pair.acme, "acme-key", &["federation_connected", "federation_disconnected"]).await;
    let r = send(&mut alice, json!({"system": "globex", "agent": "bob"}), json!({"n": 0})).await;
    assert_eq!(ok(&r)["delivered"], json!(["globex:agent:bob"]), "{r}");
    assert_eq!(message(&mut bob, ACROSS).await.expect("message 0")["payload"], json!({"n": 0}));

    pair.globex.kill9();
    // Both links with globex go down: acme's to it, and globex's to acme.
    let out = event(&mut links, "federation_disconnected", json!({"systemId": "globex", "direction": "outbound"}), LINK).await;
    let out = out.unwrap_or_else(|| panic!("acme's link to globex reported down; {}", pair.logs()));
    assert_eq!(out["data"]["endpoint"], pair.globex_door.url(), "{out}");
    assert!(out["data"]["reason"].is_string(), "{out}");
    event(&mut links, "federation_disconnected", json!({"systemId": "globex", "direction": "inbound"}), LINK)
        .await
        .expect("globex's session at acme reported gone");
    // Its agents are no longer listed.
    assert!(!ids(&listed(&mut alice).await).contains(&"globex:agent:bob".to_string()), "a peer that is down shows no agents");

    let mut held = Vec::new();
    for n in 1..=3 {
        let r = send(&mut alice, json!({"system": "globex", "agent": "bob"}), json!({"n": n})).await;
        let r = ok(&r);
        assert_eq!(r["queued"], true, "message {n} waits: {r}");
        assert_eq!(r["delivered"], json!([]), "{r}");
        held.push(r["messageId"].clone());
    }
    // Globex is back, and the links with it, before bob registers again:
    // the held messages wait for him (refused meanwhile, tried again).
    pair.globex = pair.globex.restart();
    pair.globex_door.point_at(&pair.globex);
    for direction in ["outbound", "inbound"] {
        let e = event(&mut links, "federation_connected", json!({"systemId": "globex", "direction": direction}), LINK).await;
        e.unwrap_or_else(|| panic!("{direction} link with globex back; {}", pair.logs()));
    }
    let mut bob = agent(&pair.globex, "globex-key", "bob", json!({})).await;
    for n in 1..=3 {
        let m = message(&mut bob, ACROSS).await.unwrap_or_else(|| panic!("held message {n}; {}", pair.logs()));
        assert_eq!(m["payload"], json!({"n": n}), "in order: {m}");
        assert_eq!(m["from"], "acme:agent:alice", "{m}");
        assert_eq!(m["id"], held[n - 1], "a held message keeps the id its send returned: {m}");
    }
    assert!(message(&mut bob, QUIET).await.is_none(), "each held message is delivered once");
    // And the link carries new messages at once again.
    let r = send(&mut alice, json!("globex:agent:bob"), json!({"n": 4})).await;
    assert_eq!(ok(&r)["delivered"], json!(["globex:agent:bob"]), "{r}");
    assert_eq!(message(&mut bob, ACROSS).await.expect("message 4")["payload"], json!({"n": 4}));
}

#[tokio::test]
async fn a_held_message_whose_agent_is_not_back_holds_back_only_that_agents_messages() {
    let mut pair = Pair::start(Terms { acme_shows: SHOW_ALL, acme_imports: "[]", globex_shows: SHOW_ALL, globex_imports: "[]" }).await;
    let _bob = agent(&pair.globex, "globex-key", "bob", json!({})).await;
    let mut alice = agent(&pair.acme, "acme-key", "alice", json!({})).await;
    wait_listed(&mut alice, "globex:agent:bob", LINK).await;
    let mut links = watcher(&pair.acme, "acme-key", &["federation_connected", "federation_disconnected"]).await;
    let mut failures = watcher(&pair.acme, "acme-key", &["federation_message_failed"]).await;
    pair.globex.kill9();
    event(&mut links, "federation_disconnected", json!({"systemId": "globex", "direction": "outbound"}), LINK).await.expect("acme's link to globex down");

    // Held while globex is down: xavier (back later), yuri (never back)
    // and bob, interleaved; xavier's and yuri's come first.
    let mut held = Vec::new();
    for (who, n) in [("xavier", 1), ("yuri", 1), ("bob", 1), ("xavier", 2), ("yuri", 2), ("bob", 2)] {
        let r = send(&mut alice, json!({"system": "globex", "agent": who}), json!({"to": who, "n": n})).await;
        assert_eq!(ok(&r)["queued"], true, "{who} {n} waits: {r}");
        held.push((who, ok(&r)["messageId"].as_str().unwrap().to_string()));
    }
    // Globex comes back with bob only: his messages arrive at once, in
    // order, not after the others' 30 s of retries.
    pair.globex = pair.globex.restart();
    pair.globex_door.point_at(&pair.globex);
    event(&mut links, "federation_connected", json!({"systemId": "globex", "direction": "outbound"}), LINK)
        .await
        .unwrap_or_else(|| panic!("link back; {}", pair.logs()));
    let mut bob = agent(&pair.globex, "globex-key", "bob", json!({})).await;
    let back = tokio::time::Instant::now();
    for n in 1..=2 {
        let m = message(&mut bob, ACROSS).await.unwrap_or_else(|| panic!("bob's held message {n} within {ACROSS:?}; {}", pair.logs()));
        assert_eq!(m["payload"], json!({"to": "bob", "n": n}), "in order: {m}");
    }
    assert!(back.elapsed() < ACROSS, "bob's messages took {:?}", back.elapsed());
    // Xavier registers a few seconds later, within the retries: his come, in order.
    let mut xavier = agent(&pair.globex, "globex-key", "xavier", json!({})).await;
    for n in 1..=2 {
        let m = message(&mut xavier, ACROSS).await.unwrap_or_else(|| panic!("xavier's held message {n}; {}", pair.logs()));
        assert_eq!(m["payload"], json!({"to": "xavier", "n": n}), "in order: {m}");
    }
    // Yuri never comes: 30 s after his first refusal both of his are
    // dropped and reported, in order.
    for id in held.iter().filter(|(who, _)| *who == "yuri").map(|(_, id)| id) {
        let e = event(&mut failures, "federation_message_failed", json!({}), Duration::from_secs(40)).await;
        let e = e.unwrap_or_else(|| panic!("yuri's message {id} reported; {}", pair.logs()));
        assert_eq!(e["data"]["messageId"], id.as_str(), "{e}");
        assert_eq!(e["data"]["to"], json!({"agent": "yuri"}), "{e}");
        assert_eq!(e["data"]["code"], 5003, "{e}");
    }
    assert!(back.elapsed() < Duration::from_secs(40), "yuri's messages were given up on after {:?}", back.elapsed());
    assert!(message(&mut bob, QUIET).await.is_none() && message(&mut xavier, Duration::ZERO).await.is_none(), "each delivered once");
}

#[tokio::test]
async fn held_messages_survive_a_kill_of_the_sender_too() {
    let mut pair = Pair::start(Terms { acme_shows: SHOW_ALL, acme_imports: "[]", globex_shows: SHOW_ALL, globex_imports: "[]" }).await;
    let mut alice = agent(&pair.acme, "acme-key", "alice", json!({})).await;
    pair.globex_door.shut();
    pair.globex.kill9();
    for n in 1..=3 {
        let r = send(&mut alice, json!("globex:agent:bob"), json!({"n": n})).await;
        assert_eq!(ok(&r)["queued"], true, "message {n} waits: {r}");
    }
    // The sender dies with the messages in its queue; the peer comes back
    // with bob; the sender comes back, and its link carries them.
    pair.acme.kill9();
    pair.globex = pair.globex.restart();
    pair.globex_door.point_at(&pair.globex);
    pair.globex_door.open();
    let mut bob = agent(&pair.globex, "globex-key", "bob", json!({})).await;
    pair.acme = pair.acme.restart();
    pair.acme_door.point_at(&pair.acme);
    for n in 1..=3 {
        let m = message(&mut bob, LINK).await.unwrap_or_else(|| panic!("held message {n} after the sender's restart; {}", pair.logs()));
        assert_eq!(m["payload"], json!({"n": n}), "in order: {m}");
        assert_eq!(m["from"], "acme:agent:alice", "{m}");
    }
    assert!(message(&mut bob, QUIET).await.is_none(), "each held message is delivered once");
}

#[tokio::test]
async fn the_queue_for_an_unreachable_peer_is_bounded_and_old_messages_expire() {
    let (acme_door, globex_door) = (Door::new(), Door::new());
    // Globex runs with bob, but its door stays shut: acme cannot reach it.
    globex_door.shut();
    let globex = Gateway::start_with(65536, &system_config("globex", &globex_door.url(), "", &[("acme", acme_door.url(), SHOW_ALL, "[]")]));
    globex_door.point_at(&globex);
    let mut bob = agent(&globex, "globex-key", "bob", json!({})).await;
    let limits = "buffer_messages = 2\nbuffer_ttl_secs = 1";
    let acme = Gateway::start_with(65536, &system_config("acme", &acme_door.url(), limits, &[("globex", globex_door.url(), SHOW_ALL, "[]")]));
    acme_door.point_at(&acme);
    let mut alice = agent(&acme, "acme-key", "alice", json!({})).await;
    let mut expiries = watcher(&acme, "acme-key", &["federation_message_expired"]).await;

    let mut held = Vec::new();
    for n in 1..=2 {
        let r = send(&mut alice, json!({"system": "globex", "agent": "bob"}), json!({"n": n})).await;
        assert_eq!(ok(&r)["queued"], true, "message {n}: {r}");
        held.push(ok(&r)["messageId"].as_str().unwrap().to_string());
    }
    let r = send(&mut alice, json!({"system": "globex", "agent": "bob"}), json!({"n": 3})).await;
    assert_eq!(err_code(&r), 5000, "the queue holds 2: {r}");
    // Past the queue's 1 s time to live (only time passing makes a message
    // too old), then the link may come up: the held messages expire there.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    globex_door.open();
    for id in &held {
        let e = event(&mut expiries, "federation_message_expired", json!({"messageId": id}), LINK).await;
        let e = e.unwrap_or_else(|| panic!("{id} expired; acme log:\n{}", acme.log_tail(30)));
        assert_eq!(e["data"]["systemId"], "globex", "{e}");
        assert_eq!(e["data"]["to"], json!({"agent": "bob"}), "{e}");
        assert!(e["data"]["queuedAt"].is_u64(), "{e}");
    }
    assert!(message(&mut bob, QUIET).await.is_none(), "expired messages are not delivered");
    // The queue has room again, and the link carries new messages.
    let r = send(&mut alice, json!({"system": "globex", "agent": "bob"}), json!({"n": 4})).await;
    assert_eq!(ok(&r)["delivered"], json!(["globex:agent:bob"]), "{r}");
    assert_eq!(message(&mut bob, ACROSS).await.expect("message 4")["payload"], json!({"n": 4}));
}

// ---------------------------------------------------------------------------
// Links over TLS

/// A certificate authority made for the test, as a PEM file in `dir`.
fn authority(dir: &Path, name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), ca.pem()).unwrap();
    ca
}

/// A server certificate for 127.0.0.1 signed by `ca`: `[tls]` lines naming its files in `dir`.
fn served_by(dir: &Path, ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap().signed_by(&key, &**ca).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    format!("[tls]\ncert_file = {:?}\nkey_file = {:?}\n", dir.join("cert.pem"), dir.join("key.pem"))
}

/// A plain port in front of a gateway that serves TLS only, for the test's
/// own clients (who trust `ca`): its `ws://` URL.
async fn plain_front(gw: &Gateway, ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>) -> String {
    use tokio_rustls::rustls::{pki_types::ServerName, ClientConfig, RootCertStore};
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config =
        ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions().unwrap().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (front, upstream) = (listener.local_addr().unwrap().port(), gw.addr());
    tokio::spawn(async move {
        while let Ok((mut down, _)) = listener.accept().await {
            let (connector, upstream) = (connector.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(tcp) = tokio::net::TcpStream::connect(&upstream).await else { return };
                let Ok(mut up) = connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
            });
        }
    });
    format!("ws://127.0.0.1:{front}/map")
}

#[tokio::test]
async fn a_link_to_a_wss_peer_checks_its_certificate_against_the_peers_ca_file() {
    let dir = TempDir::new("fed-tls");
    let ca = authority(dir.path(), "globex-ca");
    let _other = authority(dir.path(), "other-ca");
    // Globex serves TLS only; acme links to it, globex does not link back.
    let globex = Gateway::start_with(
        65536,
        &format!("{}{}", served_by(dir.path(), &ca), system_config("globex", "wss://globex.example/map", "", &[("acme", String::new(), SHOW_ALL, "[]")])),
    );
    let front = plain_front(&globex, &ca).await;
    let mut bob = Ws::connect(&front).await;
    let r = bob.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent", "auth": api_key("globex-key")})).await;
    assert!(r["sessionId"].is_string(), "{r}");
    bob.call_ok("map/agents/register", json!({"agentId": "bob"})).await;

    // Acme links to globex three times over: with globex's CA file, with
    // another CA's, and with the system's roots (which do not hold it).
    let wss = format!("wss://127.0.0.1:{}/map", globex.port);
    let mut acme_config = system_config("acme", "ws://acme.example/map", "", &[("globex", wss.clone(), SHOW_ALL, "[]")]);
    acme_config =
        acme_config.replacen(&format!("endpoint = \"{wss}\"\n"), &format!("endpoint = \"{wss}\"\nca_file = {:?}\n", dir.path().join("globex-ca.pem")), 1);
    for (peer, ca_line) in [("initech", format!("ca_file = {:?}\n", dir.path().join("other-ca.pem"))), ("umbrella", String::new())] {
        acme_config.push_str(&format!("[[tenants.federation.peers]]\nsystem_id = \"{peer}\"\nendpoint = \"{wss}\"\n{ca_line}principal = \"{peer}\"\n"));
    }
    let acme = Gateway::start_with(65536, &acme_config);
    let mut alice = agent(&acme, "acme-key", "alice", json!({})).await;
    let shown = wait_listed(&mut alice, "globex:agent:bob", LINK).await;
    assert_eq!(shown["metadata"]["_federatedFrom"], "globex", "{shown}");
    let r = send(&mut alice, json!({"system": "globex", "agent": "bob"}), json!({"over": "tls"})).await;
    assert_eq!(ok(&r)["delivered"], json!(["globex:agent:bob"]), "{r}; acme log:\n{}", acme.log_tail(30));
    let m = message(&mut bob, ACROSS).await.expect("bob gets alice's message over the TLS link");
    assert_eq!(m["payload"], json!({"over": "tls"}), "{m}");

    // The links whose certificate check fails say so, and carry nothing.
    for peer in ["initech", "umbrella"] {
        let line = acme.log_line(LINK, &format!("a link failure logged for {peer}"), |l| l.contains("federation link down") && l.contains(peer)).await;
        assert!(line.contains("TLS handshake") && line.contains("invalid peer certificate"), "the reason names the certificate check: {line}");
        let r = send(&mut alice, json!({"system": peer, "agent": "bob"}), json!({"over": peer})).await;
        assert_eq!(ok(&r)["queued"], true, "nothing goes to {peer}: {r}");
    }
    assert!(message(&mut bob, QUIET).await.is_none(), "only the verified link carries messages");

    // A CA file is for wss:// peers.
    let plain = system_config("acme", "ws://acme.example/map", "", &[("globex", "ws://127.0.0.1:1/map".into(), SHOW_ALL, "[]")]).replacen(
        "principal = \"globex\"\n",
        &format!("principal = \"globex\"\nca_file = {:?}\n", dir.path().join("globex-ca.pem")),
        1,
    );
    let config = dir.path().join("plain.toml");
    std::fs::write(&config, plain).unwrap();
    let out = std::process::Command::new(BIN).args(["check", "--config"]).arg(&config).output().unwrap();
    assert!(!out.status.success(), "a ca_file on a ws:// peer is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ca_file"), "{}", String::from_utf8_lossy(&out.stderr));
}
