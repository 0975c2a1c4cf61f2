//! Agent cards and access rules. An agent opts in through its registration
//! metadata, `metadata.mamp = {card: {...}, access: {public, allowed_agents,
//! require_auth}}`; the name, description and capabilities the card leaves
//! out come from the registration itself. What the agent wrote is
//! untrusted, so only fields of the expected types are published.

use map_plugin_sdk::{router, HttpResponse};
use serde_json::{json, Map, Value};

use crate::message::PROTOCOL;
use crate::reply::Refusal;
use crate::settings::Settings;

const CONTENT_TYPES: [&str; 4] = ["text", "image", "code", "file"];

fn text(v: &Value, max: usize) -> Option<Value> {
    v.as_str().map(|s| json!(s.chars().take(max).collect::<String>()))
}

/// Only string fields of an object, each at most 256 characters.
fn strings(v: &Value) -> Value {
    let mut out = Map::new();
    for (k, v) in v.as_object().into_iter().flatten().take(32) {
        if let Some(s) = text(v, 256) {
            out.insert(k.chars().take(64).collect(), s);
        }
    }
    Value::Object(out)
}

/// An agent's access rules, with the defaults: public, from anyone, with credentials.
pub fn access(agent: &Value) -> Value {
    let a = &agent["metadata"]["mamp"]["access"];
    let allowed: Vec<Value> = a["allowed_agents"].as_array().into_iter().flatten().filter_map(|g| text(g, 256)).take(256).collect();
    json!({
        "public": a["public"].as_bool().unwrap_or(true),
        "allowed_agents": allowed,
        "require_auth": a["require_auth"].as_bool().unwrap_or(true),
    })
}

/// `GET /v1/agents/{id}/card`: 404 unless the agent published a card.
pub fn card(id: &str, settings: &Settings) -> HttpResponse {
    let agent = router::agent(id).filter(|a| a["metadata"]["mamp"]["card"].is_object());
    let Some(agent) = agent else {
        return Refusal::new(404, "agent_not_found", format!("agent {id} has no MAMP card here")).response();
    };
    let card = &agent["metadata"]["mamp"]["card"];
    // What the card leaves out comes from the MAP registration.
    let (given, registered) = (&card["capabilities"], &agent["capabilities"]);
    let listed = |keys: &[&str]| [given, registered].into_iter().flat_map(|c| keys.iter().map(move |k| &c[*k])).find_map(Value::as_array);
    let content_types: Vec<Value> = match listed(&["content_types", "contentTypes"]) {
        Some(list) => list.iter().filter_map(Value::as_str).filter(|t| CONTENT_TYPES.contains(t)).map(|t| json!(t)).collect(),
        None => CONTENT_TYPES.iter().map(|t| json!(t)).collect(),
    };
    let tools: Vec<Value> = listed(&["tools"]).into_iter().flatten().filter_map(|t| text(t, 128)).take(64).collect();
    HttpResponse::json(
        200,
        &json!({
            "protocol": PROTOCOL,
            "agent_id": format!("agent://{}/{id}", settings.domain),
            "name": text(&card["name"], 256).or_else(|| text(&agent["name"], 256)).unwrap_or_else(|| json!(id)),
            "description": text(&card["description"], 2048).or_else(|| text(&agent["description"], 2048)).unwrap_or_else(|| json!("")),
            "owner": strings(&card["owner"]),
            "device": strings(&card["device"]),
            "capabilities": {
                "content_types": content_types,
                "max_message_size": settings.max_message_size,
                "streaming": false,
                "async": true,
                "tools": tools,
            },
            "access": access(&agent),
        }),
    )
}

/// Whether `from` may write to an agent with these rules: a non-empty
/// `allowed_agents` must match it (globs with `*`); a non-public agent
/// with no list takes no external messages.
pub fn admits(access: &Value, from: &str) -> Result<(), Refusal> {
    let allowed: Vec<&str> = access["allowed_agents"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let ok = if allowed.is_empty() { access["public"].as_bool().unwrap_or(true) } else { allowed.iter().any(|g| glob(g, from)) };
    match ok {
        true => Ok(()),
        false => Err(Refusal::new(403, "forbidden", format!("this agent does not take messages from {from}"))),
    }
}

/// `*` matches any run of characters (`/` included); everything else itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("agent://peer.example/*", "agent://peer.example/bob"));
        assert!(glob("agent://*.example/bob", "agent://peer.example/bob"));
        assert!(glob("*", "anything"));
        assert!(glob("agent://a/b", "agent://a/b"));
        assert!(!glob("agent://peer.example/*", "agent://other.example/bob"));
        assert!(!glob("agent://*/bob", "agent://peer.example/eve"));
        assert!(!glob("a*a", "a"));
    }

    #[test]
    fn access_rules() {
        let rules = |v: Value| access(&json!({"metadata": {"mamp": {"access": v}}}));
        assert!(admits(&rules(json!({})), "agent://x/y").is_ok());
        assert!(admits(&rules(json!({"allowed_agents": ["agent://peer.example/*"]})), "agent://peer.example/bob").is_ok());
        assert_eq!(admits(&rules(json!({"allowed_agents": ["agent://peer.example/*"]})), "agent://evil.example/x").unwrap_err().status, 403);
        assert_eq!(admits(&rules(json!({"public": false})), "agent://x/y").unwrap_err().status, 403);
    }
}
