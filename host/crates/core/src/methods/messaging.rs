//! map/send: read the params and hand the message to the tenant (the
//! delivery itself is `core::send`).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::send::{Outgoing, Sent};
use crate::{Active, Out};
use map_protocol::rpc::{Request, RpcError};

#[derive(Deserialize)]
struct SendParams<'a> {
    #[serde(borrow, default)]
    to: Option<&'a RawValue>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(default)]
    meta: Option<Map<String, Value>>,
    /// Which of the session's agents sends (default: its first).
    #[serde(borrow, default)]
    from: Option<Cow<'a, str>>,
}

pub fn send(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: SendParams = req.params()?;
    let to = p.to.ok_or_else(|| RpcError::invalid_params("`to` is required"))?;
    let msg = Outgoing { to, payload: p.payload, meta: p.meta, from: p.from.as_deref(), hops: 0, remote: None };
    Ok(match active.tenant.send(active, msg)? {
        Sent::Now(result) => Out::Text(result),
        Sent::Later(result) => Out::Later(Box::pin(async move { result.await.map(Out::Text) })),
    })
}
