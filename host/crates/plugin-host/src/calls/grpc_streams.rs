//! gRPC calls: the plugin's callbacks (`grpc-handler`) run in order as the
//! client's messages arrive, until the call ends, its deadline passes or
//! the client goes away.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::TenantPlugin;
use crate::exports::{CallInfo, Invocation, Returned};
use crate::grpc_calls::{code, status, Answer, Drive, Requests, Response, Status};
use map_cluster::singletons::GrpcOpen;
use map_protocol::rpc::codes;

/// How long a unary or client-streaming gRPC call may stay unanswered
/// without `grpc-timeout`.
const UNARY_GRPC_DEADLINE: Duration = Duration::from_secs(30);

impl TenantPlugin {
    /// Whether this plugin serves a gRPC path; `Some(streams_responses)`.
    pub fn grpc_method(&self, path: &str) -> Option<(bool, bool)> {
        let m = crate::plugin::grpc_method(self.services.as_deref()?, path)?;
        Some((m.client_streaming, m.server_streaming))
    }

    /// Start a gRPC call: the plugin's callbacks run in order as request
    /// messages arrive on `requests` (its end is the client's half-close),
    /// read straight from the client's stream, in the response's `drive`.
    /// The response carries messages, then the status. A cluster singleton
    /// that runs on another node is relayed there.
    pub async fn grpc_call(
        self: &Arc<Self>,
        path: String,
        metadata: Vec<(String, String)>,
        principal: String,
        timeout: Option<Duration>,
        requests: Requests,
    ) -> Response {
        if let Some(owner) = self.elsewhere() {
            let open = GrpcOpen { path, metadata, principal, timeout_ms: timeout.map(|t| t.as_millis() as u64) };
            return Box::pin(self.relay_grpc(owner, open, requests)).await;
        }
        self.start_grpc(path, metadata, principal, timeout, requests)
    }

    /// Start a gRPC call on this node.
    pub(super) fn start_grpc(
        self: &Arc<Self>,
        path: String,
        metadata: Vec<(String, String)>,
        principal: String,
        timeout: Option<Duration>,
        requests: Requests,
    ) -> Response {
        let streams_out = self.grpc_method(&path).is_some_and(|(_, server_streaming)| server_streaming);
        let timeout = timeout.or((!streams_out).then_some(UNARY_GRPC_DEADLINE));
        let timeout_ms = timeout.map(|t| t.as_millis() as u64);
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let this = self.clone();
        // Its callbacks are children of the call's span (current here).
        let span = tracing::Span::current();
        if self.unary.contains(&path) {
            let (id, mut response, answer) = Answer::unary();
            let info = CallInfo { id, path, metadata, principal, timeout_ms };
            let drive = tracing::Instrument::instrument(async move { this.drive_unary(info, requests, answer, deadline).await }, span);
            response.drive = Some(Drive::new(Box::pin(drive), self.runtime.clone()));
            return response;
        }
        let (id, mut response, ended) = self.ctx.grpc.open();
        let info = CallInfo { id, path, metadata, principal, timeout_ms };
        let drive = tracing::Instrument::instrument(async move { this.drive_grpc(info, requests, ended, deadline).await }, span);
        response.drive = Some(Drive::new(Box::pin(drive), self.runtime.clone()));
        response
    }

    /// A call `grpc-unary` answers: the client's one request message (up to
    /// its half-close), then one callback whose result is the answer.
    async fn drive_unary(self: Arc<Self>, info: CallInfo, mut requests: Requests, mut answer: Answer, deadline: Option<tokio::time::Instant>) {
        let request = async {
            let first = match requests.next().await {
                Some(Ok(body)) => body,
                Some(Err(s)) => return Err(s),
                None => return Err(status(code::INTERNAL, "a unary method takes one request message; the client sent none")),
            };
            match requests.next().await {
                None => Ok(first),
                Some(Ok(_)) => Err(status(code::INTERNAL, "a unary method takes one request message; the client sent more")),
                Some(Err(s)) => Err(s),
            }
        };
        let expired = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let request = tokio::select! {
            biased;
            r = request => Some(r),
            () = expired => Some(Err(status(code::DEADLINE_EXCEEDED, "the call's deadline passed"))),
            () = answer.abandoned() => None,
        };
        let request = match request {
            None => return,
            Some(Err(s)) => return answer.end(s),
            Some(Ok(body)) => body,
        };
        let replied = self.callback(Invocation::GrpcUnary(info, request), |r| match r {
            Returned::GrpcUnary(r) => Some(r),
            _ => None,
        });
        match replied.await {
            Ok(body) if body.len() > self.ctx.max_message_bytes => {
                let why = format!("the plugin's response has {} bytes; the limit is {}", body.len(), self.ctx.max_message_bytes);
                answer.end(status(code::RESOURCE_EXHAUSTED, why))
            }
            Ok(body) => answer.reply(body),
            Err(s) => answer.end(s),
        }
    }

    async fn drive_grpc(self: Arc<Self>, info: CallInfo, mut requests: Requests, ended: Arc<tokio::sync::Notify>, deadline: Option<tokio::time::Instant>) {
        let id = info.id;
        let calls = self.ctx.grpc.clone();
        if let Err(s) = self.grpc_step(Invocation::GrpcOpen(info)).await {
            calls.end(id, s);
            return;
        }
        let expired = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expired);
        let mut half_closed = false;
        loop {
            tokio::select! {
                biased;
                _ = ended.notified() => break,
                _ = &mut expired => {
                    calls.end(id, status(code::DEADLINE_EXCEEDED, "the call's deadline passed"));
                    break;
                }
                next = requests.next(), if !half_closed => {
                    let step = match next {
                        Some(Ok(body)) => Invocation::GrpcMessage(id, body),
                        Some(Err(s)) => {
                            calls.end(id, s);
                            break;
                        }
                        None => {
                            half_closed = true;
                            Invocation::GrpcHalfClose(id)
                        }
                    };
                    if let Err(s) = self.grpc_step(step).await {
                        calls.end(id, s);
                        break;
                    }
                }
            }
        }
        let _ = self.grpc_step(Invocation::GrpcClosed(id)).await;
    }

    /// One `grpc-handler` callback.
    async fn grpc_step(&self, invocation: Invocation) -> Result<(), Status> {
        self.callback(invocation, |returned| match returned {
            Returned::Grpc(r) => Some(r),
            Returned::Done => Some(Ok(())),
            _ => None,
        })
        .await
    }

    /// One gRPC callback (no hand-off of its own: the drive runs in the
    /// request's task for at most one slice, then on the plugin threads);
    /// `pick` takes its answer from what it returned. A plugin failure is
    /// INTERNAL, no free instance UNAVAILABLE.
    async fn callback<T>(&self, invocation: Invocation, pick: impl FnOnce(Returned) -> Option<Result<T, Status>>) -> Result<T, Status> {
        let ran =
            self.run_here(None, 0, invocation, |_, returned| pick(returned).ok_or_else(|| "answered a gRPC callback with something else".to_string())).await;
        match ran {
            Ok((Ok(answer), _)) => Ok(answer),
            Ok((Err(s), _)) if s.code > 16 => Err(status(code::UNKNOWN_STATUS, s.message)),
            Ok((Err(s), _)) => Err(s),
            Err(e) if e.code == codes::RESOURCE_EXHAUSTED => Err(status(code::UNAVAILABLE, e.message)),
            Err(e) => Err(status(code::INTERNAL, e.message)),
        }
    }
}
