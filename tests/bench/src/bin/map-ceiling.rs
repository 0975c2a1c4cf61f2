//! `map-ceiling`: the smallest MAP router that the benchmark's scenarios can run
//! against. It answers `map/connect` and `map/agents/register` with plausible
//! results and pushes `map/send {to: {agent}}` to the recipient as `map/message`
//! (answering the send with `{messageId, delivered}`). No validation, no events,
//! no storage, no sessions beyond the socket. As an extra it keeps scope member
//! lists (`map/scopes/create|join`, `map/send {to: {scope}}`) so that fan-out has a
//! ceiling too. Everything else is -32601.
//!
//! Its throughput under the load generator is the practical ceiling of that
//! generator on this machine: a real server cannot be measured faster than this.
//!
//! Usage: `map-ceiling [--listen 127.0.0.1:0] [--read-buffer BYTES]`; prints
//! `map-ceiling listening on ws://127.0.0.1:PORT` when ready. `--read-buffer`
//! is tungstenite's `read_buffer_size` (default here 8 KiB; tungstenite's own
//! default is 128 KiB, which it zero-fills before every read).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

type Tx = mpsc::UnboundedSender<Utf8Bytes>;

#[derive(Default)]
struct Router {
    agents: Mutex<HashMap<String, Tx>>,
    scopes: Mutex<HashMap<String, Vec<String>>>,
    seq: AtomicU64,
}

impl Router {
    fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }
}

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Named {
    name: Option<String>,
}

#[derive(Deserialize)]
struct Join {
    #[serde(rename = "scopeId")]
    scope_id: String,
    #[serde(rename = "agentId")]
    agent_id: String,
}

#[derive(Deserialize)]
struct To {
    agent: Option<String>,
    scope: Option<String>,
}

#[derive(Deserialize)]
struct Send<'a> {
    #[serde(borrow)]
    to: &'a RawValue,
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
}

fn main() {
    let mut listen = "127.0.0.1:0".to_string();
    let mut read_buffer = 8 * 1024;
    let mut args = std::env::args();
    args.next(); // the program name
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().expect("--listen ADDR"),
            "--read-buffer" => read_buffer = args.next().and_then(|v| v.parse().ok()).expect("--read-buffer BYTES"),
            _ => {
                eprintln!("usage: map-ceiling [--listen 127.0.0.1:0] [--read-buffer BYTES]");
                std::process::exit(2);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(&listen).await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        println!("map-ceiling listening on ws://{addr}");
        let _ = std::io::stdout().flush();
        let router = Arc::new(Router::default());
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(connection(router.clone(), stream, read_buffer));
        }
    });
}

async fn connection(router: Arc<Router>, stream: TcpStream, read_buffer: usize) {
    let config = WebSocketConfig::default().read_buffer_size(read_buffer);
    let Ok(ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await else { return };
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Utf8Bytes>();
    // The writer: everything already queued, then one flush (as the gateway does).
    let writer = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            while let Some(text) = next {
                if sink.feed(Message::Text(text)).await.is_err() {
                    return;
                }
                next = rx.try_recv().ok();
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
    });
    let conn_no = router.next();
    let mut owned: Vec<String> = Vec::new();
    let mut out = String::with_capacity(512);
    while let Some(Ok(msg)) = source.next().await {
        let text = match &msg {
            Message::Text(t) => t.as_str(),
            Message::Close(_) => break,
            _ => continue,
        };
        let Ok(req) = serde_json::from_str::<Request>(text) else { continue };
        out.clear();
        handle(&router, &tx, conn_no, &mut owned, &req, &mut out);
        if req.id.is_some() && !out.is_empty() && tx.send(Utf8Bytes::from(out.clone())).is_err() {
            break;
        }
    }
    {
        let mut agents = router.agents.lock().unwrap();
        for a in &owned {
            agents.remove(a);
        }
    }
    drop(tx);
    let _ = writer.await;
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// Writes the response to `req` into `out`.
fn handle(router: &Router, tx: &Tx, conn_no: u64, owned: &mut Vec<String>, req: &Request, out: &mut String) {
    let id = req.id.map(RawValue::get).unwrap_or("null");
    let params = req.params.map(RawValue::get).unwrap_or("{}");
    let _ = write!(out, r#"{{"jsonrpc":"2.0","id":{id},"#);
    match &*req.method {
        "map/connect" => {
            let _ = write!(
                out,
                r#""result":{{"protocolVersion":1,"sessionId":"sess-{conn_no}","participantId":"part-{conn_no}","capabilities":{{}},"systemInfo":{{"name":"map-ceiling","version":"0"}}}}}}"#
            );
        }
        "map/agents/register" => {
            let named: Named = serde_json::from_str(params).unwrap_or_default();
            let agent = format!("agent-{}", router.next());
            router.agents.lock().unwrap().insert(agent.clone(), tx.clone());
            owned.push(agent.clone());
            let name = serde_json::to_string(&named.name.unwrap_or_default()).unwrap_or_default();
            let _ = write!(out, r#""result":{{"agent":{{"id":"{agent}","name":{name},"state":"active"}}}}}}"#);
        }
        "map/scopes/create" => {
            let scope = format!("scope-{}", router.next());
            router.scopes.lock().unwrap().insert(scope.clone(), Vec::new());
            let _ = write!(out, r#""result":{{"scope":{{"id":"{scope}"}}}}}}"#);
        }
        "map/scopes/join" => match serde_json::from_str::<Join>(params) {
            Ok(j) => {
                router.scopes.lock().unwrap().entry(j.scope_id).or_default().push(j.agent_id);
                out.push_str(r#""result":{"success":true}}"#);
            }
            Err(_) => out.push_str(r#""error":{"code":-32602,"message":"scopeId and agentId"}}"#),
        },
        "map/send" => send(router, owned, params, out),
        _ => out.push_str(r#""error":{"code":-32601,"message":"Method not found"}}"#),
    }
}

fn send(router: &Router, owned: &[String], params: &str, out: &mut String) {
    let Ok(p) = serde_json::from_str::<Send>(params) else {
        out.push_str(r#""error":{"code":-32602,"message":"to is required"}}"#);
        return;
    };
    let to: To = serde_json::from_str(p.to.get()).unwrap_or(To { agent: None, scope: None });
    let message_id = format!("msg-{}", router.next());
    let from = owned.first().map(String::as_str).unwrap_or("anonymous");
    let mut frame = String::with_capacity(160 + params.len());
    let _ = write!(
        frame,
        r#"{{"jsonrpc":"2.0","method":"map/message","params":{{"message":{{"id":"{message_id}","from":"{from}","to":{},"timestamp":{}"#,
        p.to.get(),
        now_ms()
    );
    if let Some(payload) = p.payload {
        frame.push_str(r#","payload":"#);
        frame.push_str(payload.get());
    }
    frame.push_str("}}}");
    let frame = Utf8Bytes::from(frame);
    let recipients: Vec<String> = match (to.agent, to.scope) {
        (Some(a), _) => vec![a],
        (None, Some(s)) => router.scopes.lock().unwrap().get(&s).cloned().unwrap_or_default(),
        _ => Vec::new(),
    };
    let _ = write!(out, r#""result":{{"messageId":"{message_id}","delivered":["#);
    let agents = router.agents.lock().unwrap();
    let mut first = true;
    for r in &recipients {
        if let Some(tx) = agents.get(r) {
            if tx.send(frame.clone()).is_ok() {
                if !first {
                    out.push(',');
                }
                first = false;
                let _ = write!(out, r#""{r}""#);
            }
        }
    }
    out.push_str("]}}");
}
