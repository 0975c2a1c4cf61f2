//! One transport connection and the session it speaks for: its state
//! (fresh, owing credentials, active), its writer, and what a method answers.

use std::net::IpAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::outbox::{Frame, FrameTx, Outbox};
use crate::{model, registry, Tenant};
use map_protocol::rpc::{codes, RpcError};

/// The MAP protocol version this core speaks (`map/connect`).
pub const PROTOCOL_VERSION: u64 = 1;

/// A method's successful result: a JSON value, or JSON text built directly.
pub enum Out {
    Json(Value),
    Raw(Box<RawValue>),
    /// JSON text the core wrote itself (trusted, not re-validated).
    Text(String),
    /// The answer once something elsewhere has (another cluster node took a
    /// message, say); the connection reads on meanwhile.
    Later(BoxFuture<'static, Result<Out, RpcError>>),
}

impl From<Value> for Out {
    fn from(v: Value) -> Out {
        Out::Json(v)
    }
}

/// What a transport connection is bound to.
pub enum ConnState {
    /// Before `map/connect`.
    Fresh,
    /// Connected, but credentials are required and not yet given.
    Pending(Box<model::ConnectParams>, String),
    Active(Active),
}

/// The session a connection speaks for.
#[derive(Clone)]
pub struct Active {
    pub tenant: Arc<Tenant>,
    pub session_id: String,
    pub participant_id: String,
    pub participant_type: String,
    pub principal: Arc<str>,
    pub outbox: Arc<Outbox>,
}

/// One transport connection (a WebSocket, the stdio pair, or one HTTP request).
pub struct Conn {
    /// This connection's writer.
    pub tx: FrameTx,
    /// The peer is on this host (anonymous access may be allowed).
    pub loopback: bool,
    /// The peer's address, for throttling failed authentications.
    pub peer_ip: Option<IpAddr>,
    /// Failed authentications on this connection so far.
    pub auth_failures: u32,
    pub transport: &'static str,
    /// Credentials given by the transport (HTTP `Authorization` or `X-Api-Key`).
    pub preset_auth: Option<(String, String)>,
    /// Notifications can be written to this connection (not so for one HTTP
    /// request: its session's frames wait for an event stream).
    pub streams: bool,
    pub state: ConnState,
    /// The session this connection left with `map/disconnect`: the SDK's
    /// clients unsubscribe after saying goodbye, and that still works.
    pub left: Option<Active>,
    /// Notifications to write right after the current answer (a plugin's to its caller).
    pub deferred: Vec<Frame>,
    /// W3C `traceparent` and `tracestate` of the HTTP request being handled.
    pub trace_parent: Option<(String, Option<String>)>,
}

/// A credential was refused (as opposed to malformed or throttled).
pub(crate) fn is_auth_failure<T>(result: &Result<T, RpcError>) -> bool {
    result.as_ref().is_err_and(|e| matches!(e.code, codes::AUTH_FAILED | codes::TOKEN_EXPIRED))
}

impl Active {
    /// This session as a viewer of agents.
    pub fn viewer(&self) -> registry::Viewer<'_> {
        registry::Viewer { session: &self.session_id, participant_type: &self.participant_type }
    }
}

impl Conn {
    pub fn new(tx: FrameTx, loopback: bool, transport: &'static str) -> Conn {
        Conn {
            tx,
            loopback,
            peer_ip: None,
            auth_failures: 0,
            transport,
            preset_auth: None,
            streams: true,
            state: ConnState::Fresh,
            left: None,
            deferred: Vec::new(),
            trace_parent: None,
        }
    }

    /// The span of one request on this connection (disabled unless traces are on).
    pub(crate) fn request_span(&self, method: &str) -> tracing::Span {
        let tenant = match &self.state {
            ConnState::Active(a) => a.tenant.id.as_str(),
            _ => "",
        };
        let (parent, state) = match &self.trace_parent {
            Some((parent, state)) => (Some(parent.as_str()), state.as_deref()),
            None => (None, None),
        };
        map_observe::telemetry::request(method, tenant, parent, state)
    }

    pub fn active(&self) -> Result<&Active, RpcError> {
        match &self.state {
            ConnState::Active(a) => Ok(a),
            ConnState::Pending(..) => Err(RpcError::new(codes::AUTH_REQUIRED, "Authentication required: call map/authenticate")),
            ConnState::Fresh => Err(RpcError::new(codes::AUTH_REQUIRED, "Not connected: call map/connect first")),
        }
    }
}

/// What a transport that lets requests overlap gets for one frame.
pub enum Handled {
    /// The answer (none for a notification), in order.
    Now(Option<String>),
    /// A call still running: its answer, and notifications to write after it.
    Later(BoxFuture<'static, (Option<String>, Vec<Frame>)>),
}
