//! Shared helpers for the black-box tests: start the real `map-gateway`
//! binary on a temporary config, talk to it over WebSocket, raw HTTP/1.1,
//! Server-Sent Events and stdio.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

pub mod cluster;
pub mod plugins;
pub mod signing;
pub mod wait;

/// How long to wait for an answer or a notification that should come.
pub const WAIT: Duration = Duration::from_secs(2);
/// How long to watch for something that should not come.
pub const QUIET: Duration = Duration::from_millis(400);

pub const BIN: &str = env!("CARGO_BIN_EXE_map-gateway");

/// A config with three tenants: `default` (anonymous), `acme` and `globex`.
pub const TENANTS: &str = r#"
[auth]
anonymous_tenant = "default"
[[tenants]]
id = "default"
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
"#;

// ---------------------------------------------------------------------------
// Temporary directories and configs

/// A fresh directory under the system temp dir, removed on drop.
/// A fixture component built by `scripts/build-plugins.sh --fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures").join(name);
    assert!(p.exists(), "fixture {} is missing: run scripts/build-plugins.sh --fixtures", p.display());
    p
}

/// The Python that `scripts/setup.sh --tests` installs (with grpcio), or `MAP_TEST_PYTHON`.
pub fn python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let py = std::env::var_os("MAP_TEST_PYTHON").map(PathBuf::from).unwrap_or_else(|| root.join("target/pyenv/bin/python"));
    assert!(py.exists(), "{} is missing: run scripts/setup.sh --tests", py.display());
    py
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("map-gw-test-{tag}-{}-{}-{nanos}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Write `config.toml` into `dir`: a `[server]` section with a data dir in
/// `dir` and the given limits, followed by `extra` (auth, tenants, ...).
pub fn write_config(dir: &Path, max_message_bytes: usize, extra: &str) -> PathBuf {
    write_config_server(dir, &format!("max_message_bytes = {max_message_bytes}\nresume_window_secs = 300"), extra)
}

/// How long a gateway may take to print its listening line: compiling
/// plugins into an empty cache takes seconds each on a busy runner.
const READY_WAIT: Duration = Duration::from_secs(120);

/// Compiled plugins, shared by every gateway the tests start (compiling
/// the standard plugins anew for each would cost seconds per gateway).
pub fn shared_plugin_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugin-cache")
}

/// Write `config.toml` with these `[server]` lines (besides `data_dir`, and
/// `cache_dir` unless they name one) and `extra`.
pub fn write_config_server(dir: &Path, server: &str, extra: &str) -> PathBuf {
    let data = dir.join("data");
    let cache = if server.contains("cache_dir") { String::new() } else { format!("cache_dir = {:?}\n", shared_plugin_cache()) };
    let text = format!("[server]\ndata_dir = {data:?}\n{cache}{server}\n{extra}\n", data = data.to_string_lossy());
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

// ---------------------------------------------------------------------------
// The listening gateway

/// A running `map-gateway serve`; killed on drop.
pub struct Gateway {
    child: Child,
    pub port: u16,
    pub dir: TempDir,
    pub config: PathBuf,
    /// Variables added to the process's environment.
    env: Vec<(String, String)>,
}

impl Gateway {
    /// Start with the three-tenant config and a 64 KiB message limit.
    pub fn start() -> Gateway {
        Gateway::start_with(65536, TENANTS)
    }

    pub fn start_with(max_message_bytes: usize, extra: &str) -> Gateway {
        Gateway::start_config(&format!("max_message_bytes = {max_message_bytes}\nresume_window_secs = 300"), extra)
    }

    /// Start with these `[server]` lines (besides `data_dir`) and `extra` sections.
    pub fn start_config(server: &str, extra: &str) -> Gateway {
        Gateway::start_config_env(server, extra, &[])
    }

    /// `start_config`, with these variables in the process's environment (kept across restarts).
    pub fn start_config_env(server: &str, extra: &str, env: &[(&str, &str)]) -> Gateway {
        let dir = TempDir::new("srv");
        let config = write_config_server(dir.path(), server, extra);
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Gateway::launch_with(dir, config, None, env)
    }

    /// Send SIGTERM and wait for the process to end: its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
        assert!(sent.success(), "SIGTERM was not sent");
        self.child.wait().expect("the gateway is waited for")
    }

    /// kill -9 (no shutdown at all), then start again on the same config and data.
    pub fn kill_and_restart(mut self) -> Gateway {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::replace(&mut self.dir, TempDir(PathBuf::new()));
        Gateway::launch_with(dir, self.config.clone(), None, std::mem::take(&mut self.env))
    }

    /// kill -9: no shutdown at all. The process is reaped; its directory and config stay.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start again on the same config and data directory, after `terminate` or
    /// `kill9` (a process still running is killed first).
    pub fn restart(mut self) -> Gateway {
        self.kill9();
        let dir = std::mem::replace(&mut self.dir, TempDir(PathBuf::new()));
        Gateway::launch_with(dir, self.config.clone(), None, std::mem::take(&mut self.env))
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Start on a config file in `dir`; the log goes to `dir/gateway.log` (appended).
    pub fn launch(dir: TempDir, config: PathBuf) -> Gateway {
        Gateway::launch_limited(dir, config, None)
    }

    /// `launch`, with the process's open-file limit (soft and hard) set to `files`.
    pub fn launch_limited(dir: TempDir, config: PathBuf, files: Option<u32>) -> Gateway {
        Gateway::launch_with(dir, config, files, Vec::new())
    }

    /// `launch_limited`, with these variables added to the process's environment.
    pub fn launch_with(dir: TempDir, config: PathBuf, files: Option<u32>, env: Vec<(String, String)>) -> Gateway {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.path().join("gateway.log")).expect("log file");
        let mut command = match files {
            None => Command::new(BIN),
            Some(n) => {
                let mut c = Command::new("bash");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), BIN]);
                c
            }
        };
        let mut child = command
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn map-gateway");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep the pipe open (and drained) for the life of the process.
            let mut sink = String::new();
            while reader.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                sink.clear();
            }
        });
        let mut guard = Gateway { child, port: 0, dir, config, env };
        let line = match rx.recv_timeout(READY_WAIT) {
            Ok(l) => l,
            Err(_) => panic!("gateway did not print its listening line; log:\n{}", guard.log()),
        };
        let line = line.trim_end();
        let port = line
            .strip_prefix("map-gateway listening on http://127.0.0.1:")
            .or_else(|| line.strip_prefix("map-gateway listening on https://127.0.0.1:"))
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("unexpected ready line {line:?}; log:\n{}", guard.log()));
        guard.port = port;
        guard
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}/map", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
    }

    /// The first line of the log matching `pred`, waiting (at most `within`)
    /// for it to be written; the failure names `what` and shows the log's tail.
    pub async fn log_line(&self, within: Duration, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let probe = async || self.log().lines().find(|l| pred(l)).map(String::from).ok_or(());
        match wait::until(within, probe).await {
            Ok(line) => line,
            Err(()) => panic!("{what}: no such line in the log within {within:?}; its tail:\n{}", self.log_tail(40)),
        }
    }

    pub async fn ws(&self) -> Ws {
        Ws::connect(&self.ws_url()).await
    }

    /// A WebSocket that has done `map/connect` (anonymous unless `auth` is given).
    pub async fn ws_connected(&self, participant_type: &str, auth: Option<Value>) -> (Ws, Value) {
        let mut ws = self.ws().await;
        let mut params = json!({"protocolVersion": 1, "participantType": participant_type});
        if let Some(a) = auth {
            params["auth"] = a;
        }
        let r = ws.call("map/connect", params).await;
        let result = ok(&r).clone();
        (ws, result)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn api_key(key: &str) -> Value {
    json!({"method": "api-key", "credential": key})
}

// ---------------------------------------------------------------------------
// JSON-RPC helpers

pub fn request(id: impl Into<Value>, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params})
}

/// The `result` of a response; panics (showing the response) on an error.
pub fn ok(resp: &Value) -> &Value {
    match resp.get("result") {
        Some(r) if resp.get("error").is_none() => r,
        _ => panic!("expected a result, got {resp}"),
    }
}

/// The `error` of a response; panics on a result.
pub fn err(resp: &Value) -> &Value {
    match resp.get("error") {
        Some(e) if resp.get("result").is_none() => e,
        _ => panic!("expected an error, got {resp}"),
    }
}

pub fn err_code(resp: &Value) -> i64 {
    err(resp)["code"].as_i64().unwrap_or_else(|| panic!("error without integer code: {resp}"))
}

/// Assert a JSON-RPC 2.0 error response with this id, code and category.
pub fn assert_error(resp: &Value, id: &Value, code: i64, category: &str) {
    assert_eq!(resp["jsonrpc"], "2.0", "{resp}");
    assert_eq!(&resp["id"], id, "id of {resp}");
    assert_eq!(err_code(resp), code, "code of {resp}");
    assert!(err(resp)["message"].is_string(), "message missing in {resp}");
    assert_eq!(err(resp)["data"]["category"], category, "category of {resp}");
}

fn is_notification(v: &Value) -> bool {
    v.is_object() && v.get("method").is_some() && v.get("id").is_none()
}

// ---------------------------------------------------------------------------
// WebSocket client

type WsStream = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// A WebSocket peer: calls skip (and keep) notifications; notifications are
/// collected with a timeout.
pub struct Ws {
    stream: WsStream,
    notes: VecDeque<Value>,
    next_id: i64,
}

impl Ws {
    pub async fn connect(url: &str) -> Ws {
        let (stream, _) =
            tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url)).await.expect("websocket connect timed out").expect("websocket connect");
        Ws { stream, notes: VecDeque::new(), next_id: 1 }
    }

    pub async fn send_text(&mut self, text: &str) {
        self.stream.send(Message::text(text.to_string())).await.expect("websocket send");
    }

    /// Read until the gateway's close frame: its code and reason (`None` on timeout or a close without one).
    pub async fn close_frame(&mut self, within: Duration) -> Option<(u16, String)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.next()).await.ok()?? {
                Ok(Message::Close(c)) => return c.map(|c| (u16::from(c.code), c.reason.to_string())),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    /// The next text frame within `within`, parsed; `None` on timeout.
    pub async fn next_frame(&mut self, within: Duration) -> Option<Value> {
        self.try_next_frame(within).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// The next text frame within `within`, parsed: `Ok(None)` on timeout,
    /// `Err` once the socket is closed or broken (a killed gateway).
    pub async fn try_next_frame(&mut self, within: Duration) -> Result<Option<Value>, String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Err(_) => return Ok(None),
                Ok(None) => return Err("websocket closed by the gateway".into()),
                Ok(Some(Err(e))) => return Err(format!("websocket read error: {e}")),
                Ok(Some(Ok(m))) => m,
            };
            match msg {
                Message::Text(t) => return Ok(Some(serde_json::from_str(t.as_str()).unwrap_or_else(|e| panic!("frame is not JSON ({e}): {t}")))),
                Message::Binary(b) => return Ok(Some(serde_json::from_slice(&b).expect("binary frame is not JSON"))),
                Message::Close(c) => return Err(format!("websocket closed by the gateway: {c:?}")),
                _ => continue,
            }
        }
    }

    /// Send raw text and return the next frame that is not a notification.
    pub async fn raw(&mut self, text: &str) -> Value {
        self.send_text(text).await;
        self.answer().await
    }

    /// The next non-notification frame (notifications met on the way are kept).
    pub async fn answer(&mut self) -> Value {
        self.answer_within(WAIT).await
    }

    /// `answer` with its own timeout.
    pub async fn answer_within(&mut self, within: Duration) -> Value {
        self.try_answer(within).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// The next non-notification frame within `within` (notifications met on
    /// the way are kept); `Err` on timeout or once the socket is gone.
    pub async fn try_answer(&mut self, within: Duration) -> Result<Value, String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let frame = self.try_next_frame(left).await?.ok_or_else(|| "no answer within the timeout".to_string())?;
            if is_notification(&frame) {
                self.notes.push_back(frame);
            } else {
                return Ok(frame);
            }
        }
    }

    /// Send a JSON value and return the next non-notification frame.
    pub async fn send_value(&mut self, v: &Value) -> Value {
        self.raw(&v.to_string()).await
    }

    /// Call a method with a fresh integer id; returns the whole response.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let resp = self.send_value(&request(id, method, params)).await;
        assert_eq!(resp["id"], json!(id), "answer to {method} has another id: {resp}");
        resp
    }

    /// Call and unwrap the result.
    pub async fn call_ok(&mut self, method: &str, params: Value) -> Value {
        let resp = self.call(method, params).await;
        ok(&resp).clone()
    }

    /// `call` waiting up to `within` for the answer.
    pub async fn call_within(&mut self, method: &str, params: Value, within: Duration) -> Value {
        self.try_call_within(method, params, within).await.unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// `call` that reports a gone socket or a missing answer as `Err`
    /// instead of panicking (for traffic towards a gateway that gets killed).
    pub async fn try_call_within(&mut self, method: &str, params: Value, within: Duration) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let text = request(id, method, params).to_string();
        self.stream.send(Message::text(text)).await.map_err(|e| format!("websocket send: {e}"))?;
        let resp = self.try_answer(within).await?;
        assert_eq!(resp["id"], json!(id), "answer to {method} has another id: {resp}");
        Ok(resp)
    }

    /// The first notification matching `pred` within `within` (kept ones
    /// first); the others stay kept, in order, for later calls.
    pub async fn take_where(&mut self, within: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        if let Some(pos) = self.notes.iter().position(&pred) {
            return self.notes.remove(pos);
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let frame = self.next_frame(left).await?;
            if pred(&frame) {
                return Some(frame);
            }
            self.notes.push_back(frame);
        }
    }

    /// The notifications kept so far (no reading from the socket, so this
    /// works on a socket whose gateway is gone).
    pub fn take_kept(&mut self) -> Vec<Value> {
        self.notes.drain(..).collect()
    }

    /// The first notification of `method` within `within` (kept ones first).
    pub async fn notification(&mut self, method: &str, within: Duration) -> Option<Value> {
        if let Some(pos) = self.notes.iter().position(|n| n["method"] == method) {
            return self.notes.remove(pos);
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let frame = self.next_frame(left).await?;
            if frame["method"] == method {
                return Some(frame);
            }
            self.notes.push_back(frame);
        }
    }

    /// Every notification already kept or arriving within `within`.
    pub async fn drain(&mut self, within: Duration) -> Vec<Value> {
        let mut out: Vec<Value> = self.notes.drain(..).collect();
        while let Some(f) = self.next_frame(within).await {
            out.push(f);
        }
        out
    }

    /// Wait for a notification matching `pred`, collecting the others seen first.
    pub async fn notification_where(&mut self, within: Duration, pred: impl Fn(&Value) -> bool) -> (Option<Value>, Vec<Value>) {
        let mut seen = Vec::new();
        while let Some(n) = self.notes.pop_front() {
            if pred(&n) {
                return (Some(n), seen);
            }
            seen.push(n);
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_frame(left).await {
                None => return (None, seen),
                Some(f) if pred(&f) => return (Some(f), seen),
                Some(f) => seen.push(f),
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.stream.close(None).await;
        // Read until the gateway answers the close (or goes away).
        let _ = tokio::time::timeout(WAIT, async {
            while let Some(Ok(m)) = self.stream.next().await {
                if m.is_close() {
                    break;
                }
            }
        })
        .await;
    }
}

// ---------------------------------------------------------------------------
// Raw HTTP/1.1

pub struct HttpResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == &name.to_ascii_lowercase()).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?} (status {})", self.text(), self.status))
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub fn parse_head(head: &[u8]) -> (u16, Vec<(String, String)>) {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers =
        lines.filter(|l| !l.is_empty()).filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string())).collect();
    (status, headers)
}

/// Decode a complete chunked body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = find(raw, b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[eol + 2 + size + 2..];
    }
    out
}

/// One request on a fresh connection (`Connection: close`).
pub async fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.expect("tcp connect");
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if method != "GET" || !body.is_empty() {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).await.expect("write head");
        // A gateway that refuses an oversize body may close before reading it all.
        let _ = s.write_all(body).await;
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        let split = find(&raw, b"\r\n\r\n").unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(&raw)));
        let (status, headers) = parse_head(&raw[..split]);
        let rest = &raw[split + 4..];
        let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let body = if chunked {
            dechunk(rest)
        } else if let Some(len) = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse::<usize>().ok()) {
            rest[..len.min(rest.len())].to_vec()
        } else {
            rest.to_vec()
        };
        HttpResponse { status, headers, body }
    };
    tokio::time::timeout(Duration::from_secs(5), fut).await.expect("HTTP request timed out")
}

/// POST a JSON-RPC body to `/map/rpc`, optionally in a session.
pub async fn post_rpc(addr: &str, session: Option<&str>, body: &Value) -> HttpResponse {
    post(addr, "/map/rpc", session, body.to_string().as_bytes()).await
}

pub async fn post(addr: &str, path: &str, session: Option<&str>, body: &[u8]) -> HttpResponse {
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(s) = session {
        headers.push(("map-session-id", s));
    }
    http(addr, "POST", path, &headers, body).await
}

// ---------------------------------------------------------------------------
// Server-Sent Events over a raw, chunked HTTP/1.1 response

pub struct Sse {
    stream: TcpStream,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    chunked: bool,
    /// Bytes read and not yet de-chunked.
    raw: Vec<u8>,
    /// De-chunked body not yet split into events.
    text: Vec<u8>,
}

impl Sse {
    /// `GET /map/events` naming `session`; returns once the response head is read.
    pub async fn open(addr: &str, session: &str) -> Sse {
        let mut stream = TcpStream::connect(addr).await.expect("tcp connect");
        let head = format!("GET /map/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nmap-session-id: {session}\r\n\r\n");
        stream.write_all(head.as_bytes()).await.expect("write head");
        let mut raw = Vec::new();
        let split = tokio::time::timeout(WAIT, async {
            loop {
                if let Some(i) = find(&raw, b"\r\n\r\n") {
                    return i;
                }
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).await.expect("read SSE head");
                assert!(n > 0, "SSE connection closed before its head: {:?}", String::from_utf8_lossy(&raw));
                raw.extend_from_slice(&buf[..n]);
            }
        })
        .await
        .expect("SSE head timed out");
        let (status, headers) = parse_head(&raw[..split]);
        let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let rest = raw[split + 4..].to_vec();
        Sse { stream, status, headers, chunked, raw: rest, text: Vec::new() }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn dechunk_available(&mut self) {
        if !self.chunked {
            self.text.append(&mut self.raw);
            return;
        }
        loop {
            let Some(eol) = find(&self.raw, b"\r\n") else { return };
            let size_text = String::from_utf8_lossy(&self.raw[..eol]).to_string();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).expect("chunk size");
            if self.raw.len() < eol + 2 + size + 2 {
                return;
            }
            self.text.extend_from_slice(&self.raw[eol + 2..eol + 2 + size]);
            self.raw.drain(..eol + 2 + size + 2);
        }
    }

    /// The next event's `(event name, parsed data)`; comments (keep-alives) are skipped.
    pub async fn next_event(&mut self, within: Duration) -> Option<(String, Value)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            self.dechunk_available();
            while let Some(end) = find(&self.text, b"\n\n") {
                let block: Vec<u8> = self.text.drain(..end + 2).collect();
                let block = String::from_utf8(block).expect("SSE is UTF-8");
                let mut name = String::from("message");
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                let data = data.join("\n");
                let value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data}"));
                return Some((name, value));
            }
            let mut buf = [0u8; 8192];
            let n = match tokio::time::timeout_at(deadline, self.stream.read(&mut buf)).await {
                Err(_) => return None,
                Ok(r) => r.expect("read SSE"),
            };
            assert!(n > 0, "SSE stream closed by the gateway");
            self.raw.extend_from_slice(&buf[..n]);
        }
    }

    /// The first `data` notification with this method, collecting the others seen first.
    pub async fn notification(&mut self, method: &str, within: Duration) -> (Option<Value>, Vec<Value>) {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_event(left).await {
                None => return (None, seen),
                Some((name, v)) => {
                    assert_eq!(name, "message", "SSE event name");
                    if v["method"] == method {
                        return (Some(v), seen);
                    }
                    seen.push(v);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// stdio

/// `map-gateway serve --stdio`; killed on drop.
pub struct StdioPeer {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
    notes: VecDeque<Value>,
    next_id: i64,
    pub dir: TempDir,
}

impl StdioPeer {
    pub fn start(max_message_bytes: usize) -> StdioPeer {
        let dir = TempDir::new("stdio");
        let config = write_config(dir.path(), max_message_bytes, "");
        let log = std::fs::File::create(dir.path().join("gateway.log")).expect("log file");
        let mut child = tokio::process::Command::new(BIN)
            .args(["serve", "--stdio", "--config"])
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn map-gateway --stdio");
        let stdin = child.stdin.take();
        let stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout"));
        StdioPeer { child, stdin, stdout, notes: VecDeque::new(), next_id: 1, dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
    }

    /// Write one line (a newline is added).
    pub async fn write_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).await.expect("write stdin");
        stdin.write_all(b"\n").await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    /// The next raw stdout line within `within` (without its newline).
    pub async fn next_line(&mut self, within: Duration) -> Option<String> {
        let mut line = String::new();
        match tokio::time::timeout(within, self.stdout.read_line(&mut line)).await {
            Err(_) => None,
            Ok(Ok(0)) => panic!("gateway stdout closed; log:\n{}", self.log()),
            Ok(Ok(_)) => Some(line.trim_end_matches('\n').to_string()),
            Ok(Err(e)) => panic!("read stdout: {e}"),
        }
    }

    /// The next line that is not a notification, as raw text (kept notifications aside).
    pub async fn answer_line(&mut self) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self.next_line(left).await.unwrap_or_else(|| panic!("no answer line within the timeout; log:\n{}", self.log()));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            if is_notification(&v) {
                self.notes.push_back(v);
            } else {
                return line;
            }
        }
    }

    pub async fn raw(&mut self, line: &str) -> Value {
        self.write_line(line).await;
        serde_json::from_str(&self.answer_line().await).expect("JSON")
    }

    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let resp = self.raw(&request(id, method, params).to_string()).await;
        assert_eq!(resp["id"], json!(id), "answer to {method} has another id: {resp}");
        resp
    }

    pub async fn call_ok(&mut self, method: &str, params: Value) -> Value {
        let resp = self.call(method, params).await;
        ok(&resp).clone()
    }

    pub async fn notification(&mut self, method: &str, within: Duration) -> Option<Value> {
        if let Some(pos) = self.notes.iter().position(|n| n["method"] == method) {
            return self.notes.remove(pos);
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self.next_line(left).await?;
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            if v["method"] == method {
                return Some(v);
            }
            self.notes.push_back(v);
        }
    }

    /// Close stdin and wait for the process to end; returns its exit status.
    pub async fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.expect("gateway did not exit after stdin closed").expect("wait")
    }
}

impl Drop for StdioPeer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
