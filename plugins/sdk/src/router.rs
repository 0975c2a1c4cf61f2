//! MAP messages and notifications from the plugin, and calls to other extensions.

use serde::Serialize;
use serde_json::Value;

use crate::bindings::map_gateway::plugin::router as wit;
use crate::bindings::map_gateway::plugin::types::RpcError;

/// Push the notification `method` with `params` (serialised to a JSON
/// object) to a participant's session. To the current caller, notifications
/// are written right after the response, in order, only if the call
/// succeeds. Fails with 2000 (no session) or 2003 (its queue is full).
pub fn notify<T: Serialize + ?Sized>(participant_id: &str, method: &str, params: &T) -> Result<(), RpcError> {
    let params = serde_json::to_string(params).map_err(|e| RpcError {
        code: -32603,
        message: format!("Notification params cannot be written as JSON: {e}"),
        data: None,
    })?;
    wit::notify(participant_id, method, &params)
}

/// Push the notification `method` with `params` (serialised to a JSON
/// object) to the sessions of these participant or agent ids that declared
/// the capability group `capability` at `map/connect` (`true`, or an object
/// without `enabled: false`; `None`: all of them), leaving out the current
/// caller's own session when `skip_caller`. A session that may still resume
/// gets it when it does. Returns how many sessions took it.
pub fn notify_for<T: Serialize + ?Sized>(ids: &[String], capability: Option<&str>, skip_caller: bool, method: &str, params: &T) -> Result<u32, RpcError> {
    let params = serde_json::to_string(params).map_err(|e| RpcError {
        code: -32603,
        message: format!("Notification params cannot be written as JSON: {e}"),
        data: None,
    })?;
    let recipients = wit::Recipients { ids: ids.to_vec(), capability: capability.map(String::from), skip_caller };
    wit::notify_for(method, &params, &recipients)
}

/// Send a MAP message as `map/send` would, as the current caller (outside a
/// call, as the participant `plugin:<name>`); the `map/send` result.
pub fn send(to: &Value, payload: &Value, meta: Option<&Value>) -> Result<Value, RpcError> {
    let meta = meta.map(Value::to_string);
    let result = wit::send(&to.to_string(), &payload.to_string(), meta.as_deref())?;
    Ok(serde_json::from_str(&result).unwrap_or(Value::Null))
}

/// For each participant or agent id, since when (Unix ms) it has been
/// connected; `None` when it has no live session.
pub fn connected_since(ids: &[String]) -> Vec<Option<u64>> {
    wit::connected_since(ids)
}

/// Call a method that another extension of this tenant serves (e.g.
/// `mail/create`), as the current caller (outside a call, as the participant
/// `plugin:<name>`): its result, or its error as it gave it. `params` must
/// serialise to a JSON object. `map/*` and the plugin's own methods are
/// refused with -32601; calls nest at most four deep.
pub fn call<T: Serialize + ?Sized>(method: &str, params: &T) -> Result<Value, RpcError> {
    let params = serde_json::to_string(params).map_err(|e| RpcError { code: -32602, message: format!("Params cannot be written as JSON: {e}"), data: None })?;
    let result = wit::call(method, &params)?;
    Ok(serde_json::from_str(&result).unwrap_or(Value::Null))
}

/// An agent of this tenant as `map/agents/get` shows it to the current
/// caller (outside a call, to `plugin:<name>`); `None` when there is no such
/// agent or it is hidden. The agent wrote it: treat it as untrusted data.
pub fn agent(id: &str) -> Option<Value> {
    wit::agent(id).and_then(|text| serde_json::from_str(&text).ok())
}
