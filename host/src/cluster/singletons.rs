//! Calls to a singleton plugin's owner, from any node, over NATS core.
//!
//! The node holding a (tenant, plugin)'s lease serves three subjects in a
//! queue group (so one version of one node takes each call):
//! `<name>.sg.<tenant>.<plugin>.rpc` (JSON-RPC), `.http` (an HTTP request)
//! and `.grpc` (opens a relayed gRPC call). A request nobody serves (the
//! lease is moving) is sent again every `RETRY_EVERY` until its deadline.
//!
//! A relayed gRPC call has an inbox on each side, `<name>.sgr.<node>.<id>`:
//! client messages go up to the owner's, the plugin's messages and final
//! status come down to the relaying node's. Each side numbers what it
//! sends and pings every `PING_EVERY`; a gap, or silence for
//! `SILENT_AFTER`, ends the call (UNAVAILABLE for the client, CANCELLED for
//! the plugin), so a client whose owner died reconnects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::{HeaderMap, Subject};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{token, Cluster};

/// Pause before asking again when no node serves the plugin.
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// A relayed call's sides ping each other this often...
const PING_EVERY: Duration = Duration::from_secs(1);
/// ...and end the call after this long without a word from the other side.
const SILENT_AFTER: Duration = Duration::from_millis(4_500);
/// Response messages a relaying node holds for a client that reads slowly.
const RELAY_QUEUE: usize = 64;

const META: &str = "Map-Meta";
const KIND: &str = "Map-Kind";
const SEQ: &str = "Map-Seq";

/// Who made a forwarded call: the session's identity (the session itself
/// lives on the calling node; the owner sees it in the mirrored directory).
#[derive(Clone, Serialize, Deserialize)]
pub struct Caller {
    pub session_id: String,
    pub participant_id: String,
    pub participant_type: String,
    pub principal: String,
}

#[derive(Serialize, Deserialize)]
pub struct RpcCall {
    pub caller: Caller,
    pub method: String,
    pub params: Box<RawValue>,
    pub hops: u8,
}

/// The owner's answer to a JSON-RPC call.
#[derive(Serialize, Deserialize)]
pub enum RpcReply {
    /// The result, and notifications for the caller to write after it.
    Ok { result: Box<RawValue>, deferred: Vec<String> },
    Err { code: i64, message: String, data: Option<serde_json::Value> },
    /// The node no longer holds the lease: ask again.
    NotOwner,
}

#[derive(Serialize, Deserialize)]
pub struct HttpCall {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    #[serde(skip)]
    pub body: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
pub enum HttpReply {
    Ok {
        status: u16,
        headers: Vec<(String, String)>,
        #[serde(skip)]
        body: Vec<u8>,
    },
    /// The plugin failed; the message says how (the caller answers 5xx).
    Failed { code: i64, message: String },
    NotOwner,
}

/// A gRPC status (code and message), as it ends a call.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GrpcEnd {
    pub code: u32,
    pub message: String,
}

const UNAVAILABLE: u32 = 14;
const CANCELLED: u32 = 1;

fn unavailable(message: impl Into<String>) -> GrpcEnd {
    GrpcEnd { code: UNAVAILABLE, message: message.into() }
}

#[derive(Serialize, Deserialize)]
pub struct GrpcOpen {
    pub path: String,
    pub metadata: Vec<(String, String)>,
    pub principal: String,
    pub timeout_ms: Option<u64>,
}

/// One gRPC call's answer: messages, then a status. Dropping `guard` ends
/// the call (the client went away).
pub struct GrpcStream {
    pub messages: mpsc::Receiver<Vec<u8>>,
    pub status: oneshot::Receiver<GrpcEnd>,
    pub guard: Box<dyn Send>,
}

/// What the owner of a singleton runs forwarded calls on: the plugin bound
/// to the tenant on this node.
pub trait Serve: Send + Sync + 'static {
    fn rpc(self: Arc<Self>, call: RpcCall) -> BoxFuture<'static, RpcReply>;
    fn http(self: Arc<Self>, call: HttpCall) -> BoxFuture<'static, HttpReply>;
    /// Start a call; `Err`: refused at once (the status, or `None` when
    /// this node no longer owns the plugin).
    fn grpc(self: Arc<Self>, open: GrpcOpen, requests: mpsc::Receiver<Result<Vec<u8>, GrpcEnd>>) -> Result<GrpcStream, Option<GrpcEnd>>;
}

/// Why a forwarded call got no answer.
#[derive(Debug)]
pub enum Unanswered {
    /// No node served the plugin before the deadline (the lease is moving).
    NoOwner,
    /// The owner took the call but did not answer before the deadline.
    TimedOut,
    Failed(String),
}

static NEXT_RELAY: AtomicU64 = AtomicU64::new(1);

/// This node's side of the singletons' traffic.
pub struct Singletons {
    client: async_nats::Client,
    /// `<name>.sg.`
    prefix: String,
    /// `<name>.sgr.<node>.`: this node's relay inboxes.
    inbox: String,
}

/// The owner's subscriptions for one (tenant, plugin); dropped, they end.
pub struct Served {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Cluster {
    /// The link singleton plugins use to reach their owner.
    pub fn singletons(&self) -> Arc<Singletons> {
        Arc::new(Singletons { client: self.client.clone(), prefix: format!("{}.sg.", self.name), inbox: format!("{}.sgr.{}.", self.name, token(&self.node)) })
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, *v);
    }
    h
}

fn header<'a>(h: Option<&'a HeaderMap>, key: &str) -> Option<&'a str> {
    h?.get(key).map(|v| v.as_str())
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, Unanswered> {
    serde_json::from_slice(bytes).map_err(|e| Unanswered::Failed(format!("an undecodable answer from the owner: {e}")))
}

impl Singletons {
    fn subject(&self, tenant: &str, plugin: &str, kind: &str) -> String {
        format!("{}{}.{}.{kind}", self.prefix, token(tenant), token(plugin))
    }

    /// Serve forwarded calls of (tenant, plugin) with `handler` (this node owns it).
    pub async fn serve(self: &Arc<Self>, tenant: &str, plugin: &str, handler: Arc<dyn Serve>) -> anyhow::Result<Served> {
        let mut tasks = Vec::new();
        let rpc = self.client.queue_subscribe(self.subject(tenant, plugin, "rpc"), "owner".into()).await?;
        let http = self.client.queue_subscribe(self.subject(tenant, plugin, "http"), "owner".into()).await?;
        let grpc = self.client.queue_subscribe(self.subject(tenant, plugin, "grpc"), "owner".into()).await?;
        tasks.push(tokio::spawn(serve_rpc(self.client.clone(), rpc, handler.clone())));
        tasks.push(tokio::spawn(serve_http(self.client.clone(), http, handler.clone())));
        tasks.push(tokio::spawn(serve_grpc(self.clone(), grpc, handler)));
        Ok(Served { tasks })
    }

    /// Ask the owner, again while nobody serves the subject, until `deadline`.
    async fn ask(&self, subject: String, meta: String, body: Bytes, deadline: Instant) -> Result<async_nats::Message, Unanswered> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Unanswered::NoOwner);
            }
            let request = async_nats::Request::new().headers(headers(&[(META, &meta)])).payload(body.clone()).timeout(Some(left));
            match self.client.send_request(subject.clone(), request).await {
                Ok(m) => return Ok(m),
                Err(e) => match e.kind() {
                    async_nats::RequestErrorKind::NoResponders => {}
                    async_nats::RequestErrorKind::TimedOut => return Err(Unanswered::TimedOut),
                    async_nats::RequestErrorKind::Other => return Err(Unanswered::Failed(e.to_string())),
                },
            }
            tokio::time::sleep(RETRY_EVERY.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// A JSON-RPC call on the owner, answered before `deadline`.
    pub async fn rpc(&self, tenant: &str, plugin: &str, call: &RpcCall, deadline: Instant) -> Result<RpcReply, Unanswered> {
        let meta = serde_json::to_string(call).map_err(|e| Unanswered::Failed(e.to_string()))?;
        loop {
            let answer = self.ask(self.subject(tenant, plugin, "rpc"), meta.clone(), Bytes::new(), deadline).await?;
            match decode(&answer.payload)? {
                RpcReply::NotOwner => tokio::time::sleep(RETRY_EVERY).await,
                reply => return Ok(reply),
            }
        }
    }

    /// An HTTP request on the owner, answered before `deadline`.
    pub async fn http(&self, tenant: &str, plugin: &str, call: HttpCall, deadline: Instant) -> Result<HttpReply, Unanswered> {
        let meta = serde_json::to_string(&call).map_err(|e| Unanswered::Failed(e.to_string()))?;
        let body = Bytes::from(call.body);
        loop {
            let answer = self.ask(self.subject(tenant, plugin, "http"), meta.clone(), body.clone(), deadline).await?;
            let meta = header(answer.headers.as_ref(), META).ok_or_else(|| Unanswered::Failed("the owner's answer has no head".into()))?;
            match decode::<HttpReply>(meta.as_bytes())? {
                HttpReply::NotOwner => tokio::time::sleep(RETRY_EVERY).await,
                HttpReply::Ok { status, headers, .. } => return Ok(HttpReply::Ok { status, headers, body: answer.payload.to_vec() }),
                failed => return Ok(failed),
            }
        }
    }

    /// Open a gRPC call on the owner and relay it: `requests` go up, the
    /// answer comes back as a stream. The owner must take it before `deadline`.
    pub async fn grpc(self: &Arc<Self>, tenant: &str, plugin: &str, open: GrpcOpen, requests: mpsc::Receiver<Result<Vec<u8>, GrpcEnd>>, deadline: Instant) -> Result<GrpcStream, GrpcEnd> {
        let inbox = format!("{}{}", self.inbox, NEXT_RELAY.fetch_add(1, Ordering::Relaxed));
        // Subscribed before asking, so nothing the owner sends is missed.
        let down = self.client.subscribe(inbox.clone()).await.map_err(|e| unavailable(format!("the cluster's bus failed: {e}")))?;
        let meta = serde_json::json!({"open": open, "inbox": inbox}).to_string();
        let up = loop {
            let answer = self.ask(self.subject(tenant, plugin, "grpc"), meta.clone(), Bytes::new(), deadline).await.map_err(|e| match e {
                Unanswered::NoOwner => unavailable(format!("no node serves plugin {plugin} now (its owner is changing); try again")),
                Unanswered::TimedOut => unavailable(format!("the node that owns plugin {plugin} did not answer")),
                Unanswered::Failed(m) => unavailable(m),
            })?;
            let opened: Result<String, Option<GrpcEnd>> = serde_json::from_slice(&answer.payload).map_err(|e| unavailable(format!("an undecodable answer from the owner: {e}")))?;
            match opened {
                Ok(up) => break up,
                Err(Some(end)) => return Err(end),
                Err(None) => tokio::time::sleep(RETRY_EVERY).await,
            }
        };
        let (messages_tx, messages) = mpsc::channel(RELAY_QUEUE);
        let (status_tx, status) = oneshot::channel();
        let (gone_tx, gone) = oneshot::channel::<()>();
        tokio::spawn(relay(self.client.clone(), up, down, requests, messages_tx, status_tx, gone));
        Ok(GrpcStream { messages, status, guard: Box::new(gone_tx) })
    }
}

async fn serve_rpc(client: async_nats::Client, mut sub: async_nats::Subscriber, handler: Arc<dyn Serve>) {
    while let Some(m) = sub.next().await {
        let (client, handler) = (client.clone(), handler.clone());
        tokio::spawn(async move {
            let Some(reply) = m.reply.clone() else { return };
            let answer = match header(m.headers.as_ref(), META).map(serde_json::from_str::<RpcCall>) {
                Some(Ok(call)) => handler.rpc(call).await,
                _ => RpcReply::Err { code: -32603, message: "an undecodable forwarded call".into(), data: None },
            };
            let body = serde_json::to_vec(&answer).unwrap_or_default();
            let _ = client.publish(reply, body.into()).await;
        });
    }
}

async fn serve_http(client: async_nats::Client, mut sub: async_nats::Subscriber, handler: Arc<dyn Serve>) {
    while let Some(m) = sub.next().await {
        let (client, handler) = (client.clone(), handler.clone());
        tokio::spawn(async move {
            let Some(reply) = m.reply.clone() else { return };
            let answer = match header(m.headers.as_ref(), META).map(serde_json::from_str::<HttpCall>) {
                Some(Ok(mut call)) => {
                    call.body = m.payload.to_vec();
                    handler.http(call).await
                }
                _ => HttpReply::Failed { code: -32603, message: "an undecodable forwarded request".into() },
            };
            let (meta, body) = match answer {
                HttpReply::Ok { status, headers, body } => (HttpReply::Ok { status, headers, body: Vec::new() }, body),
                other => (other, Vec::new()),
            };
            let meta = serde_json::to_string(&meta).unwrap_or_default();
            let _ = client.publish_with_headers(reply, headers(&[(META, &meta)]), body.into()).await;
        });
    }
}

#[derive(Deserialize)]
struct OpenRequest {
    open: GrpcOpen,
    inbox: String,
}

async fn serve_grpc(link: Arc<Singletons>, mut sub: async_nats::Subscriber, handler: Arc<dyn Serve>) {
    while let Some(m) = sub.next().await {
        let (link, handler) = (link.clone(), handler.clone());
        tokio::spawn(async move {
            let Some(reply) = m.reply.clone() else { return };
            let answer: Result<String, Option<GrpcEnd>> = async {
                let req: OpenRequest = header(m.headers.as_ref(), META)
                    .and_then(|h| serde_json::from_str(h).ok())
                    .ok_or_else(|| Some(GrpcEnd { code: 13, message: "an undecodable forwarded call".into() }))?;
                let inbox = format!("{}{}", link.inbox, NEXT_RELAY.fetch_add(1, Ordering::Relaxed));
                let up = link.client.subscribe(inbox.clone()).await.map_err(|e| Some(unavailable(format!("the cluster's bus failed: {e}"))))?;
                let (requests_tx, requests) = mpsc::channel(4);
                let stream = handler.grpc(req.open, requests)?;
                tokio::spawn(own(link.client.clone(), req.inbox, up, requests_tx, stream));
                Ok(inbox)
            }
            .await;
            let _ = link.client.publish(reply, serde_json::to_vec(&answer).unwrap_or_default().into()).await;
        });
    }
}

/// Numbers what one side of a relayed call sends.
struct Sender {
    client: async_nats::Client,
    to: Subject,
    seq: u64,
}

impl Sender {
    async fn send(&mut self, kind: &str, body: Bytes) -> bool {
        self.seq += 1;
        let seq = self.seq.to_string();
        self.client.publish_with_headers(self.to.clone(), headers(&[(KIND, kind), (SEQ, &seq)]), body).await.is_ok()
    }

    async fn ping(&self) {
        let _ = self.client.publish_with_headers(self.to.clone(), headers(&[(KIND, "ping")]), Bytes::new()).await;
    }
}

/// What one side of a relayed call heard from the other.
enum Heard {
    Message(Bytes),
    HalfClose,
    End(GrpcEnd),
    Cancel,
    /// A message went missing, or the other side fell silent.
    Lost(&'static str),
}

/// Reads the other side's messages in order, answering pings' silence.
struct Receiver {
    sub: async_nats::Subscriber,
    seq: u64,
    heard_at: Instant,
}

impl Receiver {
    fn new(sub: async_nats::Subscriber) -> Receiver {
        Receiver { sub, seq: 0, heard_at: Instant::now() }
    }

    async fn next(&mut self) -> Heard {
        loop {
            let silent_until = self.heard_at + SILENT_AFTER;
            let m = match tokio::time::timeout_at(silent_until, self.sub.next()).await {
                Err(_) => return Heard::Lost("the other node fell silent"),
                Ok(None) => return Heard::Lost("the cluster's bus closed"),
                Ok(Some(m)) => m,
            };
            self.heard_at = Instant::now();
            let kind = header(m.headers.as_ref(), KIND).unwrap_or_default().to_string();
            if kind == "ping" {
                continue;
            }
            let seq: u64 = header(m.headers.as_ref(), SEQ).and_then(|s| s.parse().ok()).unwrap_or(0);
            if seq != self.seq + 1 {
                return Heard::Lost("a relayed message went missing");
            }
            self.seq = seq;
            return match kind.as_str() {
                "msg" => Heard::Message(m.payload),
                "half" => Heard::HalfClose,
                "end" => Heard::End(serde_json::from_slice(&m.payload).unwrap_or_else(|_| unavailable("an undecodable status"))),
                "cancel" => Heard::Cancel,
                _ => Heard::Lost("an unknown relay message"),
            };
        }
    }
}

/// The relaying node's side: the client's messages go up, the owner's come down.
async fn relay(
    client: async_nats::Client,
    up: String,
    down: async_nats::Subscriber,
    mut requests: mpsc::Receiver<Result<Vec<u8>, GrpcEnd>>,
    messages: mpsc::Sender<Vec<u8>>,
    status: oneshot::Sender<GrpcEnd>,
    mut gone: oneshot::Receiver<()>,
) {
    let mut out = Sender { client, to: Subject::from(up), seq: 0 };
    let mut input = Receiver::new(down);
    let mut ping = tokio::time::interval(PING_EVERY);
    let mut half_closed = false;
    let end = loop {
        tokio::select! {
            _ = &mut gone => {
                out.send("cancel", Bytes::new()).await;
                return;
            }
            _ = ping.tick() => out.ping().await,
            next = requests.recv(), if !half_closed => match next {
                Some(Ok(body)) => { out.send("msg", body.into()).await; }
                Some(Err(e)) => {
                    out.send("cancel", Bytes::new()).await;
                    break e;
                }
                None => {
                    half_closed = true;
                    out.send("half", Bytes::new()).await;
                }
            },
            heard = input.next() => match heard {
                Heard::Message(body) => {
                    // A client that reads slowly holds up this call only.
                    if messages.send(body.to_vec()).await.is_err() {
                        out.send("cancel", Bytes::new()).await;
                        return;
                    }
                }
                Heard::End(end) => break end,
                Heard::Lost(why) => {
                    out.send("cancel", Bytes::new()).await;
                    break unavailable(format!("the call's relay to the plugin's owner broke ({why}); reconnect"));
                }
                Heard::HalfClose | Heard::Cancel => break unavailable("the plugin's owner ended the call; reconnect"),
            },
        }
    };
    let _ = status.send(end);
}

/// The owner's side: the plugin's messages and status go down, the client's come up.
async fn own(client: async_nats::Client, down: String, up: async_nats::Subscriber, requests: mpsc::Sender<Result<Vec<u8>, GrpcEnd>>, stream: GrpcStream) {
    let GrpcStream { mut messages, mut status, guard } = stream;
    let mut out = Sender { client, to: Subject::from(down), seq: 0 };
    let mut input = Receiver::new(up);
    let mut ping = tokio::time::interval(PING_EVERY);
    let mut requests = Some(requests);
    let mut messages_done = false;
    loop {
        tokio::select! {
            _ = ping.tick() => out.ping().await,
            m = messages.recv(), if !messages_done => match m {
                Some(body) => { out.send("msg", body.into()).await; }
                None => messages_done = true,
            },
            // The status follows every message queued before it.
            s = &mut status, if messages_done => {
                let end = s.unwrap_or_else(|_| unavailable("the plugin call ended without a status"));
                out.send("end", serde_json::to_vec(&end).unwrap_or_default().into()).await;
                break;
            }
            heard = input.next() => match heard {
                Heard::Message(body) => {
                    if let Some(tx) = &requests {
                        let _ = tx.send(Ok(body.to_vec())).await;
                    }
                }
                Heard::HalfClose => requests = None,
                Heard::Cancel | Heard::Lost(_) | Heard::End(_) => {
                    if let Some(tx) = requests.take() {
                        let _ = tx.send(Err(GrpcEnd { code: CANCELLED, message: "the client went away".into() })).await;
                    }
                    break;
                }
            },
        }
    }
    drop(guard);
}
