//! Requests to a participant whose session another node serves (see
//! `core::asks`), over NATS core request/reply: the asking node sends
//! `{tenant, session, ask}` to `<name>.ask.<node>`; that node writes the
//! request on the session, waits for the participant, and replies with
//! `{"result": …}` or `{"error": {code, message, data?}}`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::{token, Cluster};
use map_core::asks::{Answer, Ask, NOT_RESPONDING};
use map_core::Gateway;
use map_protocol::rpc::RpcError;

/// Time the hops between nodes may add to the participant's own timeout.
const HOPS: Duration = Duration::from_secs(1);

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    /// The tenant, as a subject token.
    tenant: String,
    session: String,
    who: String,
    method: String,
    params: Box<RawValue>,
    timeout_ms: u64,
    max_pending: usize,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Reply {
    Result(Box<RawValue>),
    Error { code: i64, message: String, data: Option<Value> },
}

fn not_responding(message: String) -> RpcError {
    RpcError::new(NOT_RESPONDING, message)
}

/// Ask `session` of `tenant` on `node` (`subject` is that node's).
pub(super) async fn ask(client: async_nats::Client, subject: String, tenant: String, session: String, ask: Ask) -> Answer {
    let request = Request {
        tenant,
        session,
        who: ask.who.clone(),
        method: ask.method.clone(),
        params: ask.params,
        timeout_ms: ask.timeout.as_millis() as u64,
        max_pending: ask.max_pending,
    };
    let body = serde_json::to_vec(&request).map_err(|e| RpcError::internal(e.to_string()))?;
    let sent = async_nats::Request::new().payload(body.into()).timeout(Some(ask.timeout + HOPS));
    let who = &ask.who;
    let answer = match client.send_request(subject, sent).await {
        Ok(m) => m,
        Err(e) => {
            return Err(match e.kind() {
                async_nats::RequestErrorKind::TimedOut => not_responding(format!("{who} did not answer {} in time (on another node)", ask.method)),
                async_nats::RequestErrorKind::NoResponders => not_responding(format!("{who} is not connected now (its node is gone)")),
                async_nats::RequestErrorKind::Other => not_responding(format!("{who} could not be reached on its node: {e}")),
            })
        }
    };
    match serde_json::from_slice::<Reply>(&answer.payload) {
        Ok(Reply::Result(result)) => Ok(result),
        Ok(Reply::Error { code, message, data }) => Err(RpcError { code, message, data }),
        Err(e) => Err(RpcError::internal(format!("an undecodable answer from another node: {e}"))),
    }
}

/// Serve `<name>.ask.<this node>`: ask this node's sessions for the others.
pub(super) async fn serve(cluster: &Cluster, gateway: &Arc<Gateway>) -> anyhow::Result<()> {
    let mut sub = cluster.client.subscribe(cluster.subject("ask", &cluster.node)).await?;
    let client = cluster.client.clone();
    let gateway = Arc::downgrade(gateway);
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            let (Some(reply), Some(gateway)) = (m.reply.clone(), gateway.upgrade()) else { continue };
            let client = client.clone();
            tokio::spawn(async move {
                let answer = match serde_json::from_slice::<Request>(&m.payload) {
                    Ok(request) => ask_here(&gateway, request).await,
                    Err(e) => Err(RpcError::internal(format!("an undecodable request from another node: {e}"))),
                };
                let reply_body = match answer {
                    Ok(result) => Reply::Result(result),
                    Err(e) => Reply::Error { code: e.code, message: e.message, data: e.data },
                };
                let _ = client.publish(reply, serde_json::to_vec(&reply_body).unwrap_or_default().into()).await;
            });
        }
    });
    Ok(())
}

/// A request from another node, to a session of this one.
async fn ask_here(gateway: &Gateway, r: Request) -> Answer {
    let live = gateway.live(&r.session).filter(|l| token(&l.session.tenant.id) == r.tenant);
    let Some(live) = live else { return Err(not_responding(format!("{} is not connected now", r.who))) };
    let ask = Ask { who: r.who, method: r.method, params: r.params, timeout: Duration::from_millis(r.timeout_ms), max_pending: r.max_pending };
    live.session.tenant.asks.ask(&live.session.outbox, &r.session, &ask).await
}
