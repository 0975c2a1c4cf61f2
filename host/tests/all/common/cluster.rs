//! Helpers for the cluster tests: a fresh PostgreSQL database per test, the
//! NATS (JetStream) server, gateway nodes started with a `[cluster]` section,
//! and a JSON-RPC client that knows which node it talks to (failures name the
//! node and show the tail of its log).
//!
//! Engines: PostgreSQL at `MAP_TEST_POSTGRES_URL` (default
//! `postgres://root@127.0.0.1:5432/test`, trust auth; databases are created
//! next to it) and NATS with JetStream at `MAP_TEST_NATS_URL` (default
//! `nats://127.0.0.1:4222`). Either missing fails the test: nothing is skipped.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sqlx::Connection;

use super::*;

/// How long a write on one node may take to show on another (polls stop then).
pub const REPLICATION: Duration = Duration::from_secs(10);
/// How long one call may take to be answered.
pub const ANSWER: Duration = Duration::from_secs(10);
/// How often a condition on another node is polled.
pub const POLL: Duration = Duration::from_millis(50);
/// Log lines shown with a failure.
const LOG_LINES: usize = 40;

pub fn postgres_url() -> String {
    std::env::var("MAP_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into())
}

pub fn nats_url() -> String {
    std::env::var("MAP_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// `<prefix><sep><pid><sep><counter><sep><unix ms>`: unique per test, per run.
pub fn unique_name(prefix: &str, sep: char) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("{prefix}{sep}{}{sep}{}{sep}{ms}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// The standard plugins (mail, trajectory, …) as `scripts/build-plugins.sh` leaves them.
pub fn standard_plugins() -> PathBuf {
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    assert!(
        dist.join("mail.wasm").exists() && dist.join("trajectory.wasm").exists(),
        "{} lacks mail.wasm or trajectory.wasm: run scripts/build-plugins.sh",
        dist.display()
    );
    dist
}

// ---------------------------------------------------------------------------
// PostgreSQL

/// `url` with its database replaced by `db` (query string kept).
pub fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or_else(|| panic!("not a URL: {url}"));
    let (authority, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let query = tail.find('?').map_or("", |i| &tail[i..]);
    format!("{scheme}://{authority}/{db}{query}")
}

async fn pg_connect(url: &str) -> sqlx::PgConnection {
    match tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(url)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("PostgreSQL is not reachable at {url} ({e}); the cluster tests need it (set MAP_TEST_POSTGRES_URL to another server)"),
        Err(_) => panic!("PostgreSQL at {url} did not answer within 5 s; the cluster tests need it (set MAP_TEST_POSTGRES_URL to another server)"),
    }
}

/// A database of its own for one test, created next to the one
/// `MAP_TEST_POSTGRES_URL` names and dropped (with its connections) on drop.
pub struct PgDatabase {
    pub url: String,
    pub name: String,
    admin_url: String,
}

impl PgDatabase {
    pub async fn create() -> PgDatabase {
        let admin_url = postgres_url();
        let mut conn = pg_connect(&admin_url).await;
        let name = unique_name("maptest", '_');
        let sql = format!("CREATE DATABASE \"{name}\"");
        sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql} on {admin_url}: {e}"));
        let _ = conn.close().await;
        PgDatabase { url: with_database(&admin_url, &name), name, admin_url }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin_url.clone(), self.name.clone());
        // Its own thread and runtime: drop may run inside the test's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async move {
                let mut c = tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(&admin)).await.ok()?.ok()?;
                let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                sqlx::raw_sql(&sql).execute(&mut c).await.ok()
            })
        })
        .join();
    }
}

// ---------------------------------------------------------------------------
// NATS: just enough of the text protocol to check the server and clean up

struct NatsConn {
    reader: BufReader<std::net::TcpStream>,
    writer: std::net::TcpStream,
    info: Value,
    inbox: String,
}

impl NatsConn {
    fn open(url: &str) -> Result<NatsConn, String> {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let rest = rest.split('/').next().unwrap_or(rest);
        let (auth, hostport) = match rest.rsplit_once('@') {
            Some((a, h)) => (Some(a), h),
            None => (None, rest),
        };
        let hostport = if hostport.contains(':') { hostport.to_string() } else { format!("{hostport}:4222") };
        let addr =
            std::net::ToSocketAddrs::to_socket_addrs(&hostport).map_err(|e| format!("{hostport}: {e}"))?.next().ok_or(format!("{hostport}: no address"))?;
        let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(3))).map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| format!("no INFO line: {e}"))?;
        let info: Value =
            line.strip_prefix("INFO ").and_then(|j| serde_json::from_str(j.trim()).ok()).ok_or(format!("not a NATS server (first line {line:?})"))?;
        let mut connect = json!({"verbose": false, "pedantic": false, "name": "map-gateway-tests"});
        if let Some(a) = auth {
            match a.split_once(':') {
                Some((u, p)) => {
                    connect["user"] = json!(u);
                    connect["pass"] = json!(p);
                }
                None => connect["auth_token"] = json!(a),
            }
        }
        let inbox = format!("_INBOX.{}", unique_name("maptests", '_'));
        let mut c = NatsConn { reader, writer, info, inbox };
        c.write(&format!("CONNECT {connect}\r\nSUB {} 1\r\n", c.inbox))?;
        Ok(c)
    }

    fn write(&mut self, text: &str) -> Result<(), String> {
        self.writer.write_all(text.as_bytes()).map_err(|e| e.to_string())
    }

    /// A request on `subject`: the JSON of its reply.
    fn request(&mut self, subject: &str, payload: &str) -> Result<Value, String> {
        let text = format!("PUB {subject} {} {}\r\n{payload}\r\n", self.inbox, payload.len());
        self.write(&text)?;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).map_err(|e| e.to_string())?;
            let line = line.trim_end();
            if line == "PING" {
                self.write("PONG\r\n")?;
            } else if line.starts_with("-ERR") {
                return Err(line.to_string());
            } else if let Some(rest) = line.strip_prefix("MSG ") {
                let len: usize = rest.split(' ').next_back().and_then(|n| n.parse().ok()).ok_or(format!("bad MSG line {line:?}"))?;
                let mut body = vec![0u8; len + 2];
                self.reader.read_exact(&mut body).map_err(|e| e.to_string())?;
                return serde_json::from_slice(&body[..len]).map_err(|e| format!("reply is not JSON: {e}"));
            }
        }
    }
}

/// Panic, saying so, unless a NATS server with JetStream answers at `url`.
pub fn require_nats(url: &str) {
    let conn = NatsConn::open(url).unwrap_or_else(|e| {
        panic!("NATS is not reachable at {url} ({e}); the cluster tests need a NATS server with JetStream (set MAP_TEST_NATS_URL to another one)")
    });
    assert_eq!(conn.info["jetstream"], true, "the NATS server at {url} runs without JetStream (start it with -js): INFO {}", conn.info);
}

/// Best effort: delete every JetStream stream (KV buckets and object stores
/// are streams too) whose name contains the cluster's name, so test runs do
/// not pile up on the shared server.
pub fn delete_nats_streams(url: &str, cluster_name: &str) {
    let normal = |s: &str| s.to_ascii_lowercase().replace(['-', '.'], "_");
    let needle = normal(cluster_name);
    let Ok(mut conn) = NatsConn::open(url) else { return };
    let mut doomed = Vec::new();
    let mut offset = 0;
    while let Ok(page) = conn.request("$JS.API.STREAM.NAMES", &json!({"offset": offset}).to_string()) {
        let names: Vec<String> = page["streams"].as_array().map(|a| a.iter().filter_map(|n| n.as_str().map(String::from)).collect()).unwrap_or_default();
        offset += names.len();
        doomed.extend(names.into_iter().filter(|n| normal(n).contains(&needle)));
        if names_done(&page, offset) {
            break;
        }
    }
    for name in doomed {
        let _ = conn.request(&format!("$JS.API.STREAM.DELETE.{name}"), "");
    }
}

fn names_done(page: &Value, seen: usize) -> bool {
    let total = page["total"].as_u64().unwrap_or(0) as usize;
    page["streams"].as_array().is_none_or(|a| a.is_empty()) || seen >= total
}

// ---------------------------------------------------------------------------
// Nodes and clusters

/// Settings every node of a cluster shares.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub resume_window_secs: u64,
    pub presence_timeout_ms: u64,
    /// More TOML appended to every node's config (sections after `[cluster]`).
    pub extra: String,
    /// More `[server]` lines for every node (a `cache_dir` line replaces the tests' shared cache).
    pub server: String,
    /// Nodes that reach NATS at another URL (a `Relay`'s), by name.
    pub nats_for: Vec<(String, String)>,
    /// Files copied into every node's folder before it starts (name there, source).
    pub files: Vec<(String, PathBuf)>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            resume_window_secs: 300,
            presence_timeout_ms: 2000,
            extra: String::new(),
            server: String::new(),
            nats_for: Vec::new(),
            files: Vec::new(),
        }
    }
}

/// One gateway process of a cluster.
pub struct Node {
    pub name: String,
    pub gw: Gateway,
}

impl Node {
    /// A WebSocket that has done `map/connect` as `participant_type` (anonymous).
    pub async fn connect(&self, participant_type: &str) -> Client {
        self.connect_with(json!({"protocolVersion": 1, "participantType": participant_type})).await
    }

    /// A WebSocket that has done `map/connect` with these params.
    pub async fn connect_with(&self, params: Value) -> Client {
        let ws = self.gw.ws().await;
        let mut client = Client { node: self.name.clone(), ws, hello: Value::Null, agent: None, log: self.gw.dir.path().join("gateway.log") };
        client.hello = client.ok("map/connect", params).await;
        client
    }

    /// `map/connect` with a resume token; the result is in `hello` (not checked here).
    pub async fn resume(&self, participant_type: &str, token: &str) -> Client {
        self.connect_with(json!({"protocolVersion": 1, "participantType": participant_type, "resumeToken": token})).await
    }

    /// An agent session: `map/connect` as `agent`, then `map/agents/register`
    /// with `agentId: id` and the fields of `extra` (role, parent, …).
    pub async fn agent(&self, id: &str, extra: Value) -> Client {
        let mut c = self.connect("agent").await;
        c.register(id, extra).await;
        c
    }

    pub fn log_tail(&self) -> String {
        self.gw.log_tail(LOG_LINES)
    }

    /// `GET /readyz`: the status and the body.
    pub async fn readyz(&self) -> (u16, Value) {
        let r = http(&self.gw.addr(), "GET", "/readyz", &[], b"").await;
        (r.status, r.json())
    }

    /// Poll `/readyz` until it answers `status` (at most `REPLICATION`): the body.
    pub async fn wait_ready(&self, status: u16, what: &str) -> Value {
        let probe = async || match self.readyz().await {
            (got, body) if got == status => Ok(body),
            (got, body) => Err(format!("{got} {body}")),
        };
        match wait::until(REPLICATION, probe).await {
            Ok(body) => body,
            Err(last) => panic!("node {}: {what}: /readyz still answers {last} after {REPLICATION:?}\n{}", self.name, self.log_tail()),
        }
    }
}

// ---------------------------------------------------------------------------
// A relay between nodes and NATS that a test can cut

/// A TCP relay to the NATS server: nodes given its `url` reach NATS through
/// it. `cut` drops every connection through it and refuses new ones (they
/// are accepted and closed at once) until `restore`.
pub struct Relay {
    pub url: String,
    cut: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    pub async fn start(upstream_url: &str) -> Relay {
        let rest = upstream_url.split_once("://").map_or(upstream_url, |(_, r)| r);
        let (auth, hostport) = match rest.rsplit_once('@') {
            Some((a, h)) => (format!("{a}@"), h.to_string()),
            None => (String::new(), rest.to_string()),
        };
        let upstream = if hostport.contains(':') { hostport } else { format!("{hostport}:4222") };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("relay listener");
        let port = listener.local_addr().expect("relay address").port();
        let (cut, watch) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                if *watch.borrow() {
                    continue; // refused: dropped at once
                }
                let mut watch = watch.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut up) = TcpStream::connect(&upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = watch.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Relay { url: format!("nats://{auth}127.0.0.1:{port}"), cut, task }
    }

    /// Drop every connection through the relay and refuse new ones.
    pub fn cut(&self) {
        let _ = self.cut.send(true);
    }

    /// Relay new connections again.
    pub fn restore(&self) {
        let _ = self.cut.send(false);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.cut.send(true);
        self.task.abort();
    }
}

/// Gateway nodes sharing one fresh PostgreSQL database and one cluster name
/// on the NATS server. On drop the processes are killed, the cluster's NATS
/// streams deleted and the database dropped; after a failure each node's
/// log tail is printed first.
pub struct Cluster {
    /// Dropped first: the processes end before their streams and database go.
    pub nodes: Vec<Node>,
    pub name: String,
    pub nats: String,
    pub options: ClusterOptions,
    pub db: PgDatabase,
}

impl Cluster {
    /// Start one node per name (the first alone, so the schema and the
    /// streams are made once, then the others together), each with its own
    /// data dir and this config:
    ///
    /// ```toml
    /// [server]
    /// data_dir = "<dir>/data"
    /// plugin_dir = "<repo>/plugins/dist"
    /// max_message_bytes = 1048576
    /// resume_window_secs = <options>
    /// [storage]
    /// url = "postgres://…/<fresh db>"
    /// [cluster]
    /// nats = "nats://127.0.0.1:4222"
    /// node = "<name>"
    /// name = "maptest-<pid>-<n>-<ms>"
    /// presence_timeout_ms = <options>
    /// ```
    pub async fn start(names: &[&str], options: ClusterOptions) -> Cluster {
        let nats = nats_url();
        require_nats(&nats);
        let db = PgDatabase::create().await;
        let name = unique_name("maptest", '-');
        let plugins = standard_plugins();
        let config = |node: &str| -> (TempDir, PathBuf) {
            let dir = TempDir::new(&format!("node-{node}"));
            for (name, from) in &options.files {
                std::fs::copy(from, dir.path().join(name)).expect("copy a node's file");
            }
            let nats = options.nats_for.iter().find(|(n, _)| n == node).map_or(&nats, |(_, url)| url);
            let server =
                format!("plugin_dir = {plugins:?}\nmax_message_bytes = 1048576\nresume_window_secs = {}\n{}", options.resume_window_secs, options.server);
            let extra = format!(
                "[storage]\nurl = {url:?}\n[cluster]\nnats = {nats:?}\nnode = {node:?}\nname = {name:?}\npresence_timeout_ms = {}\n{}",
                options.presence_timeout_ms,
                options.extra,
                url = db.url,
            );
            let path = write_config_server(dir.path(), &server, &extra);
            (dir, path)
        };
        let launch = |node: &str| {
            let (dir, path) = config(node);
            Node { name: node.to_string(), gw: Gateway::launch(dir, path) }
        };
        let mut nodes = Vec::new();
        if let Some((first, rest)) = names.split_first() {
            nodes.push(launch(first));
            let started: Vec<Node> = std::thread::scope(|s| {
                let handles: Vec<_> = rest.iter().map(|n| s.spawn(|| launch(n))).collect();
                handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
            });
            nodes.extend(started);
        }
        Cluster { nodes, name, nats, options, db }
    }

    pub fn node(&self, name: &str) -> &Node {
        self.nodes.iter().find(|n| n.name == name).unwrap_or_else(|| panic!("no node {name} in this cluster"))
    }

    pub fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes.iter_mut().find(|n| n.name == name).unwrap_or_else(|| panic!("no node {name} in this cluster"))
    }

    /// kill -9 one node (no shutdown, no goodbye to the cluster).
    pub fn kill9(&mut self, name: &str) {
        let node = self.node_mut(name);
        node.gw.kill9();
        assert!(!node.gw.running(), "node {name} still runs after kill -9");
    }

    /// Start a node again on its config and data directory (after `kill9`).
    pub fn restart(&mut self, name: &str) {
        let i = self.nodes.iter().position(|n| n.name == name).unwrap_or_else(|| panic!("no node {name} in this cluster"));
        let node = self.nodes.remove(i);
        self.nodes.insert(i, Node { name: node.name, gw: node.gw.restart() });
    }

    /// Every node's log tail, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes.iter().map(|n| format!("--- log of node {} ---\n{}\n", n.name, n.log_tail())).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("cluster {} (database {}), failed test:\n{}", self.name, self.db.name, self.logs());
        }
        for n in &mut self.nodes {
            n.gw.kill9();
        }
        delete_nats_streams(&self.nats, &self.name);
    }
}

// ---------------------------------------------------------------------------
// A JSON-RPC client bound to one node

/// One WebSocket session on a node. Calls wait up to `ANSWER`; failures
/// name the node and show its log tail. Notifications met while waiting
/// for answers are kept for `note` / `events`.
pub struct Client {
    /// The node this socket is connected to.
    pub node: String,
    pub ws: Ws,
    /// The `map/connect` result.
    pub hello: Value,
    /// The agent this session registered first (by `register`).
    pub agent: Option<String>,
    log: PathBuf,
}

impl Client {
    pub fn session_id(&self) -> String {
        self.hello["sessionId"].as_str().unwrap_or_else(|| panic!("node {}: map/connect without sessionId: {}", self.node, self.hello)).to_string()
    }

    pub fn participant_id(&self) -> String {
        self.hello["participantId"].as_str().unwrap_or_else(|| panic!("node {}: map/connect without participantId: {}", self.node, self.hello)).to_string()
    }

    pub fn resume_token(&self) -> String {
        self.hello["resumeToken"].as_str().unwrap_or_else(|| panic!("node {}: map/connect without resumeToken: {}", self.node, self.hello)).to_string()
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(LOG_LINES)..].join("\n")
    }

    /// Panic with the node's name and log tail.
    pub fn fail(&self, what: &str) -> ! {
        panic!("node {}: {what}\n--- log of node {} ---\n{}", self.node, self.node, self.log_tail())
    }

    /// The whole response (result or error).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        match self.ws.try_call_within(method, params.clone(), ANSWER).await {
            Ok(r) => r,
            Err(e) => self.fail(&format!("{method} {params}: {e}")),
        }
    }

    /// The result; an error answer fails the test.
    pub async fn ok(&mut self, method: &str, params: Value) -> Value {
        let resp = self.call(method, params.clone()).await;
        match resp.get("result") {
            Some(r) if resp.get("error").is_none() => r.clone(),
            _ => self.fail(&format!("{method} {params} answered {resp}")),
        }
    }

    /// The whole response, or `Err` when the socket is gone or nothing answers.
    pub async fn try_call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.ws.try_call_within(method, params, ANSWER).await
    }

    /// `map/agents/register {agentId: id, …extra}`: the agent.
    pub async fn register(&mut self, id: &str, extra: Value) -> Value {
        let mut params = if extra.is_object() { extra } else { json!({}) };
        params["agentId"] = json!(id);
        let r = self.ok("map/agents/register", params).await;
        if r["agent"]["id"] != id {
            self.fail(&format!("map/agents/register {id} answered {r}"));
        }
        self.agent.get_or_insert_with(|| id.to_string());
        r["agent"].clone()
    }

    /// `map/subscribe {filter}`: the subscription id.
    pub async fn subscribe(&mut self, filter: Value) -> String {
        let r = self.ok("map/subscribe", json!({"filter": filter})).await;
        match r["subscriptionId"].as_str() {
            Some(s) => s.to_string(),
            None => self.fail(&format!("map/subscribe answered {r}")),
        }
    }

    /// Call until `pred` holds for the whole response, at most `REPLICATION`:
    /// that response. `what` says what was awaited, for the failure.
    pub async fn wait_for(&mut self, what: &str, method: &str, params: Value, pred: impl Fn(&Value) -> bool) -> Value {
        // A loop of its own, not `wait::until`: this runs in spawned tasks,
        // and an async closure's future is not known to be `Send` there.
        let deadline = tokio::time::Instant::now() + REPLICATION;
        loop {
            let resp = self.call(method, params.clone()).await;
            if pred(&resp) {
                return resp;
            }
            if tokio::time::Instant::now() >= deadline {
                self.fail(&format!("{what}: not so within {REPLICATION:?}; last answer to {method} {params}: {resp}"));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Wait until `map/agents/get` finds the agent here: the agent.
    pub async fn wait_for_agent(&mut self, id: &str) -> Value {
        let what = format!("agent {id} (registered on another node) visible here");
        let r = self.wait_for(&what, "map/agents/get", json!({"agentId": id}), |r| r["result"]["agent"]["id"] == id).await;
        r["result"]["agent"].clone()
    }

    /// Wait until `map/agents/get` answers 2001 (agent not found) for `id`.
    pub async fn wait_agent_gone(&mut self, id: &str) {
        let what = format!("agent {id} gone (map/agents/get → 2001)");
        self.wait_for(&what, "map/agents/get", json!({"agentId": id}), |r| r["error"]["code"] == 2001).await;
    }

    /// The first notification matching `pred` within `within`; others stay kept.
    pub async fn note(&mut self, within: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        self.ws.take_where(within, pred).await
    }

    /// `note`, failing (with `what`) when none comes.
    pub async fn expect_note(&mut self, what: &str, within: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        match self.ws.take_where(within, pred).await {
            Some(n) => n,
            None => {
                let kept: Vec<String> = self.ws.take_kept().iter().map(|n| n.to_string()).collect();
                self.fail(&format!("expected {what} within {within:?}; other notifications: [{}]", kept.join(", ")))
            }
        }
    }

    /// `map/event` notifications of subscription `sub`, in arrival order,
    /// until `done` holds for them all or `within` passes.
    pub async fn events(&mut self, sub: &str, within: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + within;
        let mut got = Vec::new();
        while !done(&got) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.ws.take_where(left, |n| is_event_of(n, sub)).await {
                Some(n) => got.push(n),
                None => break,
            }
        }
        got
    }

    /// Every turn of a conversation this session may read, oldest first (all pages).
    pub async fn all_turns(&mut self, conversation: &str) -> Vec<Value> {
        let mut turns = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = json!({"conversationId": conversation, "limit": 100});
            if let Some(c) = &cursor {
                params["cursor"] = json!(c);
            }
            let page = self.ok("mail/turns/list", params).await;
            turns.extend(page["turns"].as_array().cloned().unwrap_or_default());
            match (page["hasMore"].as_bool(), page["nextCursor"].as_str()) {
                (Some(true), Some(c)) => cursor = Some(c.to_string()),
                _ => return turns,
            }
        }
    }

    /// Every `map/replay` entry matching `filter` (all pages, oldest first).
    pub async fn replay_all(&mut self, filter: Option<Value>) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut params = json!({"limit": 1000});
            if let Some(f) = &filter {
                params["filter"] = f.clone();
            }
            if let Some(a) = &after {
                params["afterEventId"] = json!(a);
            }
            let page = self.ok("map/replay", params).await;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            after = events.last().and_then(|e| e["eventId"].as_str()).map(String::from);
            out.extend(events);
            if page["hasMore"] != true || after.is_none() {
                return out;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Reading notifications and events

/// A `map/event` notification of subscription `sub`.
pub fn is_event_of(n: &Value, sub: &str) -> bool {
    n["method"] == "map/event" && n["params"]["subscriptionId"] == sub
}

/// A `map/event` notification whose event has this type.
pub fn is_event_type(n: &Value, kind: &str) -> bool {
    n["method"] == "map/event" && n["params"]["event"]["type"] == kind
}

/// A `map/message` notification whose payload has `key: value`.
pub fn is_message_with(n: &Value, key: &str, value: &Value) -> bool {
    n["method"] == "map/message" && &n["params"]["message"]["payload"][key] == value
}

/// The event inside a `map/event` notification or a `map/replay` entry.
pub fn event_of(n: &Value) -> &Value {
    if n.get("params").is_some() {
        &n["params"]["event"]
    } else {
        &n["event"]
    }
}

pub fn event_type(n: &Value) -> &str {
    event_of(n)["type"].as_str().unwrap_or("")
}

/// The agent an agent event is about (`data.agentId`, or `data.agent.id`).
pub fn event_agent(n: &Value) -> Option<&str> {
    let data = &event_of(n)["data"];
    data["agentId"].as_str().or_else(|| data["agent"]["id"].as_str())
}

/// The eventId of a `map/event` notification or a `map/replay` entry.
pub fn event_id(n: &Value) -> &str {
    let id = if n.get("params").is_some() { &n["params"]["eventId"] } else { &n["eventId"] };
    id.as_str().unwrap_or_else(|| panic!("no eventId in {n}"))
}

pub fn sequence(n: &Value) -> u64 {
    n["params"]["sequenceNumber"].as_u64().unwrap_or_else(|| panic!("no integer sequenceNumber in {n}"))
}

/// A short description of a notification or replay entry for failure messages.
pub fn describe(n: &Value) -> String {
    let seq = n["params"]["sequenceNumber"].as_u64().map(|s| format!("#{s} ")).unwrap_or_default();
    let id = if n.get("params").is_some() { &n["params"]["eventId"] } else { &n["eventId"] };
    let data = &event_of(n)["data"];
    let about = event_agent(n).or_else(|| data["scopeId"].as_str()).or_else(|| data["participantId"].as_str()).unwrap_or("-");
    format!("{seq}{} {about} ({})", event_type(n), id.as_str().unwrap_or("?"))
}

/// The notifications' sequence numbers are exactly 1, 2, 3, … and their eventIds distinct.
pub fn assert_numbered_from_one(events: &[Value], context: &str) {
    let seqs: Vec<u64> = events.iter().map(sequence).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(
        seqs,
        expected,
        "{context}: sequence numbers must run 1, 2, 3, … without gaps or repeats; got {}",
        events.iter().map(describe).collect::<Vec<_>>().join(", ")
    );
    let mut ids: Vec<&str> = events.iter().map(event_id).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "{context}: an eventId appears twice among {}", events.iter().map(describe).collect::<Vec<_>>().join(", "));
}

/// The strings of a JSON array (ids in `delivered`, `members`, …; objects give their `id`).
pub fn id_set(v: &Value) -> std::collections::BTreeSet<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str().or_else(|| x["id"].as_str()).or_else(|| x["agentId"].as_str()).map(String::from)).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Singleton plugins: which node holds a (tenant, plugin) lease

impl Node {
    /// This node's `GET /admin/plugins` entry for (tenant, plugin), if it lists one.
    pub async fn plugin_entry(&self, tenant: &str, plugin: &str) -> Option<Value> {
        let r = http(&self.gw.addr(), "GET", "/admin/plugins", &[], b"").await;
        assert_eq!(r.status, 200, "node {}: GET /admin/plugins answered {} {}\n{}", self.name, r.status, r.text(), self.log_tail());
        let listed = r.json();
        listed["tenants"].as_array().and_then(|ts| ts.iter().find(|t| t["tenant"] == tenant && t["plugin"] == plugin).cloned())
    }
}

/// Poll the nodes named (running ones) until exactly one of them says it
/// holds the lease of (tenant, plugin) (`"lease": {"held": true, "token"}`
/// in `/admin/plugins`), at most `within`: that node's name and the token.
pub async fn lease_holder(cluster: &Cluster, nodes: &[&str], tenant: &str, plugin: &str, within: Duration) -> (String, u64) {
    let probe = async || {
        let mut holders = Vec::new();
        let mut entries = Vec::new();
        for name in nodes {
            let entry = cluster.node(name).plugin_entry(tenant, plugin).await;
            let lease = entry.as_ref().map(|e| e["lease"].clone()).unwrap_or(Value::Null);
            if lease["held"] == true {
                holders
                    .push((name.to_string(), lease["token"].as_u64().unwrap_or_else(|| panic!("node {name}: a held lease without an integer token: {lease}"))));
            }
            entries.push(format!("{name}: {}", entry.map_or("not listed".to_string(), |e| e.to_string())));
        }
        match holders.len() {
            1 => Ok(holders.remove(0)),
            _ => Err(format!("holders {holders:?}; /admin/plugins entries:\n{}", entries.join("\n"))),
        }
    };
    let what = format!("exactly one holder of {plugin}'s lease for tenant {tenant} among {nodes:?}");
    wait::eventually(within, &what, probe).await
}
