//! A singleton plugin in a cluster runs on one node: the holder of its
//! lease (`ownership`). On that node it starts (`init`), arms its stored
//! timers and serves calls forwarded by the others; on every other node
//! its calls (JSON-RPC, HTTP, gRPC) are forwarded there over the cluster's
//! bus (`cluster::singletons`) and answered as if made on the owner.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::TenantPlugin;
use crate::bindings::Caller;
use crate::exports::{HttpRequest, HttpResponse};
use crate::grpc_calls::{code, status, Requests, Response};
use crate::ownership::Ownership;
use map_cluster::singletons::{self, GrpcEnd, GrpcOpen, GrpcStream, HttpCall, HttpReply, RpcCall, RpcReply, Serve, Singletons, Unanswered};
use map_core::outbox::{Frame, Outbox};
use map_core::Active;
use map_protocol::rpc::{codes, RpcError};

/// Extra time a forwarded call may take over the plugin's own deadline (the hops between nodes).
const FORWARDING: Duration = Duration::from_millis(500);

/// Longest wait for the directory mirror to show a forwarded caller's agents.
const MIRROR_WAIT: Duration = Duration::from_secs(1);

/// Notifications a forwarded call may send its caller (written after the answer, on the caller's node).
const FORWARDED_NOTIFICATIONS: usize = 256;

/// Where a cluster singleton runs, and the way to it.
pub struct Placement {
    pub ownership: Arc<Ownership>,
    pub link: Arc<Singletons>,
}

impl TenantPlugin {
    /// The way to the owner, when another node runs this plugin.
    pub(super) fn elsewhere(&self) -> Option<&Placement> {
        self.placement.as_ref().filter(|p| !p.ownership.held())
    }

    /// The lease, for the operator (`None` unless a cluster singleton).
    pub(super) fn lease_view(&self) -> Option<serde_json::Value> {
        self.placement.as_ref().map(|p| p.ownership.view())
    }

    fn forward_deadline(&self) -> Instant {
        Instant::now() + self.plugin.limits.deadline + FORWARDING
    }

    fn unanswered(&self, e: Unanswered) -> RpcError {
        match e {
            Unanswered::NoOwner => {
                let retry = self.placement.as_ref().map_or(1000, |p| p.ownership.ttl().as_millis() as u64 / 4);
                RpcError::new(
                    codes::RESOURCE_EXHAUSTED,
                    format!("Plugin {} cannot take the call now: no node runs it (its owner is changing); try again later", self.plugin.name),
                )
                .with_data(json!({"retryAfterMs": retry, "plugin": self.plugin.name}))
            }
            Unanswered::TimedOut => self.failure(format!("timed out after {} ms on the node that runs it", self.plugin.limits.deadline.as_millis())),
            Unanswered::Failed(why) => self.failure(format!("could not be reached on the node that runs it: {why}")),
        }
    }

    pub(super) async fn forward_rpc(
        &self,
        to: &Placement,
        active: &Active,
        caller: Caller,
        method: &str,
        params: String,
        hops: u8,
    ) -> Result<(Box<RawValue>, Vec<Frame>), RpcError> {
        let params = RawValue::from_string(params).map_err(|e| RpcError::invalid_params(e.to_string()))?;
        let caller = singletons::Caller {
            session_id: active.session_id.clone(),
            participant_id: active.participant_id.clone(),
            participant_type: active.participant_type.clone(),
            principal: active.principal.to_string(),
            agent_ids: caller.agent_ids,
            capabilities: caller.capabilities,
        };
        let call = RpcCall { caller, method: method.to_string(), params, hops };
        match to.link.rpc(&self.ctx.scope.tenant, &self.plugin.name, &call, self.forward_deadline()).await {
            Ok(RpcReply::Ok { result, deferred }) => Ok((result, deferred.into_iter().map(Frame::from).collect())),
            Ok(RpcReply::Err { code, message, data }) => Err(RpcError { code, message, data }),
            Ok(RpcReply::NotOwner) => Err(self.unanswered(Unanswered::NoOwner)),
            Err(e) => Err(self.unanswered(e)),
        }
    }

    pub(super) async fn forward_http(&self, to: &Placement, req: HttpRequest) -> Result<HttpResponse, RpcError> {
        let call = HttpCall { method: req.method, path: req.path, query: req.query, headers: req.headers, body: req.body };
        match to.link.http(&self.ctx.scope.tenant, &self.plugin.name, call, self.forward_deadline()).await {
            Ok(HttpReply::Ok { status, headers, body }) => Ok(HttpResponse { status, headers, body }),
            Ok(HttpReply::Failed { code, message }) => Err(RpcError::new(code, message)),
            Ok(HttpReply::NotOwner) => Err(self.unanswered(Unanswered::NoOwner)),
            Err(e) => Err(self.unanswered(e)),
        }
    }

    /// Relay a gRPC call to the owner; a refusal is the call's status.
    pub(super) async fn relay_grpc(&self, to: &Placement, open: GrpcOpen, requests: Requests) -> Response {
        let requests = relayed_requests(requests);
        match to.link.grpc(&self.ctx.scope.tenant, &self.plugin.name, open, requests, self.forward_deadline()).await {
            Ok(stream) => {
                Response { messages: stream.messages, status: map_status(stream.status, |e| status(e.code, e.message)), guard: stream.guard, drive: None }
            }
            Err(end) => {
                let (_, messages) = mpsc::channel(1);
                let (tx, rx) = oneshot::channel();
                let _ = tx.send(status(end.code, end.message));
                Response { messages, status: rx, guard: Box::new(()), drive: None }
            }
        }
    }

    /// The plugin on this node, as the owner, for a forwarded caller.
    fn forwarded_actor(&self, c: singletons::Caller) -> Active {
        Active {
            tenant: self.ctx.tenant.clone(),
            session_id: c.session_id,
            participant_id: c.participant_id,
            participant_type: c.participant_type,
            principal: c.principal.into(),
            // Holds nothing: the caller's node writes the notifications it gets back.
            outbox: Arc::new(Outbox::new(FORWARDED_NOTIFICATIONS, self.ctx.host_bytes)),
        }
    }

    /// Wait (briefly) until this node's mirror of the directory holds the
    /// caller's agents as the caller's node saw them: what the plugin does
    /// as the caller (router calls, events it emits) then sees them too.
    async fn catch_up(&self, caller: &singletons::Caller) {
        let deadline = Instant::now() + MIRROR_WAIT;
        loop {
            let current = {
                let reg = self.ctx.tenant.registry.lock();
                reg.sessions.get(&caller.session_id).is_some_and(|s| caller.agent_ids.iter().all(|a| s.agents.contains(a)))
            };
            if current || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// This version no longer takes forwarded calls (replaced, or the lease moved).
    fn serves_forwarded(&self) -> bool {
        !self.retired.load(Ordering::Acquire) && self.placement.as_ref().is_some_and(|p| p.ownership.held())
    }
}

/// Request messages read ahead of the owner node, per relayed call.
const RELAY_READ_AHEAD: usize = 4;

/// A client's request messages, read on this node for the owner node.
fn relayed_requests(mut requests: Requests) -> mpsc::Receiver<Result<Vec<u8>, GrpcEnd>> {
    let (tx, out) = mpsc::channel(RELAY_READ_AHEAD);
    tokio::spawn(async move {
        while let Some(item) = requests.next().await {
            let stop = item.is_err();
            if tx.send(item.map_err(|s| GrpcEnd { code: s.code, message: s.message })).await.is_err() || stop {
                break;
            }
        }
    });
    out
}

/// Request messages relayed from the caller's node, as a call's stream.
fn forwarded_requests(requests: mpsc::Receiver<Result<Vec<u8>, GrpcEnd>>) -> Requests {
    Box::pin(futures_util::stream::unfold(requests, |mut rx| async move { rx.recv().await.map(|item| (item.map_err(|e| status(e.code, e.message)), rx)) }))
}

fn map_status<A: Send + 'static, B: Send + 'static>(rx: oneshot::Receiver<A>, f: fn(A) -> B) -> oneshot::Receiver<B> {
    let (tx, out) = oneshot::channel();
    tokio::spawn(async move {
        if let Ok(a) = rx.await {
            let _ = tx.send(f(a));
        }
    });
    out
}

impl Serve for TenantPlugin {
    fn rpc(self: Arc<Self>, call: RpcCall) -> BoxFuture<'static, RpcReply> {
        Box::pin(async move {
            if !self.serves_forwarded() {
                return RpcReply::NotOwner;
            }
            // The caller record as the caller's node made it (its agents are current there).
            let caller = Caller {
                tenant: self.ctx.scope.tenant.clone(),
                participant_id: call.caller.participant_id.clone(),
                participant_type: call.caller.participant_type.clone(),
                session_id: call.caller.session_id.clone(),
                agent_ids: call.caller.agent_ids.clone(),
                capabilities: call.caller.capabilities.clone(),
            };
            self.catch_up(&call.caller).await;
            let active = self.forwarded_actor(call.caller);
            let answer = match call.method.starts_with(super::RESOURCES_PREFIX) {
                true => self.forwarded_resources(&active, caller, call.params.get()).await.map(|result| (result, Vec::new())),
                false => self.call_rpc(&active, caller, &call.method, String::from(Box::<str>::from(call.params)), call.hops).await,
            };
            match answer {
                Ok((result, deferred)) => RpcReply::Ok { result, deferred: deferred.iter().map(|f| f.as_str().to_string()).collect() },
                Err(e) => RpcReply::Err { code: e.code, message: e.message, data: e.data },
            }
        })
    }

    fn http(self: Arc<Self>, call: HttpCall) -> BoxFuture<'static, HttpReply> {
        Box::pin(async move {
            if !self.serves_forwarded() {
                return HttpReply::NotOwner;
            }
            let req = HttpRequest { method: call.method, path: call.path, query: call.query, headers: call.headers, body: call.body };
            match self.call_http(req).await {
                Ok(r) => HttpReply::Ok { status: r.status, headers: r.headers, body: r.body },
                Err(e) => HttpReply::Failed { code: e.code, message: e.message },
            }
        })
    }

    fn grpc(self: Arc<Self>, open: GrpcOpen, requests: mpsc::Receiver<Result<Vec<u8>, GrpcEnd>>) -> Result<GrpcStream, Option<GrpcEnd>> {
        if !self.serves_forwarded() {
            return Err(None);
        }
        let requests = forwarded_requests(requests);
        let timeout = open.timeout_ms.map(Duration::from_millis);
        let mut r = self.start_grpc(open.path, open.metadata, open.principal, timeout, requests);
        // The response goes back to another node: no request task here polls the callbacks.
        if let Some(drive) = r.drive.take() {
            drive.detach();
        }
        Ok(GrpcStream { messages: r.messages, status: map_status(r.status, |s| GrpcEnd { code: s.code, message: s.message }), guard: r.guard })
    }
}

/// Follow the lease: run the plugin here while this node holds it, and
/// stand down when it moves (its instance goes, its gRPC calls end with
/// UNAVAILABLE so that clients reconnect, its timers wait in the store).
pub(super) async fn follow(tp: Weak<TenantPlugin>, mut held: watch::Receiver<bool>) {
    let mut serving = false;
    loop {
        let here = *held.borrow_and_update();
        let Some(this) = tp.upgrade() else { return };
        if this.retired.load(Ordering::Acquire) {
            return;
        }
        if here && !serving {
            let link = this.placement.as_ref().map(|p| p.link.clone()).expect("a follower has a placement");
            super::start_one(Arc::downgrade(&this)).await;
            this.ctx.timers.activate(true).await;
            match link.serve(&this.ctx.scope.tenant, &this.plugin.name, this.clone()).await {
                Ok(s) => {
                    *this.served.lock() = Some(s);
                    serving = true;
                }
                Err(e) => tracing::error!(plugin = this.plugin.name, tenant = this.ctx.scope.tenant, error = %e, "cannot take calls from other nodes"),
            }
        } else if !here && serving {
            serving = false;
            this.served.lock().take();
            this.stand_down().await;
        }
        drop(this);
        if held.changed().await.is_err() {
            return;
        }
    }
}

impl TenantPlugin {
    async fn stand_down(&self) {
        self.ctx.timers.activate(false).await;
        self.pool.reset().await;
        let why = format!("plugin {} moved to another node; reconnect", self.plugin.name);
        self.ctx.grpc.end_all(status(code::UNAVAILABLE, why));
    }
}
