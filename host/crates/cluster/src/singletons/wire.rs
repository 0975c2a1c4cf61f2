//! What crosses the bus between a singleton's owner and the other nodes:
//! forwarded calls and their answers (JSON in a header, bodies as the
//! payload), and the trait the owner serves them with.

use std::sync::Arc;

use async_nats::HeaderMap;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

pub(super) const META: &str = "Map-Meta";
pub(super) const KIND: &str = "Map-Kind";
pub(super) const SEQ: &str = "Map-Seq";

/// Who made a forwarded call: the session's identity, and its agents and
/// capabilities as its own node knows them now (the owner's mirror of the
/// directory may not have caught up with a registration just made).
#[derive(Clone, Serialize, Deserialize)]
pub struct Caller {
    pub session_id: String,
    pub participant_id: String,
    pub participant_type: String,
    pub principal: String,
    pub agent_ids: Vec<String>,
    /// JSON text.
    pub capabilities: String,
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
    Ok {
        result: Box<RawValue>,
        deferred: Vec<String>,
    },
    Err {
        code: i64,
        message: String,
        data: Option<serde_json::Value>,
    },
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
    Failed {
        code: i64,
        message: String,
    },
    NotOwner,
}

/// A gRPC status (code and message), as it ends a call.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GrpcEnd {
    pub code: u32,
    pub message: String,
}

pub(super) const UNAVAILABLE: u32 = 14;
pub(super) const CANCELLED: u32 = 1;

pub(super) fn unavailable(message: impl Into<String>) -> GrpcEnd {
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

pub(super) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, *v);
    }
    h
}

pub(super) fn header<'a>(h: Option<&'a HeaderMap>, key: &str) -> Option<&'a str> {
    h?.get(key).map(|v| v.as_str())
}
