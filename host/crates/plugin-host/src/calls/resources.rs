//! Calls of the `resources` export, for `map/resources/list` and `get`
//! (served by the core): the plugin's items written in the extension's wire
//! form (snake_case, ISO 8601 times), its errors checked like
//! `rpc.handle`'s. A cluster singleton's calls go to the node that runs it
//! as a JSON-RPC call of the reserved method `$resources/call`, answered
//! there in the same wire form.

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::TenantPlugin;
use crate::bindings::{Caller, RpcError as WitError};
use crate::contract;
use crate::exports::{Invocation, ResourceItem, ResourcePage, Returned};
use map_core::extensions::ResourceCall;
use map_core::Active;
use map_protocol::ids::iso8601;
use map_protocol::rpc::{codes, RpcError};

/// The prefix of the forwarded resources calls: no plugin method starts with `$`.
pub const RESOURCES_PREFIX: &str = "$resources/";
/// -32003 and -32004 of the resources extension: invalid filter, not found.
const INVALID_FILTER: i64 = -32003;
const NOT_FOUND: i64 = -32004;

impl TenantPlugin {
    /// `resources.list` or `resources.get` for `active`: the JSON the
    /// client gets, `{resources, cursor, total?}`, or the item or `null`.
    pub async fn call_resources(self: &Arc<Self>, active: &Active, call: &ResourceCall) -> Result<Box<RawValue>, RpcError> {
        let caller = crate::caller_of(active);
        if let Some(owner) = self.elsewhere() {
            let params = serde_json::to_string(call).map_err(|e| RpcError::internal(e.to_string()))?;
            let method = format!("{RESOURCES_PREFIX}call");
            return Box::pin(self.forward_rpc(owner, active, caller, &method, params, 0)).await.map(|(result, _)| result);
        }
        self.resources_here(active, caller, call.clone()).await
    }

    /// A forwarded call (`$resources/call`) on the node that runs the plugin.
    pub(super) async fn forwarded_resources(self: &Arc<Self>, active: &Active, caller: Caller, params: &str) -> Result<Box<RawValue>, RpcError> {
        let call: ResourceCall = serde_json::from_str(params).map_err(|e| RpcError::invalid_params(format!("an undecodable resources call: {e}")))?;
        self.resources_here(active, caller, call).await
    }

    async fn resources_here(self: &Arc<Self>, active: &Active, caller: Caller, call: ResourceCall) -> Result<Box<RawValue>, RpcError> {
        let max = self.plugin.limits.max_result_bytes;
        let (invocation, kind, limit) = match call {
            ResourceCall::List { kind, filter, cursor, limit } => (Invocation::ResourceList { caller, kind: kind.clone(), filter, cursor, limit }, kind, limit),
            ResourceCall::Get { kind, id } => (Invocation::ResourceGet { caller, kind: kind.clone(), id }, kind, 1),
        };
        let (answer, _) = self
            .run(Some(active.clone()), 0, invocation, move |tp, returned| match returned {
                Returned::ResourcePage(Ok(page)) => page_json(&kind, page, limit).and_then(|v| contract::check_result(v.to_string(), max)).map(Ok),
                Returned::Resource(Ok(Some(item))) => item_json(&kind, item).and_then(|v| contract::check_result(v.to_string(), max)).map(Ok),
                Returned::Resource(Ok(None)) => Ok(Ok(RawValue::from_string("null".into()).expect("null is JSON"))),
                Returned::ResourcePage(Err(e)) => tp.check_resource_error(e, true).map(Err),
                Returned::Resource(Err(e)) => tp.check_resource_error(e, false).map(Err),
                _ => Err("answered a resources call with something else".into()),
            })
            .await?;
        answer
    }

    /// An error of the plugin's range, a JSON-RPC one, or the extension's
    /// -32003/-32004; `list`'s -32602 is the extension's invalid filter.
    fn check_resource_error(&self, e: WitError, listing: bool) -> Result<RpcError, String> {
        let range = self.descriptor.as_ref().map(|d| d.error_range).unwrap_or((0, -1));
        let own = matches!(e.code, INVALID_FILTER | NOT_FOUND);
        let range = if own { (e.code, e.code) } else { range };
        let mut err = contract::check_error(e.code, e.message, e.data, range, self.plugin.limits.max_result_bytes)?;
        if listing && err.code == codes::INVALID_PARAMS {
            err.code = INVALID_FILTER;
        }
        Ok(err)
    }
}

/// One item as the client sees it.
fn item_json(kind: &str, item: ResourceItem) -> Result<Value, String> {
    let metadata: Value = serde_json::from_str(&item.metadata).map_err(|e| format!("returned resource metadata that is not JSON ({e})"))?;
    if !metadata.is_object() {
        return Err("returned resource metadata that is not a JSON object".into());
    }
    Ok(json!({
        "id": item.id,
        "type": kind,
        "name": item.name,
        "status": item.status,
        "owner_id": item.owner_id,
        "origin_hub_id": null,
        "created_at": iso8601(item.created_at),
        "updated_at": iso8601(item.updated_at),
        "metadata": metadata,
    }))
}

/// A page as the client sees it: `cursor` null at the end.
fn page_json(kind: &str, page: ResourcePage, limit: u32) -> Result<Value, String> {
    if page.items.len() > limit as usize {
        return Err(format!("returned {} resources when asked for at most {limit}", page.items.len()));
    }
    let resources = page.items.into_iter().map(|item| item_json(kind, item)).collect::<Result<Vec<_>, _>>()?;
    let mut out = json!({"resources": resources, "cursor": page.cursor});
    if let Some(total) = page.total {
        out["total"] = json!(total);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(metadata: &str) -> ResourceItem {
        ResourceItem {
            id: "t-1".into(),
            name: "a task".into(),
            status: "open".into(),
            owner_id: "alice".into(),
            created_at: 0,
            updated_at: 1000,
            metadata: metadata.into(),
        }
    }

    #[test]
    fn items_take_the_wire_form() {
        let v = item_json("x-tasks/task", item(r#"{"k":1}"#)).unwrap();
        assert_eq!(
            v,
            json!({"id": "t-1", "type": "x-tasks/task", "name": "a task", "status": "open", "owner_id": "alice", "origin_hub_id": null,
                   "created_at": "1970-01-01T00:00:00.000Z", "updated_at": "1970-01-01T00:00:01.000Z", "metadata": {"k": 1}})
        );
        assert!(item_json("x/y", item("[1]")).is_err(), "metadata must be an object");
        assert!(item_json("x/y", item("{")).is_err());
    }

    #[test]
    fn pages_end_with_a_null_cursor_and_keep_to_the_limit() {
        let page = |n: usize, cursor: Option<&str>| ResourcePage { items: (0..n).map(|_| item("{}")).collect(), cursor: cursor.map(String::from), total: None };
        let v = page_json("x/y", page(2, None), 2).unwrap();
        assert_eq!(v["cursor"], Value::Null);
        assert!(v.get("total").is_none());
        assert_eq!(page_json("x/y", page(1, Some("c")), 5).unwrap()["cursor"], "c");
        assert!(page_json("x/y", page(3, None), 2).is_err());
    }
}
