//! map/subscribe, map/unsubscribe, pausing, map/subscribe.ack and map/replay.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::events::Filter;
use crate::fabric::{ReplayFrom, ReplayQuery};
use crate::{Active, Out};
use map_protocol::ids;
use map_protocol::rpc::{Request, RpcError};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct SubscribeParams {
    filter: Option<Filter>,
    /// A timestamp (ms) or an event id: past events from there come first.
    replay_from: Option<Value>,
}

pub fn subscribe(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: SubscribeParams = req.params()?;
    let from = match p.replay_from {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => {
            Some(ReplayFrom::Timestamp(n.as_u64().ok_or_else(|| RpcError::invalid_params("replayFrom must be a timestamp or an event id"))?))
        }
        Some(Value::String(s)) => Some(ReplayFrom::EventId(s)),
        Some(_) => return Err(RpcError::invalid_params("replayFrom must be a timestamp or an event id")),
    };
    let extensions = active.tenant.extensions();
    let filter = p.filter.unwrap_or_default();
    // A federation peer subscribes only to the event types exposed to it.
    if let Some(allowed) = active.tenant.federation().and_then(|f| f.shown_to(&active.principal)).map(|s| s.events) {
        let covered = |t: &String| allowed.iter().any(|a| a == t || a.strip_suffix('*').is_some_and(|prefix| t.starts_with(prefix) && !t.ends_with('*')));
        if filter.event_types.is_empty() || !filter.event_types.iter().all(covered) {
            let why = format!("a federated system may subscribe only to the event types exposed to it ({})", allowed.join(", "));
            return Err(RpcError::new(map_protocol::rpc::codes::PERMISSION_DENIED, why));
        }
    }
    let filter = filter.resolve(|key| extensions.data_filter(key)).map_err(RpcError::invalid_params)?;
    let id = active.tenant.fabric.subscribe(&active.session_id, filter, from);
    Ok(json!({"subscriptionId": id}).into())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct SubscriptionRef {
    subscription_id: Option<String>,
}

pub fn unsubscribe(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let id = req.params::<SubscriptionRef>()?.subscription_id.ok_or_else(|| RpcError::invalid_params("subscriptionId is required"))?;
    if !active.tenant.fabric.unsubscribe(&active.session_id, &id) {
        return Err(RpcError::invalid_params(format!("No subscription {id} on this session")));
    }
    Ok(json!({"subscription": {"id": id, "closedAt": ids::now_ms()}, "unsubscribed": true}).into())
}

/// Pause (hold the subscription's events) or resume (send what was held, then go on).
pub fn pause(active: &Active, req: &Request, paused: bool) -> Result<Out, RpcError> {
    let id = req.params::<SubscriptionRef>()?.subscription_id.ok_or_else(|| RpcError::invalid_params("subscriptionId is required"))?;
    if !active.tenant.fabric.pause(&active.session_id, &id, paused) {
        return Err(RpcError::invalid_params(format!("No subscription {id} on this session")));
    }
    Ok(json!({"success": true, "subscriptionId": id, "paused": paused}).into())
}

/// Acknowledgements are accepted; the per-session queue bound is the flow control.
pub fn ack(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let _ = (active, req.params::<Value>()?);
    Ok(json!({"acknowledged": true}).into())
}

pub fn replay(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let mut q: ReplayQuery = req.params()?;
    q.session = active.session_id.clone();
    if let Some(f) = q.filter.take() {
        let extensions = active.tenant.extensions();
        q.filter = Some(f.resolve(|key| extensions.data_filter(key)).map_err(RpcError::invalid_params)?);
    }
    if q.limit.is_some_and(|l| l == 0 || l > 1000) {
        return Err(RpcError::invalid_params("limit must be between 1 and 1000"));
    }
    let page = active.tenant.fabric.replay(&q);
    let events: Vec<&str> = page.events.iter().map(|e| e.get()).collect();
    let text = format!(r#"{{"events":[{}],"hasMore":{},"totalCount":{}}}"#, events.join(","), page.has_more, page.total_count);
    Ok(Out::Text(text))
}
