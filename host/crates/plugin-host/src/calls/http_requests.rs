//! HTTP requests under the plugin's prefix (`http-handler.handle`).

use std::sync::Arc;

use super::TenantPlugin;
use crate::exports::{HttpRequest, HttpResponse, Invocation, Returned};
use map_protocol::rpc::RpcError;

impl TenantPlugin {
    /// Call `http-handler.handle`. Failures are the caller's to turn into a 5xx.
    pub async fn call_http(self: &Arc<Self>, req: HttpRequest) -> Result<HttpResponse, RpcError> {
        if let Some(owner) = self.elsewhere() {
            return Box::pin(self.forward_http(owner, req)).await;
        }
        let (response, _) = self
            .run(None, 0, Invocation::Http(req), |tp, returned| match returned {
                Returned::Http(r) if r.body.len() <= tp.plugin.limits.max_result_bytes => Ok(r),
                Returned::Http(r) => Err(format!("returned an oversized body ({} bytes)", r.body.len())),
                _ => Err("answered a request with something else".into()),
            })
            .await?;
        Ok(response)
    }
}
