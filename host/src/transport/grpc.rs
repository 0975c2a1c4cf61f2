//! gRPC over HTTP/2 on the gateway's listener, for plugins that export
//! `grpc-handler`. tonic does the framing, message size limits and status
//! trailers with a pass-through codec; the plugin sees raw message bytes.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use futures_util::{stream, Stream, StreamExt};
use hyper::body::Incoming;
use hyper::Request;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{Grpc, StreamingService};
use tonic::{Code, Status};

use map_core::Gateway;
use map_plugin_host::{grpc_code, GrpcRequests, GrpcResponse, GrpcStatus, TenantPlugin};

/// How long the response headers wait for the plugin's first answer, so
/// that a call refused at once gets a trailers-only response.
const FIRST_ANSWER_WAIT: Duration = Duration::from_millis(50);

pub fn is_grpc<B>(req: &Request<B>) -> bool {
    req.version() == hyper::Version::HTTP_2
        && req.headers().get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.starts_with("application/grpc"))
}

/// Messages pass through as bytes, without the length prefix.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

type Replies = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;

/// A plugin's gRPC status as tonic sends it (an unknown code is UNKNOWN).
pub(crate) fn to_tonic(s: GrpcStatus) -> Status {
    Status::new(Code::from_i32(s.code as i32), s.message)
}

/// One call handed to a tenant's plugin.
struct Call {
    plugin: Arc<TenantPlugin>,
    path: String,
    principal: String,
    timeout: Option<Duration>,
}

impl StreamingService<Bytes> for Call {
    type Response = Bytes;
    type ResponseStream = Replies;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<tonic::Response<Replies>, Status>> + Send>>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Bytes>>) -> Self::Future {
        let (plugin, path, principal, timeout) = (self.plugin.clone(), std::mem::take(&mut self.path), std::mem::take(&mut self.principal), self.timeout);
        Box::pin(async move {
            let (metadata, _, incoming) = request.into_parts();
            let metadata = metadata
                .into_headers()
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "authorization" | "x-api-key" | "grpc-timeout" | "te" | "content-type"))
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect();
            // Read in the plugin's call, as it takes messages: no task or queue between.
            let requests: GrpcRequests = Box::pin(incoming.map(|item| {
                item.map(|b| b.to_vec()).map_err(|s| {
                    // tonic reports a message over the size limit as OUT_OF_RANGE; gRPC says RESOURCE_EXHAUSTED.
                    let code = if s.code() == Code::OutOfRange { Code::ResourceExhausted } else { s.code() };
                    GrpcStatus { code: code as u32, message: s.message().to_string() }
                })
            }));
            let streams_out = plugin.grpc_method(&path).is_some_and(|(_, server_streaming)| server_streaming);
            let response = plugin.grpc_call(path, metadata, principal, timeout, requests).await;
            replies(response, streams_out).await
        })
    }
}

/// How long the request's task runs the plugin's callbacks itself before
/// they move to the plugin threads: about one slice of a plugin call.
const INLINE_DRIVE: Duration = Duration::from_millis(5);

/// The plugin's messages, then its status. A status that comes before any
/// message (and soon) makes a trailers-only response. The callbacks run
/// here until the call ends (a unary answer then goes out with no task
/// hand-off), a streamed response has its first message, or one slice
/// has passed; the rest runs on the plugin threads.
async fn replies(response: GrpcResponse, streams_out: bool) -> Result<tonic::Response<Replies>, Status> {
    let GrpcResponse { mut messages, mut status, guard, drive } = response;
    let started = tokio::time::Instant::now();
    let mut head: Vec<Result<Bytes, Status>> = Vec::new();
    let mut ended = false;
    if let Some(mut drive) = drive {
        let inline = async {
            loop {
                tokio::select! {
                    biased;
                    m = messages.recv() => match m {
                        Some(m) => {
                            head.push(Ok(Bytes::from(m)));
                            if streams_out {
                                return;
                            }
                        }
                        None => {
                            ended = true;
                            return;
                        }
                    },
                    () = &mut drive, if !drive.is_done() => {}
                }
            }
        };
        let _ = tokio::time::timeout(INLINE_DRIVE, inline).await;
        drive.detach();
    }
    if !ended && head.is_empty() {
        match tokio::time::timeout_at(started + FIRST_ANSWER_WAIT, messages.recv()).await {
            Ok(Some(m)) => head.push(Ok(Bytes::from(m))),
            Ok(None) => ended = true,
            Err(_) => {}
        }
    }
    // The queue closes when the call ends: its status is there by then.
    let early = if ended { status.try_recv().ok() } else { None };
    if let Some(s) = early.as_ref().filter(|s| head.is_empty() && s.code != grpc_code::OK) {
        return Err(to_tonic(s.clone()));
    }
    let rest = stream::unfold(messages, |mut rx| async move { rx.recv().await.map(|m| (Ok(Bytes::from(m)), rx)) });
    let end = stream::once(async move {
        // Holding the guard here ends the call (CANCELLED) if the client goes away first.
        let _guard = guard;
        let last = match early {
            Some(s) => Ok(s),
            None => status.await,
        };
        match last {
            Ok(s) if s.code == grpc_code::OK => None,
            Ok(s) => Some(Err(to_tonic(s))),
            Err(_) => Some(Err(Status::unavailable("the plugin call ended without a status"))),
        }
    })
    .filter_map(|s| async move { s });
    Ok(tonic::Response::new(Box::pin(stream::iter(head).chain(rest).chain(end))))
}

/// `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n).
fn grpc_timeout(headers: &hyper::HeaderMap) -> Option<Duration> {
    let text = headers.get("grpc-timeout")?.to_str().ok()?;
    if !(2..=9).contains(&text.len()) {
        return None;
    }
    let (digits, unit) = text.split_at(text.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Serve one gRPC request: the tenant from the credentials in metadata
/// (as for HTTP plugins), the plugin from the path.
pub async fn serve(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> hyper::Response<tonic::body::Body> {
    let refuse = |code: Code, message: String| Status::new(code, message).into_http();
    let who = match super::headers::caller(&gw, peer, req.headers()) {
        Ok(Some(who)) => who,
        Ok(None) => return refuse(Code::Unauthenticated, "credentials required (authorization: Bearer … or x-api-key metadata)".into()),
        Err((status, e)) if status == hyper::StatusCode::TOO_MANY_REQUESTS => return refuse(Code::ResourceExhausted, e.message),
        Err((_, e)) => return refuse(Code::Unauthenticated, e.message),
    };
    let path = req.uri().path().to_string();
    let Some(plugin) = map_plugin_host::of(&who.tenant).grpc_route(&path) else {
        return refuse(Code::Unimplemented, format!("no plugin of this tenant serves {path}"));
    };
    let (parent, state) = super::headers::trace_headers(req.headers());
    let span = map_observe::telemetry::inbound("grpc", &path, &who.tenant.id, parent.as_deref(), state.as_deref());
    let limit = gw.config.server.max_message_bytes;
    let call = Call { plugin, path, principal: who.principal.to_string(), timeout: grpc_timeout(req.headers()) };
    let mut grpc = Grpc::new(Raw).max_decoding_message_size(limit).max_encoding_message_size(limit);
    tracing::Instrument::instrument(grpc.streaming(call, req), span).await
}
