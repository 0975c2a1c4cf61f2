//! The resources extension (`urn:map:ext:resources:1`): `map/resources/list`
//! and `map/resources/get` over the types the tenant's extensions provide
//! (a plugin declares them through its `resources` export, and applies its
//! own visibility rules for the caller). Served here, so no plugin serves
//! the namespace itself.
//!
//! - `capabilities.resources` is `{enabled: true, kinds}`, every type a
//!   provider declared; a tenant without any advertises nothing, and its
//!   `map/resources/*` answer -32601.
//! - Errors, with `data.category: "resource"`: -32001 unknown type, -32003
//!   invalid filter or type needed, -32004 not found or not visible.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::extensions::ResourceCall;
use crate::{Active, Out};
use map_protocol::rpc::{Request, RpcError};

pub const URI: &str = "urn:map:ext:resources:1";
const UNKNOWN_TYPE: i64 = -32001;
const INVALID: i64 = -32003;
const NOT_FOUND: i64 = -32004;
/// A listing's page when the client names none, and the most it may ask for.
const DEFAULT_LIMIT: u64 = 100;
const MAX_LIMIT: u64 = 500;

/// The capability group and the URI, when some extension provides a type.
pub fn advertise(kinds: Vec<String>, caps: &mut Value) {
    if kinds.is_empty() {
        return;
    }
    caps["resources"] = json!({"enabled": true, "kinds": kinds});
    if let Some(list) = caps.get_mut("extensions").and_then(Value::as_array_mut) {
        list.push(json!({"uri": URI}));
    }
}

/// An error of the extension, as it is categorised on the wire.
fn error(code: i64, message: String) -> RpcError {
    RpcError::new(code, message).with_data(json!({"category": "resource"}))
}

/// Errors of the extension's codes get its category.
fn categorised(e: RpcError) -> RpcError {
    match e.code {
        UNKNOWN_TYPE | INVALID | NOT_FOUND if e.data.is_none() => error(e.code, e.message),
        _ => e,
    }
}

/// -32601 while no extension of the tenant provides a type.
fn served(active: &Active, method: &str) -> Result<Vec<String>, RpcError> {
    let kinds = active.tenant.extensions().resource_kinds();
    if kinds.is_empty() {
        return Err(RpcError::method_not_found(method));
    }
    Ok(kinds)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ListParams {
    #[serde(rename = "type")]
    kind: Option<String>,
    filter: Option<Value>,
    cursor: Option<String>,
    limit: Option<Value>,
}

/// `map/resources/list {type, filter?, cursor?, limit?}` → `{resources, cursor, total?}`.
pub fn list(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let kinds = served(active, &req.method)?;
    let p: ListParams = req.params()?;
    let kind = p.kind.filter(|k| !k.is_empty()).ok_or_else(|| RpcError::invalid_params("type is required"))?;
    if !kinds.contains(&kind) {
        return Err(error(UNKNOWN_TYPE, format!("Unknown resource type: {kind}")));
    }
    let filter = match p.filter {
        None | Some(Value::Null) => "{}".to_string(),
        Some(f @ Value::Object(_)) => f.to_string(),
        Some(_) => return Err(error(INVALID, "filter must be an object".into())),
    };
    let limit = match p.limit {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(v) => v.as_u64().filter(|n| *n >= 1).ok_or_else(|| RpcError::invalid_params("limit must be a positive integer"))?.min(MAX_LIMIT),
    };
    let call = ResourceCall::List { kind, filter, cursor: p.cursor, limit: limit as u32 };
    let active = active.clone();
    Ok(Out::Later(Box::pin(async move {
        let extensions = active.tenant.extensions();
        extensions.resources(&active, &call).await.map(Out::Raw).map_err(categorised)
    })))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GetParams {
    id: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `map/resources/get {id, type?}` → the bare resource. Without `type`,
/// each type's provider is asked; exactly one must have it.
pub fn get(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let kinds = served(active, &req.method)?;
    let p: GetParams = req.params()?;
    let id = p.id.filter(|i| !i.is_empty()).ok_or_else(|| RpcError::invalid_params("id is required"))?;
    let (candidates, named) = match p.kind {
        Some(kind) if !kinds.contains(&kind) => return Err(error(UNKNOWN_TYPE, format!("Unknown resource type: {kind}"))),
        Some(kind) => (vec![kind], true),
        None => (kinds, false),
    };
    let active = active.clone();
    Ok(Out::Later(Box::pin(async move {
        let extensions = active.tenant.extensions();
        let mut found: Vec<Box<RawValue>> = Vec::new();
        for kind in candidates {
            let call = ResourceCall::Get { kind, id: id.clone() };
            let item = extensions.resources(&active, &call).await.map_err(categorised)?;
            if item.get() != "null" {
                found.push(item);
            }
        }
        match (found.len(), named) {
            (1, _) => Ok(Out::Raw(found.pop().expect("one"))),
            (0, true) => Err(error(NOT_FOUND, format!("Resource not found: {id}"))),
            (0, false) => Err(error(INVALID, format!("No type provides resource {id}: give its type"))),
            _ => Err(error(INVALID, format!("Several types have a resource {id}: give its type"))),
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use map_protocol::rpc::codes;

    #[test]
    fn the_extensions_errors_carry_the_resource_category() {
        assert_eq!(categorised(RpcError::new(NOT_FOUND, "x")).to_json()["data"]["category"], "resource");
        assert_eq!(categorised(RpcError::new(codes::INTERNAL_ERROR, "x")).to_json()["data"]["category"], "internal");
        let mut caps = json!({"extensions": []});
        advertise(Vec::new(), &mut caps);
        assert!(caps.get("resources").is_none());
        advertise(vec!["x-tasks/task".into()], &mut caps);
        assert_eq!(caps["resources"], json!({"enabled": true, "kinds": ["x-tasks/task"]}));
        assert_eq!(caps["extensions"][0]["uri"], URI);
    }
}
