//! A relayed gRPC call: the relaying node's side (`relay`) and the owner's
//! (`own`), each numbering what it sends and pinging the other.

use std::time::Duration;

use async_nats::Subject;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::wire::{header, headers, unavailable, GrpcEnd, GrpcStream, CANCELLED, KIND, SEQ};

/// A relayed call's sides ping each other this often...
const PING_EVERY: Duration = Duration::from_secs(1);
/// ...and end the call after this long without a word from the other side.
const SILENT_AFTER: Duration = Duration::from_millis(4_500);
/// Response messages a relaying node holds for a client that reads slowly.
pub(super) const RELAY_QUEUE: usize = 64;

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
pub(super) async fn relay(
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
pub(super) async fn own(
    client: async_nats::Client,
    down: String,
    up: async_nats::Subscriber,
    requests: mpsc::Sender<Result<Vec<u8>, GrpcEnd>>,
    stream: GrpcStream,
) {
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
