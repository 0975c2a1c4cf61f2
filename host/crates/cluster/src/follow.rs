//! Reading a JetStream stream in order, for as long as the process runs:
//! the event log and the directory are both read this way.

use std::time::Duration;

use async_nats::jetstream;
use futures_util::StreamExt;

/// Read a stream's messages under `filter`, from `policy` on and in order,
/// handing each to `each` for as long as the process runs. Returns once
/// what the stream held under `filter` at the start has been handed over
/// (or after 30 s, if that is huge).
pub(super) async fn follow(
    js: &jetstream::Context,
    stream: &str,
    filter: String,
    policy: jetstream::consumer::DeliverPolicy,
    what: &'static str,
    mut each: impl FnMut(&jetstream::Message) + Send + 'static,
) -> anyhow::Result<()> {
    let stream = js.get_stream(stream).await?;
    let config = jetstream::consumer::pull::OrderedConfig { filter_subject: filter, deliver_policy: policy, ..Default::default() };
    let consumer = stream.create_consumer(config).await?;
    let held = consumer.cached_info().num_pending;
    let mut messages = consumer.messages().await?;
    let (done, caught_up) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut done = Some(done);
        if held == 0 {
            let _ = done.take().map(|t| t.send(()));
        }
        while let Some(msg) = messages.next().await {
            match msg {
                Ok(msg) => {
                    each(&msg);
                    if msg.info().is_ok_and(|i| i.pending == 0) {
                        let _ = done.take().map(|t| t.send(()));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "reading {what}"),
            }
        }
        tracing::error!("reading {what} ended");
    });
    let _ = tokio::time::timeout(Duration::from_secs(30), caught_up).await;
    Ok(())
}
