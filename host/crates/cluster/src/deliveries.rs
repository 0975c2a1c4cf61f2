//! Deliveries to sessions served by other nodes, over NATS core: frames
//! for one node queued together go as one message to `<name>.dl.<node>`,
//! entries of `<tenant token> <session> <length>\n<frame>`; the receiving
//! node answers with what became of each entry, in order.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::{Cluster, BATCH_BYTES};
use map_core::outbox::{Frame, Full};

/// How long a node has to say it took a delivery: after that the recipient
/// counts as not delivered (the message may still arrive).
const CONFIRM_WITHIN: Duration = Duration::from_secs(2);

/// What the receiving node answers for each entry of a delivery, in order.
const TAKEN: u8 = b'+';
const BACKLOGGED: u8 = b'f';
const CLOSED: u8 = b'x';

/// One frame for a session on another node, and who waits to hear whether
/// that node took it.
struct Handoff {
    subject: String,
    entry: Vec<u8>,
    taken: Option<oneshot::Sender<Result<(), Full>>>,
}

/// One tenant's way to sessions on other nodes: a queue to a publisher of
/// its own, so deliveries never wait behind the event log.
pub(super) struct Outgoing {
    queue: mpsc::UnboundedSender<Handoff>,
    /// `<name>.dl.` (a node name follows).
    prefix: String,
    tenant_token: String,
}

impl Outgoing {
    pub(super) fn start(client: async_nats::Client, prefix: String, tenant_token: String) -> Outgoing {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(publish_deliveries(client, rx));
        Outgoing { queue, prefix, tenant_token }
    }

    /// Hand a frame to `node` without waiting to hear whether it took it.
    pub(super) fn send(&self, node: &str, session: &str, frame: &Frame) -> Result<(), Full> {
        let subject = format!("{}{node}", self.prefix);
        self.queue.send(Handoff { subject, entry: self.entry(session, frame), taken: None }).map_err(|_| Full::Closed)
    }

    /// Hand a frame to `node`; the answer says whether that node took it (in time).
    pub(super) fn hand_to(&self, node: &str, session: &str, frame: &Frame) -> impl std::future::Future<Output = Result<(), Full>> + Send + 'static {
        let (taken, answer) = oneshot::channel();
        let queued = self.queue.send(Handoff { subject: format!("{}{node}", self.prefix), entry: self.entry(session, frame), taken: Some(taken) }).is_ok();
        async move {
            match tokio::time::timeout(CONFIRM_WITHIN, answer).await {
                Ok(Ok(done)) if queued => done,
                _ => Err(Full::Closed),
            }
        }
    }

    /// A frame as an entry of a delivery to another node: `<tenant token> <session> <length>\n<frame>`.
    fn entry(&self, session: &str, frame: &Frame) -> Vec<u8> {
        let text = frame.as_str();
        let mut entry = Vec::with_capacity(self.tenant_token.len() + session.len() + text.len() + 24);
        entry.extend_from_slice(self.tenant_token.as_bytes());
        entry.push(b' ');
        entry.extend_from_slice(session.as_bytes());
        entry.push(b' ');
        entry.extend_from_slice(itoa::Buffer::new().format(text.len()).as_bytes());
        entry.push(b'\n');
        entry.extend_from_slice(text.as_bytes());
        entry
    }
}

/// Send deliveries to other nodes, those queued together for one node in
/// one message, and pass on each node's answer: which entries it took.
/// No answer in time, or no node listening, is a delivery not made.
async fn publish_deliveries(client: async_nats::Client, mut rx: mpsc::UnboundedReceiver<Handoff>) {
    type Waiting = Vec<Option<oneshot::Sender<Result<(), Full>>>>;
    let inbox = client.new_inbox();
    let mut answers = match client.subscribe(format!("{inbox}.*")).await {
        Ok(sub) => sub,
        Err(e) => {
            tracing::error!(error = %e, "subscribing to the answers of other nodes failed: deliveries to them will all fail");
            while let Some(h) = rx.recv().await {
                if let Some(t) = h.taken {
                    let _ = t.send(Err(Full::Closed));
                }
            }
            return;
        }
    };
    let mut pending: foldhash::HashMap<u64, (Instant, Waiting)> = Default::default();
    let mut sent = 0u64;
    let mut batches: Vec<(String, Vec<u8>, Waiting)> = Vec::new();
    let mut sweep = tokio::time::interval(CONFIRM_WITHIN);
    let answer = |waiting: Waiting, each: &mut dyn FnMut(usize) -> Result<(), Full>| {
        for (i, taken) in waiting.into_iter().enumerate() {
            if let Some(t) = taken {
                let _ = t.send(each(i));
            }
        }
    };
    loop {
        tokio::select! {
            first = rx.recv() => {
                let Some(first) = first else { break };
                let mut next = Some(first);
                while let Some(h) = next.take().or_else(|| rx.try_recv().ok()) {
                    match batches.iter_mut().find(|(s, b, _)| *s == h.subject && b.len() + h.entry.len() <= BATCH_BYTES) {
                        Some((_, body, waiting)) => {
                            body.extend_from_slice(&h.entry);
                            waiting.push(h.taken);
                        }
                        None => batches.push((h.subject, h.entry, vec![h.taken])),
                    }
                    if batches.len() > 64 {
                        break;
                    }
                }
                for (subject, body, waiting) in batches.drain(..) {
                    sent += 1;
                    match client.publish_with_reply(subject, format!("{inbox}.{sent}"), body.into()).await {
                        Ok(()) => {
                            pending.insert(sent, (Instant::now(), waiting));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "publishing to NATS failed");
                            answer(waiting, &mut |_| Err(Full::Closed));
                        }
                    }
                }
            }
            Some(msg) = answers.next() => {
                let Some(id) = msg.subject.rsplit('.').next().and_then(|n| n.parse::<u64>().ok()) else { continue };
                let Some((_, waiting)) = pending.remove(&id) else { continue };
                if msg.status.is_some_and(|s| s == async_nats::StatusCode::NO_RESPONDERS) {
                    // Nobody listens for that node: it is gone, or cut from NATS.
                    answer(waiting, &mut |_| Err(Full::Closed));
                } else {
                    answer(waiting, &mut |i| match msg.payload.get(i) {
                        Some(&TAKEN) => Ok(()),
                        Some(&BACKLOGGED) => Err(Full::Backlogged),
                        _ => Err(Full::Closed),
                    });
                }
            }
            _ = sweep.tick() => {
                // Their senders gave up already (`CONFIRM_WITHIN`); forget them.
                pending.retain(|_, (at, _)| at.elapsed() < 2 * CONFIRM_WITHIN);
            }
        }
    }
}

/// Deliveries from other nodes: entries of `<tenant token> <session> <length>\n<frame>`.
/// `deliver` hands a frame to a session of a tenant (by token) served here.
pub(super) async fn receive(cluster: &Cluster, deliver: impl Fn(&str, &str, Frame) -> Result<(), Full> + Send + 'static) -> anyhow::Result<()> {
    let mut sub = cluster.client.subscribe(cluster.subject("dl", &cluster.node)).await?;
    let client = cluster.client.clone();
    tokio::spawn(async move {
        // What became of each entry, in order: the answer to the sending node.
        let mut taken = Vec::new();
        while let Some(msg) = sub.next().await {
            let mut rest = &msg.payload[..];
            while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
                let Ok(head) = std::str::from_utf8(&rest[..nl]) else { break };
                let mut parts = head.split(' ');
                let (Some(tenant), Some(session), Some(Ok(len))) = (parts.next(), parts.next(), parts.next().map(str::parse::<usize>)) else {
                    tracing::warn!(head, "an unreadable delivery from another node");
                    break;
                };
                let Some(frame) = rest.get(nl + 1..nl + 1 + len) else { break };
                let done = match std::str::from_utf8(frame) {
                    Ok(frame) => deliver(tenant, session, Frame::from(frame.to_string())),
                    Err(_) => Err(Full::Closed),
                };
                taken.push(match done {
                    Ok(()) => TAKEN,
                    Err(Full::Backlogged) => BACKLOGGED,
                    Err(Full::Closed) => CLOSED,
                });
                rest = &rest[nl + 1 + len..];
            }
            if let Some(reply) = msg.reply {
                if let Err(e) = client.publish(reply, std::mem::take(&mut taken).into()).await {
                    tracing::warn!(error = %e, "answering a delivery from another node failed");
                }
            }
            taken.clear();
        }
    });
    Ok(())
}
