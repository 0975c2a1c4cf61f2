//! JSON-RPC calls (`rpc.handle`): the answer checked against the contract
//! (size, nesting, the plugin's error range) before it reaches the client.

use std::sync::Arc;

use serde_json::value::RawValue;

use super::TenantPlugin;
use crate::bindings::{Caller, RpcError as WitError};
use crate::contract;
use crate::exports::{Invocation, Returned};
use map_core::outbox::Frame;
use map_core::Active;
use map_protocol::rpc::RpcError;

impl TenantPlugin {
    /// Call `rpc.handle`. With the result come the notifications the plugin
    /// sent to its caller, to be written after the response.
    /// `hops`: how many plugin calls (router calls, observer hops) this one is nested in.
    pub async fn call_rpc(
        self: &Arc<Self>,
        active: &Active,
        caller: Caller,
        method: &str,
        params: String,
        hops: u8,
    ) -> Result<(Box<RawValue>, Vec<Frame>), RpcError> {
        if let Some(owner) = self.elsewhere() {
            // Boxed (here and in the other kinds of call): the cluster path would
            // otherwise size every local call's future.
            return Box::pin(self.forward_rpc(owner, active, caller, method, params, hops)).await;
        }
        let invocation = Invocation::Rpc { caller, method: method.to_string(), params };
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
        contract::check_result(text, self.plugin.limits.max_result_bytes)
    }

    /// Keep a plugin's error only if its code is its own (or a JSON-RPC
    /// one) and it fits the message limit; `Err` names how it broke the contract.
    fn check_error(&self, e: WitError) -> Result<RpcError, String> {
        let range = self.descriptor.as_ref().map(|d| d.error_range).unwrap_or((0, -1));
        contract::check_error(e.code, e.message, e.data, range, self.plugin.limits.max_result_bytes)
    }
}
