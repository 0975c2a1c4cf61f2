//! Publishing a tenant's events: recorded ones are appended to the
//! cluster's event log (a JetStream stream), live-only ones go out on NATS
//! core, in the order made. Every message carries the publishing process
//! (`INSTANCE`), so that process knows its own when they come back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::BATCH_BYTES;

/// The header naming the gateway process that published an event: it holds
/// the event aside when made and confirms it when the log gives it back.
const INSTANCE: &str = "Map-Instance";

/// An event for NATS, in the order made: recorded ones go to the log,
/// live-only ones on NATS core.
enum ToPublish {
    Event(String, Bytes),
    Live(String, Bytes),
    /// Answer once everything before has been appended (a graceful stop).
    Flush(std::sync::mpsc::Sender<()>),
}

/// A tenant's queue to its event publisher.
///
/// The queue itself has no bound: events are made inside calls that cannot
/// wait. Instead the bytes made and not yet acknowledged by the log (or,
/// for live-only events, not yet handed to NATS) are counted, and a tenant
/// `behind` by more than its limit has its sends refused at the door.
pub(super) struct LogPublisher {
    queue: mpsc::UnboundedSender<ToPublish>,
    backlog: Arc<AtomicUsize>,
    limit: usize,
}

impl LogPublisher {
    /// Start the publisher of one tenant's events (a task of its own),
    /// allowed `limit` bytes of backlog.
    pub(super) fn start(client: async_nats::Client, js: jetstream::Context, instance: Arc<str>, limit: usize) -> LogPublisher {
        let (queue, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(AtomicUsize::new(0));
        tokio::spawn(publish_events(client, js, instance, rx, backlog.clone()));
        LogPublisher { queue, backlog, limit }
    }

    /// A recorded event, for the log at `subject`.
    pub(super) fn append(&self, subject: String, body: Bytes) {
        self.backlog.fetch_add(body.len(), Ordering::Relaxed);
        let _ = self.queue.send(ToPublish::Event(subject, body));
    }

    /// A live-only event, for NATS core at `subject`.
    pub(super) fn live(&self, subject: String, body: Bytes) {
        self.backlog.fetch_add(body.len(), Ordering::Relaxed);
        let _ = self.queue.send(ToPublish::Live(subject, body));
    }

    /// More events wait for the log than the limit allows.
    pub(super) fn behind(&self) -> bool {
        self.backlog.load(Ordering::Relaxed) > self.limit
    }

    /// Wait (at most `within`) until the events queued so far are in the log.
    pub(super) fn flush(&self, within: std::time::Duration) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.queue.send(ToPublish::Flush(done)).is_ok() {
            let _ = tokio::task::block_in_place(|| wait.recv_timeout(within));
        }
    }
}

/// Whether the process `instance` published a message.
pub(super) fn published_by(headers: Option<&async_nats::HeaderMap>, instance: &str) -> bool {
    headers.and_then(|h| h.get(INSTANCE)).is_some_and(|v| v.as_str() == instance)
}

/// Append a tenant's recorded events to the log and send its live-only
/// ones, in order. What is queued together goes as one message (a JSON
/// array): the log takes far fewer messages than events, and appends are
/// pipelined, their acknowledgements awaited alongside.
async fn publish_events(
    client: async_nats::Client,
    js: jetstream::Context,
    instance: Arc<str>,
    mut rx: mpsc::UnboundedReceiver<ToPublish>,
    backlog: Arc<AtomicUsize>,
) {
    let mut acks = Acks::new();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(INSTANCE, &*instance);
    let sink = Sink { client: &client, js: &js, headers: &headers, backlog: &backlog };
    let mut pending: Option<Batch> = None;
    loop {
        tokio::select! {
            next = rx.recv() => {
                let Some(first) = next else { break };
                let mut next = Some(first);
                while let Some(out) = next.take().or_else(|| rx.try_recv().ok()) {
                    let (recorded, subject, body) = match out {
                        ToPublish::Event(s, b) => (true, s, b),
                        ToPublish::Live(s, b) => (false, s, b),
                        ToPublish::Flush(done) => {
                            if let Some(batch) = pending.take() {
                                sink.send(&mut acks, batch).await;
                            }
                            while let Some(result) = acks.next().await {
                                if let Err(e) = result {
                                    tracing::error!(error = %e, "the cluster's event log refused events");
                                }
                            }
                            let _ = done.send(());
                            continue;
                        }
                    };
                    match &mut pending {
                        Some(b) if b.recorded == recorded && b.subject == subject && b.json.len() + body.len() < BATCH_BYTES => {
                            b.json.push(b',');
                            b.json.extend_from_slice(&body);
                            b.counted += body.len();
                        }
                        _ => {
                            if let Some(done) = pending.take() {
                                sink.send(&mut acks, done).await;
                            }
                            let mut json = Vec::with_capacity(body.len() * 4);
                            json.push(b'[');
                            json.extend_from_slice(&body);
                            pending = Some(Batch { recorded, subject, json, counted: body.len() });
                        }
                    }
                }
                if let Some(done) = pending.take() {
                    sink.send(&mut acks, done).await;
                }
            }
            Some(done) = acks.next(), if !acks.is_empty() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "the cluster's event log refused events");
                }
            }
        }
    }
}

/// Appends waiting for the log's acknowledgement.
type Acks = futures_util::stream::FuturesUnordered<BoxFuture<'static, Result<jetstream::publish::PublishAck, jetstream::context::PublishError>>>;

/// Events of one kind for one subject, as one JSON array.
struct Batch {
    recorded: bool,
    subject: String,
    json: Vec<u8>,
    /// The events' bytes, as counted in the backlog.
    counted: usize,
}

/// Where batches go, and the backlog they leave when they are through.
struct Sink<'a> {
    client: &'a async_nats::Client,
    js: &'a jetstream::Context,
    headers: &'a async_nats::HeaderMap,
    backlog: &'a Arc<AtomicUsize>,
}

impl Sink<'_> {
    async fn send(&self, acks: &mut Acks, Batch { recorded, subject, mut json, counted }: Batch) {
        json.push(b']');
        if recorded {
            match self.js.publish_with_headers(subject, self.headers.clone(), json.into()).await {
                Ok(ack) => {
                    // Counted until the log answers, refusal and timeout included.
                    let backlog = self.backlog.clone();
                    acks.push(Box::pin(async move {
                        let answer = ack.await;
                        backlog.fetch_sub(counted, Ordering::Relaxed);
                        answer
                    }));
                }
                Err(e) => {
                    self.backlog.fetch_sub(counted, Ordering::Relaxed);
                    tracing::error!(error = %e, "appending to the cluster's event log failed");
                }
            }
            // Bound the appends in flight.
            while acks.len() > 1024 {
                if let Some(Err(e)) = acks.next().await {
                    tracing::error!(error = %e, "the cluster's event log refused events");
                }
            }
        } else {
            if let Err(e) = self.client.publish_with_headers(subject, self.headers.clone(), json.into()).await {
                tracing::warn!(error = %e, "publishing to NATS failed");
            }
            self.backlog.fetch_sub(counted, Ordering::Relaxed);
        }
    }
}
