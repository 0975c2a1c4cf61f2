//! Publishing a tenant's events: recorded ones are appended to the
//! cluster's event log (a JetStream stream), live-only ones go out on NATS
//! core, in the order made. Every message carries the publishing process
//! (`INSTANCE`), so that process knows its own when they come back.

use std::sync::Arc;

use async_nats::jetstream;
use bytes::Bytes;
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
pub(super) struct LogPublisher {
    queue: mpsc::UnboundedSender<ToPublish>,
}

impl LogPublisher {
    /// Start the publisher of one tenant's events (a task of its own).
    pub(super) fn start(client: async_nats::Client, js: jetstream::Context, instance: Arc<str>) -> LogPublisher {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(publish_events(client, js, instance, rx));
        LogPublisher { queue }
    }

    /// A recorded event, for the log at `subject`.
    pub(super) fn append(&self, subject: String, body: Bytes) {
        let _ = self.queue.send(ToPublish::Event(subject, body));
    }

    /// A live-only event, for NATS core at `subject`.
    pub(super) fn live(&self, subject: String, body: Bytes) {
        let _ = self.queue.send(ToPublish::Live(subject, body));
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
async fn publish_events(client: async_nats::Client, js: jetstream::Context, instance: Arc<str>, mut rx: mpsc::UnboundedReceiver<ToPublish>) {
    let mut acks = futures_util::stream::FuturesUnordered::new();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(INSTANCE, &*instance);
    let mut pending: Option<(bool, String, Vec<u8>)> = None;
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
                                send_events(&client, &js, &headers, &mut acks, batch).await;
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
                        Some((r, s, batch)) if *r == recorded && *s == subject && batch.len() + body.len() < BATCH_BYTES => {
                            batch.push(b',');
                            batch.extend_from_slice(&body);
                        }
                        _ => {
                            if let Some(done) = pending.take() {
                                send_events(&client, &js, &headers, &mut acks, done).await;
                            }
                            let mut batch = Vec::with_capacity(body.len() * 4);
                            batch.push(b'[');
                            batch.extend_from_slice(&body);
                            pending = Some((recorded, subject, batch));
                        }
                    }
                }
                if let Some(done) = pending.take() {
                    send_events(&client, &js, &headers, &mut acks, done).await;
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

type Acks = futures_util::stream::FuturesUnordered<<jetstream::context::PublishAckFuture as std::future::IntoFuture>::IntoFuture>;

async fn send_events(client: &async_nats::Client, js: &jetstream::Context, headers: &async_nats::HeaderMap, acks: &mut Acks, (recorded, subject, mut batch): (bool, String, Vec<u8>)) {
    batch.push(b']');
    if recorded {
        match js.publish_with_headers(subject, headers.clone(), batch.into()).await {
            Ok(ack) => acks.push(std::future::IntoFuture::into_future(ack)),
            Err(e) => tracing::error!(error = %e, "appending to the cluster's event log failed"),
        }
        // Bound the appends in flight.
        while acks.len() > 1024 {
            if let Some(Err(e)) = acks.next().await {
                tracing::error!(error = %e, "the cluster's event log refused events");
            }
        }
    } else if let Err(e) = client.publish_with_headers(subject, headers.clone(), batch.into()).await {
        tracing::warn!(error = %e, "publishing to NATS failed");
    }
}
