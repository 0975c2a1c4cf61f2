//! A2A 0.3 on the same JSON-RPC URL: its method names (`message/send`,
//! `message/stream`, `tasks/get`, `tasks/cancel`, `tasks/resubscribe`, the
//! four `tasks/pushNotificationConfig/*` and
//! `agent/getAuthenticatedExtendedCard`) are served by the 1.0 methods,
//! with params translated from 0.3 shapes (`kind` on parts and results,
//! lower-case roles and states, `file` parts, push configs nested in
//! `pushNotificationConfig`) and results translated back.

use serde_json::{json, Map, Value};

/// The 1.0 method a 0.3 method name stands for.
pub fn method(name: &str) -> Option<&'static str> {
    Some(match name {
        "message/send" => "SendMessage",
        "message/stream" => "SendStreamingMessage",
        "tasks/get" => "GetTask",
        "tasks/cancel" => "CancelTask",
        "tasks/resubscribe" => "SubscribeToTask",
        "tasks/pushNotificationConfig/set" => "CreateTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/get" => "GetTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/list" => "ListTaskPushNotificationConfigs",
        "tasks/pushNotificationConfig/delete" => "DeleteTaskPushNotificationConfig",
        "agent/getAuthenticatedExtendedCard" => "GetExtendedAgentCard",
        _ => return None,
    })
}

fn part_in(p: &Value) -> Value {
    let mut out = Map::new();
    match p["kind"].as_str() {
        Some("text") => drop(out.insert("text".into(), p["text"].clone())),
        Some("data") => drop(out.insert("data".into(), p["data"].clone())),
        Some("file") => {
            let f = &p["file"];
            if let Some(u) = f.get("uri") {
                out.insert("url".into(), u.clone());
            }
            if let Some(b) = f.get("bytes") {
                out.insert("raw".into(), b.clone());
            }
            for (from, to) in [("mimeType", "mediaType"), ("name", "filename")] {
                if let Some(v) = f.get(from) {
                    out.insert(to.into(), v.clone());
                }
            }
        }
        // Anything else fails the 1.0 checks as it stands.
        _ => return p.clone(),
    }
    if let Some(m) = p.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    Value::Object(out)
}

fn message_in(m: &Value) -> Value {
    let Some(o) = m.as_object() else { return m.clone() };
    let mut out: Map<String, Value> = o.iter().filter(|(k, _)| *k != "kind").map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Some(r) = o.get("role").and_then(Value::as_str) {
        out.insert("role".into(), json!(format!("ROLE_{}", r.to_ascii_uppercase())));
    }
    if let Some(parts) = o.get("parts").and_then(Value::as_array) {
        out.insert("parts".into(), json!(parts.iter().map(part_in).collect::<Vec<_>>()));
    }
    Value::Object(out)
}

/// A 0.3 PushNotificationConfig (`authentication.schemes`, a list) as 1.0's fields.
fn push_in(c: &Value) -> Map<String, Value> {
    let mut out: Map<String, Value> =
        c.as_object().into_iter().flatten().filter(|(k, _)| *k != "authentication").map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Some(a) = c.get("authentication").filter(|a| a.is_object()) {
        let scheme = a["schemes"].as_array().and_then(|l| l.first()).cloned().unwrap_or(Value::Null);
        out.insert("authentication".into(), json!({"scheme": scheme, "credentials": a["credentials"]}));
    }
    out
}

/// 0.3 params of method `name` in 1.0 shapes.
pub fn params_in(name: &str, p: &Value) -> Value {
    let task = p.get("taskId").or_else(|| p.get("id")).cloned().unwrap_or(Value::Null);
    match name {
        // 0.3 named a config after its task when the client gave it no id.
        "tasks/pushNotificationConfig/set" => {
            let mut c = push_in(&p["pushNotificationConfig"]);
            c.entry("id").or_insert_with(|| task.clone());
            c.insert("taskId".into(), task);
            return Value::Object(c);
        }
        "tasks/pushNotificationConfig/get" | "tasks/pushNotificationConfig/delete" => {
            return json!({"taskId": task, "id": p.get("pushNotificationConfigId").cloned().unwrap_or(task.clone())});
        }
        "tasks/pushNotificationConfig/list" => return json!({"taskId": task}),
        _ => {}
    }
    let mut out = p.clone();
    if let Some(m) = p.get("message") {
        out["message"] = message_in(m);
    }
    if let Some(c) = p.get("configuration").and_then(Value::as_object) {
        let mut conf = Map::new();
        for (k, v) in c {
            match k.as_str() {
                "blocking" => drop(conf.insert("returnImmediately".into(), json!(v == &json!(false)))),
                "pushNotificationConfig" => drop(conf.insert("taskPushNotificationConfig".into(), Value::Object(push_in(v)))),
                _ => drop(conf.insert(k.clone(), v.clone())),
            }
        }
        out["configuration"] = Value::Object(conf);
    }
    out
}

/// A 1.0 TaskPushNotificationConfig as 0.3's.
fn push_out(c: &Value) -> Value {
    let mut config = json!({"id": c["id"], "url": c["url"]});
    if let Some(t) = c.get("token") {
        config["token"] = t.clone();
    }
    if let Some(a) = c.get("authentication") {
        config["authentication"] = json!({"schemes": [a["scheme"]], "credentials": a["credentials"]});
    }
    json!({"taskId": c["taskId"], "pushNotificationConfig": config})
}

/// The result of 1.0 method `core` as 0.3 answers it.
pub fn result_for(core: &str, r: &Value) -> Value {
    match core {
        "CreateTaskPushNotificationConfig" | "GetTaskPushNotificationConfig" => push_out(r),
        "ListTaskPushNotificationConfigs" => json!(r["configs"].as_array().into_iter().flatten().map(push_out).collect::<Vec<_>>()),
        "DeleteTaskPushNotificationConfig" => Value::Null,
        _ => result_out(r),
    }
}

fn part_out(p: &Value) -> Value {
    let mut out = if let Some(t) = p.get("text") {
        json!({"kind": "text", "text": t})
    } else if let Some(d) = p.get("data") {
        // 0.3 data parts hold objects only.
        json!({"kind": "data", "data": if d.is_object() { d.clone() } else { json!({"value": d}) }})
    } else {
        let mut file = Map::new();
        for (from, to) in [("url", "uri"), ("raw", "bytes"), ("mediaType", "mimeType"), ("filename", "name")] {
            if let Some(v) = p.get(from) {
                file.insert(to.into(), v.clone());
            }
        }
        json!({"kind": "file", "file": file})
    };
    if let Some(m) = p.get("metadata") {
        out["metadata"] = m.clone();
    }
    out
}

fn parts_out(v: &Value) -> Value {
    json!(v.as_array().into_iter().flatten().map(part_out).collect::<Vec<_>>())
}

fn message_out(m: &Value) -> Value {
    let mut out = m.clone();
    out["kind"] = json!("message");
    out["role"] = json!(m["role"].as_str().unwrap_or("ROLE_AGENT").trim_start_matches("ROLE_").to_ascii_lowercase());
    out["parts"] = parts_out(&m["parts"]);
    out
}

fn status_out(s: &Value) -> Value {
    let mut out = json!({"state": s["state"].as_str().unwrap_or("").trim_start_matches("TASK_STATE_").to_ascii_lowercase().replace('_', "-")});
    if let Some(m) = s.get("message") {
        out["message"] = message_out(m);
    }
    if let Some(t) = s.get("timestamp") {
        out["timestamp"] = t.clone();
    }
    out
}

fn artifact_out(a: &Value) -> Value {
    let mut out = a.clone();
    out["parts"] = parts_out(&a["parts"]);
    out
}

fn task_out(t: &Value) -> Value {
    let mut out = json!({"kind": "task", "id": t["id"], "contextId": t["contextId"], "status": status_out(&t["status"])});
    if let Some(h) = t.get("history").and_then(Value::as_array) {
        out["history"] = json!(h.iter().map(message_out).collect::<Vec<_>>());
    }
    if let Some(a) = t.get("artifacts").and_then(Value::as_array) {
        out["artifacts"] = json!(a.iter().map(artifact_out).collect::<Vec<_>>());
    }
    out
}

/// A 1.0 result (a Task, a SendMessageResponse or a StreamResponse) in 0.3 shape.
pub fn result_out(r: &Value) -> Value {
    if let Some(t) = r.get("task") {
        return task_out(t);
    }
    if let Some(m) = r.get("message") {
        return message_out(m);
    }
    if let Some(u) = r.get("statusUpdate") {
        let final_ = u["status"]["state"].as_str().and_then(crate::task::parse_state).is_some_and(crate::task::is_terminal);
        return json!({"kind": "status-update", "taskId": u["taskId"], "contextId": u["contextId"], "status": status_out(&u["status"]), "final": final_});
    }
    if let Some(u) = r.get("artifactUpdate") {
        return json!({"kind": "artifact-update", "taskId": u["taskId"], "contextId": u["contextId"], "artifact": artifact_out(&u["artifact"]), "append": u["append"], "lastChunk": u["lastChunk"]});
    }
    if r.get("id").is_some() && r.get("status").is_some() {
        return task_out(r);
    }
    r.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_translate_both_ways() {
        let m = json!({"kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "hi"}, {"kind": "file", "file": {"uri": "https://x/y", "mimeType": "text/plain"}}]});
        let core = message_in(&m);
        assert_eq!(core, json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}, {"url": "https://x/y", "mediaType": "text/plain"}]}));
        let back = message_out(&core);
        assert_eq!(back["role"], "user");
        assert_eq!(back["parts"][1], json!({"kind": "file", "file": {"uri": "https://x/y", "mimeType": "text/plain"}}));
        assert_eq!(params_in("message/send", &json!({"configuration": {"blocking": false}}))["configuration"]["returnImmediately"], true);
    }

    #[test]
    fn states_and_updates_take_03_names() {
        let t = json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}});
        assert_eq!(result_out(&t)["status"]["state"], "input-required");
        let u = json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}});
        assert_eq!(result_out(&u)["final"], true);
    }

    #[test]
    fn push_configs_take_03_shapes() {
        let set = json!({"taskId": "t", "pushNotificationConfig": {"url": "https://h/x", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}});
        let core = params_in("tasks/pushNotificationConfig/set", &set);
        assert_eq!(core, json!({"taskId": "t", "id": "t", "url": "https://h/x", "authentication": {"scheme": "Bearer", "credentials": "c"}}));
        let back = result_for(
            "GetTaskPushNotificationConfig",
            &json!({"id": "t", "taskId": "t", "url": "https://h/x", "authentication": {"scheme": "Bearer", "credentials": "c"}}),
        );
        assert_eq!(
            back,
            json!({"taskId": "t", "pushNotificationConfig": {"id": "t", "url": "https://h/x", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}})
        );
        assert_eq!(params_in("tasks/pushNotificationConfig/delete", &json!({"id": "t", "pushNotificationConfigId": "p"})), json!({"taskId": "t", "id": "p"}));
    }
}
