//! The wire chapter's ACP-compat methods, for editors that speak only ACP:
//! each is answered by the bridge's own MAP session.
//!
//! | ACP-compat | MAP |
//! |---|---|
//! | `_map/agent.list` | `map/agents/list` |
//! | `_map/hierarchy.get` | `map/structure/graph` |
//! | `_map/scope.list` | `map/scopes/list` |
//! | `_map/send` | `map/send` |
//! | `_map/broadcast` | `map/send` to `{broadcast: true}` |
//! | `_map/task.list` | `map/tasks/list` (the tenant's tasks, then the UAP hub's jobs), or `uap/list` where only the hub runs (`{tasks: [...]}`) |
//! | `_map/subscribe` | `map/subscribe`; events come as `_map/event` notifications |

use serde_json::{json, Value};

use super::link::{Link, MapError};

pub async fn call(link: &Link, method: &str, params: Value) -> Result<Value, MapError> {
    let params = if params.is_null() { json!({}) } else { params };
    match method {
        "_map/agent.list" => link.call("map/agents/list", params).await,
        "_map/hierarchy.get" => link.call("map/structure/graph", params).await,
        "_map/scope.list" => link.call("map/scopes/list", params).await,
        "_map/send" => link.call("map/send", params).await,
        "_map/broadcast" => {
            let payload = params.get("payload").cloned().unwrap_or_else(|| params.clone());
            let mut send = json!({"to": {"broadcast": true}, "payload": payload});
            if let Some(meta) = params.get("meta") {
                send["meta"] = meta.clone();
            }
            link.call("map/send", send).await
        }
        "_map/task.list" => match link.call("map/tasks/list", params.clone()).await {
            Ok(r) => Ok(json!({"tasks": r["tasks"], "nextCursor": r.get("nextCursor")})),
            Err(e) if e["code"] == -32601 => match link.call("uap/list", params).await {
                Ok(r) => Ok(json!({"tasks": r["jobs"], "nextCursor": r.get("nextCursor")})),
                Err(e) if e["code"] == -32601 => Err(json!({"code": -32601, "message": "This tenant loads neither the tasks extension nor the UAP hub"})),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        "_map/subscribe" => link.call("map/subscribe", params).await,
        other => Err(
            json!({"code": -32601, "message": format!("Method not found: {other} (ACP-compat methods: _map/agent.list, _map/hierarchy.get, _map/scope.list, _map/send, _map/broadcast, _map/task.list, _map/subscribe)")}),
        ),
    }
}
