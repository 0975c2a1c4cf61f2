//! The gateway: its tenants, its live sessions, readiness and graceful
//! stop, and the request path every transport calls (`start_frame`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::Value;

use crate::answers::{answer, record, record_code};
use crate::conn::is_auth_failure;
use crate::extensions::ExtensionHost;
use crate::outbox::Frame;
use crate::{agent_permissions, auth_expiry, drain, fabric, methods, reloads, tenant};
use crate::{Active, Authenticated, Conn, Handled, Out, Tenant, Tenants};
use map_config::Config;
use map_protocol::rpc::{self, Decoded, Request, RpcError};

/// A session live in this process, as the gateway (not one tenant) sees
/// it: for resume, for HTTP requests naming it, and for expiry. A
/// connection bound to it holds a copy of `session`.
#[derive(Clone)]
pub struct Live {
    /// Who the session is. An HTTP request or event stream naming it must
    /// come from the same tenant and principal.
    pub session: Active,
    /// Bumped on every attach, so a stale expiry timer does nothing.
    pub generation: Arc<AtomicU64>,
    pub resume_token: String,
    /// The client said `map/disconnect`: the session id no longer admits
    /// HTTP requests or event streams (its resume token still resumes it).
    pub disconnected: Arc<AtomicBool>,
    /// When its credential expires, and the `map/auth/expiring` timer.
    pub expiry: Arc<auth_expiry::Expiry>,
}

pub struct Gateway {
    pub config: Config,
    pub tenants: Tenants,
    /// What loads extensions (the plugin host); none in a bare core.
    pub extensions: Option<Arc<dyn ExtensionHost>>,
    /// The file `config` came from, re-read on reload.
    pub(crate) config_path: Option<PathBuf>,
    pub(crate) sessions: Mutex<HashMap<String, Live>>,
    /// resume token → session id
    pub(crate) resume_tokens: Mutex<HashMap<String, String>>,
    /// Graceful shutdown: connections watch it, the process waits on it.
    pub drain: Arc<drain::Drain>,
    /// What to do last at a graceful stop (write the event log, say).
    pub(crate) finally: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    /// What else must hold for `/readyz` (the cluster's link, say): each says what is wrong.
    pub(crate) readiness: Mutex<Vec<ReadyCheck>>,
    /// Reloads running, queued and recent.
    pub(crate) reloads: reloads::Reloads,
}

/// Says what keeps the gateway from serving, if anything.
type ReadyCheck = Box<dyn Fn() -> Option<String> + Send + Sync>;

impl Gateway {
    /// The configured tenants, each a fresh wall.
    pub fn tenants_of(config: &Config) -> anyhow::Result<Tenants> {
        let tenants = Tenants::from_config(config, |t| Tenant::new(&t.id, &config.limits))?;
        tenant::Brokers::build(config)?.install(&tenants);
        agent_permissions::Policies::build(config)?.install(&tenants);
        Ok(tenants)
    }

    /// The configured tenants, each with the fabric `fabric_for(id)` makes.
    pub fn tenants_with(config: &Config, fabric_for: impl FnMut(&str) -> Arc<dyn fabric::Fabric>) -> anyhow::Result<Tenants> {
        let fabric_for = std::cell::RefCell::new(fabric_for);
        let tenants = Tenants::from_config(config, |t| Tenant::with_fabric(&t.id, (fabric_for.borrow_mut())(&t.id)))?;
        tenant::Brokers::build(config)?.install(&tenants);
        agent_permissions::Policies::build(config)?.install(&tenants);
        Ok(tenants)
    }

    /// A core without extensions.
    pub fn new(config: Config) -> Arc<Gateway> {
        let tenants = Gateway::tenants_of(&config).expect("a valid configuration");
        Arc::new(Gateway::assemble(config, tenants, None, None))
    }

    /// A core whose tenants already hold what `extensions` gave them.
    pub fn assemble(config: Config, tenants: Tenants, extensions: Option<Arc<dyn ExtensionHost>>, config_path: Option<PathBuf>) -> Gateway {
        for tenant in tenants.all() {
            tenant.set_workspace_config(config.workspace.clone());
        }
        Gateway {
            config,
            tenants,
            extensions,
            config_path,
            sessions: Mutex::new(HashMap::new()),
            resume_tokens: Mutex::new(HashMap::new()),
            drain: drain::Drain::new(),
            finally: Mutex::new(Vec::new()),
            readiness: Mutex::new(Vec::new()),
            reloads: Default::default(),
        }
    }

    /// Run `f` at a graceful stop, after the connections have drained.
    pub fn at_stop(&self, f: impl FnOnce() + Send + 'static) {
        self.finally.lock().push(Box::new(f));
    }

    /// Another condition of readiness: `check` says what is wrong, if anything.
    pub fn ready_when(&self, check: impl Fn() -> Option<String> + Send + Sync + 'static) {
        self.readiness.lock().push(Box::new(check));
    }

    /// What keeps the gateway from serving, by the conditions added with `ready_when`.
    pub fn not_ready(&self) -> Vec<String> {
        self.readiness.lock().iter().filter_map(|check| check()).collect()
    }

    /// The graceful stop's last steps, in the order they were added.
    pub fn stopped(&self) {
        for f in std::mem::take(&mut *self.finally.lock()) {
            f();
        }
    }

    /// Check a credential from a source address: failures count against
    /// the address, and an address over its limit is refused before the
    /// credential is even looked at.
    pub fn check_credential(&self, peer: Option<IpAddr>, method: &str, secret: Option<&str>) -> Result<Authenticated, RpcError> {
        if let Some(ip) = peer {
            self.tenants.throttle.check(ip)?;
        }
        let result = self.tenants.authenticate(method, secret);
        if let (true, Some(ip)) = (is_auth_failure(&result), peer) {
            self.tenants.throttle.failed(ip);
        }
        result
    }

    /// `check_credential` for a connection, whose failures are counted too.
    pub fn authenticate(&self, conn: &mut Conn, method: &str, secret: Option<&str>) -> Result<Authenticated, RpcError> {
        let result = self.check_credential(conn.peer_ip, method, secret);
        if is_auth_failure(&result) {
            conn.auth_failures += 1;
        }
        result
    }

    /// The connection made too many failed attempts and should be closed.
    pub fn too_many_failures(&self, conn: &Conn) -> bool {
        conn.auth_failures >= self.config.auth.failures_per_connection.max(1)
    }

    pub fn live(&self, session_id: &str) -> Option<Live> {
        self.sessions.lock().get(session_id).cloned()
    }

    /// Handle one frame and wait for its answer (none for a notification).
    /// Notifications a plugin sent for a call are left in `conn.deferred`,
    /// to be written after the answer.
    pub async fn handle_frame(self: &Arc<Self>, conn: &mut Conn, bytes: &[u8]) -> Option<String> {
        let handled = self.start_frame(conn, bytes).await;
        settle(conn, handled).await
    }

    /// The one request path: size check, decode, then each request to the
    /// core or to the tenant's extension. For transports that let requests
    /// overlap, a single call still running after its first slice (waiting
    /// for storage, say) comes back as `Later`, to be answered when it
    /// finishes while the connection reads on. Batches are answered whole,
    /// their requests in order.
    pub async fn start_frame(self: &Arc<Self>, conn: &mut Conn, bytes: &[u8]) -> Handled {
        let limit = self.config.server.max_message_bytes;
        if bytes.len() > limit {
            let err = RpcError::invalid_request(format!("Invalid Request: message of {} bytes exceeds the limit of {limit} bytes", bytes.len()));
            return Handled::Now(Some(rpc::encode_error(&Value::Null, &err)));
        }
        match rpc::decode_frame(bytes) {
            Decoded::Single(Ok(req)) => self.start(conn, req),
            Decoded::Single(Err((id, err))) => Handled::Now(Some(rpc::encode_error(&id, &err))),
            Decoded::Invalid(err) => Handled::Now(Some(rpc::encode_error(&Value::Null, &err))),
            Decoded::Ignored => {
                // A response: perhaps a participant answering the gateway (`asks`).
                if let Ok(active) = conn.active() {
                    active.tenant.asks.answered(&active.session_id, bytes);
                }
                Handled::Now(None)
            }
            // Boxed: every idle connection holds this future's room, sized for its largest state.
            Decoded::Batch(items) => Box::pin(self.batch(conn, items)).await,
        }
    }

    /// A batch: its requests one after another, their answers in one array.
    async fn batch(self: &Arc<Self>, conn: &mut Conn, items: Vec<Result<Request<'_>, (Value, RpcError)>>) -> Handled {
        let mut answers = Vec::with_capacity(items.len());
        for item in items {
            let answer = match item {
                Ok(req) => {
                    let handled = self.start(conn, req);
                    settle(conn, handled).await
                }
                Err((id, err)) => Some(rpc::encode_error(&id, &err)),
            };
            answers.extend(answer);
        }
        Handled::Now((!answers.is_empty()).then(|| format!("[{}]", answers.join(","))))
    }

    /// Start one request: a core method, else the extension that serves it.
    fn start(self: &Arc<Self>, conn: &mut Conn, req: Request<'_>) -> Handled {
        let started = Instant::now();
        let span = conn.request_span(&req.method);
        match span.in_scope(|| methods::dispatch(self, conn, &req)) {
            Some(Ok(Out::Later(result))) => {
                let (id, method, in_span) = (req.id, req.method.into_owned(), span.clone());
                let call = async move {
                    let result = result.await;
                    record(&method, &result, started, &span);
                    (answer(id, result), Vec::new())
                };
                Handled::Later(Box::pin(tracing::Instrument::instrument(call, in_span)))
            }
            Some(result) => {
                record(&req.method, &result, started, &span);
                Handled::Now(answer(req.id, result))
            }
            None => self.start_extension(conn, req, started, span),
        }
    }

    fn start_extension(&self, conn: &mut Conn, req: Request<'_>, started: Instant, span: tracing::Span) -> Handled {
        let (active, params) = match extension_target(conn, &req) {
            Ok((active, params)) => (active.clone(), params.to_string()),
            Err(e) => {
                let result = Err(e);
                record(&req.method, &result, started, &span);
                return Handled::Now(answer(req.id, result));
            }
        };
        let (id, method) = (req.id, req.method.into_owned());
        let in_span = span.clone();
        let call = async move {
            let result = active.tenant.extensions().call(&active, &method, params).await;
            record_code(&method, result.as_ref().err().map_or(0, |e| e.code), started, &span);
            match result {
                Ok((result, deferred)) => (answer(id, Ok(Out::Raw(result))), deferred),
                Err(e) => (answer(id, Err(e)), Vec::new()),
            }
        };
        let mut call: BoxFuture<'static, (Option<String>, Vec<Frame>)> = Box::pin(tracing::Instrument::instrument(call, in_span));
        match futures_util::FutureExt::now_or_never(&mut call) {
            Some((answer, deferred)) => {
                conn.deferred.extend(deferred);
                Handled::Now(answer)
            }
            None => Handled::Later(call),
        }
    }
}

/// Wait for a started request's answer; its deferred notifications go to `conn`.
async fn settle(conn: &mut Conn, handled: Handled) -> Option<String> {
    match handled {
        Handled::Now(answer) => answer,
        Handled::Later(call) => {
            let (answer, deferred) = call.await;
            conn.deferred.extend(deferred);
            answer
        }
    }
}

/// The session an extension method is called for, and its params as an
/// object's text; unknown methods and positional params are refused.
fn extension_target<'c, 'b>(conn: &'c Conn, req: &Request<'b>) -> Result<(&'c Active, &'b str), RpcError> {
    let not_found = || RpcError::method_not_found(&req.method);
    let active = conn.active().map_err(|_| not_found())?;
    if !active.tenant.extensions().serves(&req.method) {
        return Err(not_found());
    }
    let params = match &req.params {
        Some(raw) if raw.get().starts_with('[') => return Err(RpcError::invalid_params("Extension methods take named params (an object)")),
        Some(raw) if raw.get() != "null" => raw.get(),
        _ => "{}",
    };
    Ok((active, params))
}
