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

mod relay;
mod wire;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::wire::{header, headers, unavailable, META};
pub use self::wire::{Caller, GrpcEnd, GrpcOpen, GrpcStream, HttpCall, HttpReply, RpcCall, RpcReply, Serve, Unanswered};
use super::{token, Cluster};

/// Pause before asking again when no node serves the plugin.
const RETRY_EVERY: Duration = Duration::from_millis(100);

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
    pub async fn grpc(
        self: &Arc<Self>,
        tenant: &str,
        plugin: &str,
        open: GrpcOpen,
        requests: mpsc::Receiver<Result<Vec<u8>, GrpcEnd>>,
        deadline: Instant,
    ) -> Result<GrpcStream, GrpcEnd> {
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
            let opened: Result<String, Option<GrpcEnd>> =
                serde_json::from_slice(&answer.payload).map_err(|e| unavailable(format!("an undecodable answer from the owner: {e}")))?;
            match opened {
                Ok(up) => break up,
                Err(Some(end)) => return Err(end),
                Err(None) => tokio::time::sleep(RETRY_EVERY).await,
            }
        };
        let (messages_tx, messages) = mpsc::channel(relay::RELAY_QUEUE);
        let (status_tx, status) = oneshot::channel();
        let (gone_tx, gone) = oneshot::channel::<()>();
        tokio::spawn(relay::relay(self.client.clone(), up, down, requests, messages_tx, status_tx, gone));
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
                tokio::spawn(relay::own(link.client.clone(), req.inbox, up, requests_tx, stream));
                Ok(inbox)
            }
            .await;
            let _ = link.client.publish(reply, serde_json::to_vec(&answer).unwrap_or_default().into()).await;
        });
    }
}
