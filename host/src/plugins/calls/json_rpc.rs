//! JSON-RPC calls (`rpc.handle`): the answer checked against the contract
//! (size, nesting, the plugin's error range) before it reaches the client.

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::Value;

use super::TenantPlugin;
use crate::core::outbox::Frame;
use crate::core::Active;
use crate::plugins::bindings::{Caller, RpcError as WitError};
use crate::plugins::exports::{Invocation, Returned};
use crate::rpc::RpcError;

/// Deepest JSON nesting a plugin may answer with: many clients cannot parse more.
const MAX_JSON_DEPTH: usize = 128;

impl TenantPlugin {
    /// Call `rpc.handle`. With the result come the notifications the plugin
    /// sent to its caller, to be written after the response.
    /// `hops`: how many plugin calls (router calls, observer hops) this one is nested in.
    pub async fn call_rpc(self: &Arc<Self>, active: &Active, caller: Caller, method: &str, params: &str, hops: u8) -> Result<(Box<RawValue>, Vec<Frame>), RpcError> {
        let invocation = Invocation::Rpc { caller, method: method.to_string(), params: params.to_string() };
        let (answer, deferred) = self
            .run(Some(active.clone()), hops, invocation, |tp, returned| match returned {
                Returned::Rpc(Ok(text)) => tp.check_result(text).map(Ok),
                Returned::Rpc(Err(e)) => tp.check_error(e).map(Err),
                _ => Err("answered a call with something else".into()),
            })
            .await?;
        answer.map(|r| (r, deferred))
    }

    fn check_result(&self, text: String) -> Result<Box<RawValue>, String> {
        let max = self.plugin.limits.max_result_bytes;
        if text.len() > max {
            return Err(format!("returned an oversized result ({} bytes; the limit is {max})", text.len()));
        }
        if json_depth(&text) > MAX_JSON_DEPTH {
            return Err(format!("returned JSON nested deeper than {MAX_JSON_DEPTH} levels"));
        }
        RawValue::from_string(text).map_err(|e| format!("returned malformed JSON ({e})"))
    }

    /// Keep a plugin's error only if its code is its own (or a JSON-RPC
    /// one) and it fits the message limit; `Err` names how it broke the contract.
    fn check_error(&self, e: WitError) -> Result<RpcError, String> {
        let (lo, hi) = self.descriptor.as_ref().map(|d| d.error_range).unwrap_or((0, -1));
        // Every JSON-RPC code, -32603 included (as wit/types.wit says): a
        // plugin may report its own internal error and keep its instance.
        let standard = (-32700..=-32600).contains(&e.code);
        if !standard && !(lo..=hi).contains(&e.code) {
            let head: String = e.message.chars().take(200).collect();
            return Err(format!("returned error code {} outside its range {lo}..={hi}: {head}", e.code));
        }
        let size = e.message.len() + e.data.as_ref().map_or(0, String::len);
        let max = self.plugin.limits.max_result_bytes;
        if size > max {
            return Err(format!("returned an oversized error ({size} bytes; the limit is {max})"));
        }
        if e.data.as_deref().is_some_and(|d| json_depth(d) > MAX_JSON_DEPTH) {
            return Err(format!("returned error data nested deeper than {MAX_JSON_DEPTH} levels"));
        }
        let mut err = RpcError::new(e.code, e.message);
        if let Some(data) = e.data.and_then(|d| serde_json::from_str::<Value>(&d).ok()) {
            err.data = Some(data);
        }
        Ok(err)
    }
}

/// The deepest nesting of arrays and objects in JSON text (strings skipped).
fn json_depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}
