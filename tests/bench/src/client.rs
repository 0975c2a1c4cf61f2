//! A MAP client for setting up a scenario: open a socket, `map/connect`, register,
//! one call at a time. The load loops themselves work on the raw socket.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub type Ws = WebSocketStream<TcpStream>;
pub type Result<T> = std::result::Result<T, String>;

/// How long one setup call may take before the scenario gives up.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Conn {
    pub ws: Ws,
    pub next_id: u64,
}

/// The error object of a JSON-RPC response, or a transport failure.
#[derive(Debug)]
pub enum CallError {
    Rpc { code: i64, message: String },
    Transport(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Rpc { code, message } => write!(f, "error {code}: {message}"),
            CallError::Transport(e) => write!(f, "{e}"),
        }
    }
}

impl From<CallError> for String {
    fn from(e: CallError) -> String {
        e.to_string()
    }
}

fn host_port(url: &str) -> Result<&str> {
    let rest = url.strip_prefix("ws://").ok_or_else(|| format!("{url}: only ws:// URLs"))?;
    Ok(rest.split('/').next().unwrap_or(rest))
}

/// Open a WebSocket (TCP_NODELAY). `small` keeps the client's buffers smaller
/// still, for holding thousands of idle sockets.
pub async fn open(url: &str, small: bool) -> Result<Conn> {
    let tcp = TcpStream::connect(host_port(url)?).await.map_err(|e| format!("connect {url}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    // tungstenite zero-fills the free part of its read buffer before every read
    // (128 KiB by default): a small buffer keeps the generator cheap.
    let config =
        if small { WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0) } else { WebSocketConfig::default().read_buffer_size(16 * 1024) };
    handshake(url, tcp, config).await
}

/// The WebSocket handshake for `url` on a TCP stream the caller opened.
pub async fn handshake(url: &str, tcp: TcpStream, config: WebSocketConfig) -> Result<Conn> {
    let (ws, _) = tokio_tungstenite::client_async_with_config(url, tcp, Some(config)).await.map_err(|e| format!("handshake {url}: {e}"))?;
    Ok(Conn { ws, next_id: 1 })
}

impl Conn {
    /// One request; notifications that arrive meanwhile are dropped.
    pub async fn call(&mut self, method: &str, params: Value) -> std::result::Result<Value, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let text = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(text)).await.map_err(|e| CallError::Transport(format!("{method}: {e}")))?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let next = tokio::time::timeout_at(deadline.into(), self.ws.next())
                .await
                .map_err(|_| CallError::Transport(format!("{method}: no answer in {CALL_TIMEOUT:?}")))?;
            let msg = match next {
                Some(Ok(m)) => m,
                Some(Err(e)) => return Err(CallError::Transport(format!("{method}: {e}"))),
                None => return Err(CallError::Transport(format!("{method}: connection closed"))),
            };
            let Message::Text(t) = msg else { continue };
            let Ok(v) = serde_json::from_str::<Value>(t.as_str()) else { continue };
            if v.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            if let Some(e) = v.get("error") {
                return Err(CallError::Rpc {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: e.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
                });
            }
            return Ok(v.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    pub async fn connect(&mut self, participant_type: &str) -> Result<Value> {
        Ok(self.call("map/connect", json!({"protocolVersion": 1, "participantType": participant_type, "name": "map-bench"})).await?)
    }

    /// Register an agent and return its id (`{agent: {id}}`; also accepts `{agentId}` or `{id}`).
    pub async fn register(&mut self, name: &str) -> Result<String> {
        let r = self.call("map/agents/register", json!({"name": name, "role": "bench"})).await?;
        r.pointer("/agent/id")
            .or_else(|| r.get("agentId"))
            .or_else(|| r.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("map/agents/register: no agent id in {r}"))
    }

    /// Poll `map/agents/get` until this server sees agent `id` (registered on
    /// another node of a cluster: replication is asynchronous); returns how
    /// long that took.
    pub async fn await_agent(&mut self, id: &str, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            match self.call("map/agents/get", json!({ "agentId": id })).await {
                Ok(_) => return Ok(started.elapsed()),
                Err(CallError::Rpc { code, message }) if started.elapsed() >= timeout => {
                    return Err(format!("agent {id} still unknown to the sender's server after {timeout:?} (map/agents/get: error {code}: {message})"));
                }
                Err(CallError::Rpc { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Open, connect as an agent and register; returns the agent id.
    pub async fn agent(url: &str, name: &str) -> Result<(Conn, String)> {
        let mut c = open(url, false).await?;
        c.connect("agent").await?;
        let id = c.register(name).await?;
        Ok((c, id))
    }
}
