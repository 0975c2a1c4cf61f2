//! MAP core: sessions, agents, scopes, addressing, events, subscriptions and
//! replay, behind one entry point (`Gateway::handle_frame`) that every
//! transport calls.

pub mod address;
pub mod events;
pub mod fabric;
pub mod ids;
pub mod model;
pub mod outbox;
pub mod registry;

mod lifecycle;
mod methods;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::rpc::{self, codes, Decoded, Request, RpcError};
use crate::tenants::{Tenant, Tenants};
use outbox::{Frame, Outbox};

pub const PROTOCOL_VERSION: u64 = 1;

/// A method's successful result: a JSON value, or JSON text built directly.
pub enum Out {
    Json(Value),
    Raw(Box<RawValue>),
}

impl From<Value> for Out {
    fn from(v: Value) -> Out {
        Out::Json(v)
    }
}

/// A live session as the gateway (not one tenant) sees it: for resume, for
/// HTTP requests naming it, and for expiry.
#[derive(Clone)]
pub struct Live {
    pub tenant: Arc<Tenant>,
    pub outbox: Arc<Outbox>,
    /// Bumped on every attach, so a stale expiry timer does nothing.
    pub generation: Arc<AtomicU64>,
    pub resume_token: String,
    pub participant_id: String,
    pub participant_type: String,
}

pub struct Gateway {
    pub config: Config,
    pub tenants: Tenants,
    sessions: Mutex<HashMap<String, Live>>,
    /// resume token → session id
    resume_tokens: Mutex<HashMap<String, String>>,
}

/// What a transport connection is bound to.
pub enum ConnState {
    /// Before `map/connect`.
    Fresh,
    /// Connected, but credentials are required and not yet given.
    Pending(Box<methods::session::ConnectParams>, String),
    Active(Active),
}

/// The session a connection speaks for.
#[derive(Clone)]
pub struct Active {
    pub tenant: Arc<Tenant>,
    pub session_id: String,
    pub participant_id: String,
    pub participant_type: String,
    pub outbox: Arc<Outbox>,
}

/// One transport connection (a WebSocket, the stdio pair, or one HTTP request).
pub struct Conn {
    /// This connection's writer.
    pub tx: mpsc::Sender<Frame>,
    /// The peer is on this host (anonymous access may be allowed).
    pub loopback: bool,
    pub transport: &'static str,
    /// Credentials given by the transport (HTTP `Authorization` or `X-Api-Key`).
    pub preset_auth: Option<(String, String)>,
    pub state: ConnState,
}

impl Conn {
    pub fn new(tx: mpsc::Sender<Frame>, loopback: bool, transport: &'static str) -> Conn {
        Conn { tx, loopback, transport, preset_auth: None, state: ConnState::Fresh }
    }

    pub fn active(&self) -> Result<&Active, RpcError> {
        match &self.state {
            ConnState::Active(a) => Ok(a),
            ConnState::Pending(..) => Err(RpcError::new(codes::AUTH_REQUIRED, "Authentication required: call map/authenticate")),
            ConnState::Fresh => Err(RpcError::new(codes::AUTH_REQUIRED, "Not connected: call map/connect first")),
        }
    }
}

impl Gateway {
    pub fn new(config: Config) -> Arc<Gateway> {
        let tenants = Tenants::from_config(&config);
        Arc::new(Gateway { config, tenants, sessions: Mutex::new(HashMap::new()), resume_tokens: Mutex::new(HashMap::new()) })
    }

    pub fn live(&self, session_id: &str) -> Option<Live> {
        self.sessions.lock().get(session_id).cloned()
    }

    /// Handle one frame; the returned text (if any) is the frame to answer with.
    pub fn handle_frame(self: &Arc<Self>, conn: &mut Conn, bytes: &[u8]) -> Option<String> {
        if bytes.len() > self.config.server.max_message_bytes {
            let err = RpcError::invalid_request(format!(
                "Invalid Request: message of {} bytes exceeds the limit of {} bytes",
                bytes.len(),
                self.config.server.max_message_bytes
            ));
            return Some(rpc::encode_error(&Value::Null, &err));
        }
        match rpc::decode_frame(bytes) {
            Decoded::Single(Ok(req)) => self.handle(conn, req),
            Decoded::Single(Err((id, err))) => Some(rpc::encode_error(&id, &err)),
            Decoded::Invalid(err) => Some(rpc::encode_error(&Value::Null, &err)),
            Decoded::Ignored => None,
            Decoded::Batch(items) => {
                let answers: Vec<String> = items
                    .into_iter()
                    .filter_map(|item| match item {
                        Ok(req) => self.handle(conn, req),
                        Err((id, err)) => Some(rpc::encode_error(&id, &err)),
                    })
                    .collect();
                (!answers.is_empty()).then(|| format!("[{}]", answers.join(",")))
            }
        }
    }

    /// Handle one request; notifications get no answer.
    pub fn handle(self: &Arc<Self>, conn: &mut Conn, req: Request) -> Option<String> {
        let result = methods::dispatch(self, conn, &req);
        let id = req.id?;
        Some(match result {
            Ok(Out::Json(v)) => rpc::encode_result(&id, &v),
            Ok(Out::Raw(raw)) => rpc::encode_result(&id, &raw),
            Err(e) => rpc::encode_error(&id, &e),
        })
    }
}
