//! HTTP requests under the prefix of a plugin that exports the standard
//! `wasi:http/incoming-handler`: the response head as soon as the plugin
//! sets it, its body as the plugin writes it (`crate::stream`). The call
//! holds its instance until the handler returns: the head must come within
//! `deadline_ms`, the whole call within `stream_max_ms`, and no more than
//! `stream_idle_ms` may pass without a byte sent; once the client has
//! gone, the plugin has `deadline_ms` more to notice and return. At most
//! `max_streams` such calls of a tenant are open at once.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::time::sleep_until;

use super::TenantPlugin;
use crate::exports::Respond;
use crate::instance::{classify, Instance};
use crate::outcome::{CallOutcome, Failure};
use crate::pool::Lease;
use crate::stream::{Progress, RequestBody, StreamBody};
use map_protocol::rpc::{codes, RpcError};

type Head = hyper::Response<wasmtime_wasi_http::p2::body::HyperOutgoingBody>;

impl TenantPlugin {
    /// Serve one request through `wasi:http/incoming-handler`. The error of
    /// a call that failed before its response head is the caller's to turn
    /// into a 5xx; one that fails later ends the body (see `StreamBody`).
    pub async fn serve_http(self: &Arc<Self>, request: hyper::Request<RequestBody>) -> Result<hyper::Response<StreamBody>, RpcError> {
        if self.elsewhere().is_some() {
            // A cluster singleton's streams are not forwarded between nodes.
            let why = format!("Plugin {} runs on another node of the cluster; its HTTP streams are served there", self.plugin.name);
            return Err(RpcError::new(codes::RESOURCE_EXHAUSTED, why));
        }
        let Ok(place) = self.streams.clone().try_acquire_owned() else {
            let max = self.plugin.limits.max_streams;
            let why = format!("Plugin {} has {max} streams of this tenant open already (max_streams); try again later", self.plugin.name);
            return Err(RpcError::new(codes::RESOURCE_EXHAUSTED, why));
        };
        let (head_tx, head_rx) = oneshot::channel();
        let (ended_tx, ended_rx) = oneshot::channel();
        let progress = Arc::new(Progress::default());
        // The body holds `client`: its drop tells the call the client has gone.
        let (client, gone) = oneshot::channel::<()>();
        let (this, sent) = (self.clone(), progress.clone());
        let span = map_observe::telemetry::plugin_call(&self.plugin.name, &self.ctx.scope.tenant, "http");
        let call = async move {
            let ended = this.stream_call(request, head_tx, gone, sent).await;
            drop(place);
            let _ = ended_tx.send(ended);
        };
        self.runtime.spawn(tracing::Instrument::instrument(call, span));
        match head_rx.await {
            Ok(head) => {
                let sse = head.headers().get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/event-stream"));
                Ok(head.map(|body| StreamBody::new(body, ended_rx, client, progress, sse)))
            }
            // No head: the call failed (its error), or ended without one.
            Err(_) => Err(match ended_rx.await {
                Ok(Err(e)) => e,
                Ok(Ok(())) => self.failure("returned without setting a response".into()),
                Err(_) => self.failure("crashed the host task".into()),
            }),
        }
    }

    /// The call on the plugin threads: an instance, the handler run under
    /// its bounds, the head passed on when the plugin sets it.
    async fn stream_call(
        &self,
        request: hyper::Request<RequestBody>,
        head_tx: oneshot::Sender<Head>,
        gone: oneshot::Receiver<()>,
        sent: Arc<Progress>,
    ) -> Result<(), RpcError> {
        let started = Instant::now();
        let (mut lease, ready_at) = self.lease(started).await?;
        let answer = self.run_stream(&mut lease, ready_at, request, head_tx, gone, &sent).await;
        self.conclude(lease, answer, started, None).map(|_| ())
    }

    async fn run_stream(
        &self,
        lease: &mut Lease,
        ready_at: Instant,
        request: hyper::Request<RequestBody>,
        head_tx: oneshot::Sender<Head>,
        gone: oneshot::Receiver<()>,
        sent: &Progress,
    ) -> Result<(), Failure> {
        let limits = &self.plugin.limits;
        let (head_due, end_due) = (ready_at + limits.deadline, ready_at + limits.stream_max);
        let instance = lease.instance();
        instance.arm(end_due, None, 0);
        let Instance { store, bound, .. } = instance;
        let (respond, mut head): (Respond, _) = oneshot::channel();
        let mut call = pin!(bound.handle_incoming(store, request, respond));
        let mut head_tx = Some(head_tx);
        let mut client_gone = pin!(after_client(gone, limits.deadline));
        // When the stream is idle for too long, unless a byte goes out first.
        let mut idle_due = end_due;
        loop {
            tokio::select! {
                biased;
                done = &mut call => {
                    // A handler that set its head and returned within one poll.
                    if let (Some(tx), Ok(Ok(response))) = (head_tx.take(), head.try_recv()) {
                        let _ = tx.send(response);
                    }
                    return done.map_err(|e| classify(&e, limits.deadline.as_millis(), limits.memory_bytes));
                }
                head_set = &mut head, if head_tx.is_some() => match head_set {
                    Ok(Ok(response)) => {
                        // The client may be gone already: then the call learns it below.
                        if let Some(tx) = head_tx.take() {
                            let _ = tx.send(response);
                        }
                        sent.touch();
                        idle_due = Instant::now() + limits.stream_idle;
                    }
                    Ok(Err(code)) => return Err(Failure::new(CallOutcome::Error, format!("answered with the error {code:?}"))),
                    Err(_) => return Err(Failure::new(CallOutcome::Error, "dropped its response-outparam without setting it")),
                },
                _ = sleep_until(head_due.into()), if head_tx.is_some() => {
                    return Err(Failure::new(CallOutcome::TimedOut, format!("set no response within {} ms", limits.deadline.as_millis())));
                }
                _ = sleep_until(idle_due.into()), if head_tx.is_none() => {
                    idle_due = sent.last() + limits.stream_idle;
                    if idle_due <= Instant::now() {
                        let ms = limits.stream_idle.as_millis();
                        return Err(Failure::new(CallOutcome::TimedOut, format!("sent nothing for {ms} ms (stream_idle_ms)")));
                    }
                }
                _ = sleep_until(end_due.into()) => {
                    return Err(Failure::new(CallOutcome::TimedOut, format!("streamed past its limit of {} ms (stream_max_ms)", limits.stream_max.as_millis())));
                }
                _ = &mut client_gone => {
                    let ms = limits.deadline.as_millis();
                    return Err(Failure::new(CallOutcome::TimedOut, format!("had not returned {ms} ms after its client went away")));
                }
            }
        }
    }
}

/// Ready `grace` after the client went away (its body dropped).
async fn after_client(gone: oneshot::Receiver<()>, grace: Duration) {
    let _ = gone.await;
    tokio::time::sleep(grace).await;
}
