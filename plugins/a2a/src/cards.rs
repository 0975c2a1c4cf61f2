//! Agent cards. A MAP agent opts in with its registration metadata,
//! `metadata.a2a = {skills: [{id, name, description, tags?, examples?}],
//! description?, name?}`; what it wrote is untrusted, so only fields of the
//! expected types and sizes are published, and a malformed skill is left out.

use map_plugin_sdk::store::Collection;
use map_plugin_sdk::{ids, router, Call, Reply, Result};
use serde_json::{json, Value};

/// Agents that announced themselves with `a2a/publish` (agent id → since, in ms).
/// The plugin cannot list a tenant's agents, so the gateway's list holds
/// these, each only while it still carries `metadata.a2a`.
pub const DIRECTORY: Collection<u64> = Collection::new("directory");

pub const PROTOCOL_VERSION: &str = "1.0";
/// The version 0.3 clients find in the card's `protocolVersion`.
pub const LEGACY_VERSION: &str = "0.3.0";
pub const MODES: [&str; 2] = ["text/plain", "application/json"];

fn text(v: &Value, max: usize) -> Option<String> {
    v.as_str().filter(|s| !s.is_empty()).map(|s| s.chars().take(max).collect())
}

fn texts(v: &Value, max_items: usize, max: usize) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|x| text(x, max)).take(max_items).collect()
}

/// The agent as the caller may see it, if it opted in.
pub fn opted_in(id: &str) -> Option<Value> {
    router::agent(id).filter(|a| a["metadata"]["a2a"].is_object())
}

fn skill(v: &Value) -> Option<Value> {
    let id = text(&v["id"], 128)?;
    let mut s = json!({
        "id": id,
        "name": text(&v["name"], 256).unwrap_or_else(|| id.clone()),
        "description": text(&v["description"], 2048).unwrap_or_default(),
        "tags": texts(&v["tags"], 32, 64),
    });
    let examples = texts(&v["examples"], 16, 512);
    if !examples.is_empty() {
        s["examples"] = json!(examples);
    }
    Some(s)
}

/// The card of an opted-in agent, served at `<base>/agents/<id>`. Besides
/// 1.0's `supportedInterfaces`, it carries the fields A2A 0.3 clients read
/// (`url`, `preferredTransport`, `protocolVersion`: the 0.3 interface), as
/// the official SDK's server adds them.
pub fn card(id: &str, agent: &Value, base: &str) -> Value {
    let a2a = &agent["metadata"]["a2a"];
    let skills: Vec<Value> = a2a["skills"].as_array().into_iter().flatten().filter_map(skill).take(64).collect();
    json!({
        "name": text(&a2a["name"], 256).or_else(|| text(&agent["name"], 256)).unwrap_or_else(|| id.to_string()),
        "description": text(&a2a["description"], 2048).or_else(|| text(&agent["description"], 2048)).unwrap_or_else(|| format!("MAP agent {id}")),
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": format!("{base}/agents/{id}"), "protocolBinding": "JSONRPC", "protocolVersion": PROTOCOL_VERSION},
            {"url": format!("{base}/agents/{id}/rest"), "protocolBinding": "HTTP+JSON", "protocolVersion": PROTOCOL_VERSION},
            // The same URL takes 0.3's method names.
            {"url": format!("{base}/agents/{id}"), "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "url": format!("{base}/agents/{id}"),
        "preferredTransport": "JSONRPC",
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {"streaming": true, "pushNotifications": true},
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
        "skills": skills,
    })
}

/// A weak ETag of a card (a hash of its JSON; A2A §8.6.1).
pub fn etag(card: &Value) -> String {
    use std::hash::{Hash, Hasher};
    // `new()`, not RandomState: every node of the deployment gives the same tag.
    let mut h = std::hash::DefaultHasher::new();
    card.to_string().hash(&mut h);
    format!("W/\"{:016x}\"", h.finish())
}

/// Whether an `If-None-Match` value names this ETag (RFC 9110 §13.1.2: weak comparison).
pub fn names_tag(if_none_match: &str, etag: &str) -> bool {
    let bare = |t: &str| t.trim().trim_start_matches("W/").to_string();
    if_none_match.split(',').any(|t| t.trim() == "*" || bare(t) == bare(etag))
}

/// `a2a/publish {}`: the caller's agents that opted in join the gateway's list.
pub fn publish(call: &Call) -> Result<Reply> {
    let mut published = vec![];
    for id in &call.caller.agent_ids {
        if opted_in(id).is_some() {
            DIRECTORY.put(id, &ids::now_ms())?;
            published.push(id.clone());
        }
    }
    Reply::json(&json!({ "published": published }))
}

/// `GET /agents`: the published agents that still opt in, with their card URLs.
pub fn list(base: &str) -> Result<Value> {
    let mut agents = vec![];
    DIRECTORY.all().each(|e| {
        if let Some(a) = opted_in(&e.key) {
            let c = card(&e.key, &a, base);
            agents.push(json!({"id": e.key, "name": c["name"], "description": c["description"], "card": format!("{base}/agents/{}/.well-known/agent-card.json", e.key)}));
        }
        Ok(agents.len() < 1000)
    })?;
    Ok(json!({ "agents": agents }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_keep_only_well_formed_skills() {
        let agent = json!({"name": "Echo", "metadata": {"a2a": {"skills": [{"id": "echo", "name": "Echo", "tags": ["t", 3]}, {"name": "no id"}, "junk"]}}});
        let c = card("echo-1", &agent, "http://h/a2a");
        assert_eq!(c["name"], "Echo");
        assert_eq!(c["skills"].as_array().unwrap().len(), 1);
        assert_eq!(c["skills"][0]["tags"], json!(["t"]));
        assert_eq!(c["supportedInterfaces"][0]["url"], "http://h/a2a/agents/echo-1");
        assert_eq!((c["url"].as_str(), c["protocolVersion"].as_str()), (Some("http://h/a2a/agents/echo-1"), Some("0.3.0")));
        let tag = etag(&c);
        assert!(names_tag(&tag, &tag) && names_tag(&format!("\"x\", {}", tag.trim_start_matches("W/")), &tag) && !names_tag("\"x\"", &tag));
    }
}
