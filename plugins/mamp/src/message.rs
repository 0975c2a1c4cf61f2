//! The MAMP message (`mamp/1.0`): checked field by field, with its content
//! normalised to blocks. Everything in it is untrusted data.

use serde_json::{json, Map, Value};

use crate::reply::Refusal;

pub const PROTOCOL: &str = "mamp/1.0";

/// An agent URI, `agent://<domain>/<agent-id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentUri {
    pub domain: String,
    pub agent: String,
}

impl AgentUri {
    pub fn parse(text: &str) -> Option<AgentUri> {
        let rest = text.strip_prefix("agent://")?;
        let (domain, agent) = rest.split_once('/')?;
        let domain_ok = !domain.is_empty() && domain.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
        let agent_ok = !agent.is_empty() && agent.len() <= 256 && agent.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@'));
        (domain_ok && agent_ok).then(|| AgentUri { domain: domain.to_ascii_lowercase(), agent: agent.to_string() })
    }
}

/// A message that passed every check.
#[derive(Debug, Clone)]
pub struct Message {
    pub message_id: String,
    pub conversation_id: Option<String>,
    pub from: String,
    pub to: AgentUri,
    pub content: Vec<Value>,
    pub metadata: Map<String, Value>,
}

impl Message {
    /// The message as MAP agents receive it: the MAMP fields, content as blocks.
    pub fn payload(&self, conversation_id: &str) -> Value {
        json!({
            "protocol": PROTOCOL,
            "message_id": self.message_id,
            "conversation_id": conversation_id,
            "from": self.from,
            "to": format!("agent://{}/{}", self.to.domain, self.to.agent),
            "content": self.content,
            "metadata": self.metadata,
        })
    }
}

fn bad(error: &'static str, message: impl Into<String>) -> Refusal {
    Refusal::new(400, error, message)
}

fn text_field<'a>(obj: &'a Map<String, Value>, key: &str, within: &str) -> Result<&'a str, Refusal> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(_) => Err(bad("invalid_field", format!("{within}{key} must be a non-empty string"))),
        None => Err(bad("missing_field", format!("{within}{key} is required"))),
    }
}

/// Check a request body.
pub fn parse(body: &[u8]) -> Result<Message, Refusal> {
    let value: Value = serde_json::from_slice(body).map_err(|e| bad("invalid_json", format!("the body is not JSON: {e}")))?;
    let Value::Object(obj) = value else { return Err(bad("invalid_message", "the body must be a JSON object")) };
    let protocol = text_field(&obj, "protocol", "")?;
    if protocol != PROTOCOL {
        return Err(bad("unsupported_protocol", format!("protocol {protocol:?} is not supported; send {PROTOCOL:?}")));
    }
    let message_id = text_field(&obj, "message_id", "")?;
    if message_id.len() > 256 {
        return Err(bad("invalid_field", "message_id is longer than 256 bytes"));
    }
    let conversation_id = match obj.get("conversation_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err(bad("invalid_field", "conversation_id must be a non-empty string or null")),
    };
    let from = text_field(&obj, "from", "")?;
    if AgentUri::parse(from).is_none() {
        return Err(bad("invalid_agent_uri", format!("from {from:?} is not an agent URI like agent://example.com/agent-id")));
    }
    let to_text = text_field(&obj, "to", "")?;
    let to =
        AgentUri::parse(to_text).ok_or_else(|| bad("invalid_agent_uri", format!("to {to_text:?} is not an agent URI like agent://example.com/agent-id")))?;
    let content = match obj.get("content") {
        None => return Err(bad("missing_field", "content is required")),
        Some(c) => blocks(c)?,
    };
    let metadata = match obj.get("metadata") {
        None => return Err(bad("missing_field", "metadata is required")),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(bad("invalid_field", "metadata must be an object")),
    };
    match metadata.get("timestamp") {
        None => return Err(bad("missing_field", "metadata.timestamp is required")),
        Some(Value::String(t)) if is_rfc3339(t) => {}
        Some(_) => return Err(bad("invalid_field", "metadata.timestamp must be an RFC 3339 time like 2026-01-02T03:04:05Z")),
    }
    Ok(Message { message_id: message_id.to_string(), conversation_id, from: from.to_string(), to, content, metadata })
}

/// Content as blocks: a string is one text block; each block is checked.
pub fn blocks(content: &Value) -> Result<Vec<Value>, Refusal> {
    match content {
        Value::String(s) => Ok(vec![json!({"type": "text", "text": s})]),
        Value::Array(items) if !items.is_empty() => items.iter().enumerate().map(|(i, b)| block(i, b)).collect(),
        Value::Array(_) => Err(bad("invalid_content", "content must not be empty")),
        _ => Err(bad("invalid_content", "content must be a string or an array of blocks")),
    }
}

fn block(i: usize, b: &Value) -> Result<Value, Refusal> {
    let at = format!("content[{i}].");
    let Value::Object(obj) = b else { return Err(bad("invalid_content", format!("content[{i}] must be an object"))) };
    let invalid = |e: Refusal| Refusal::new(400, "invalid_content", e.message);
    match text_field(obj, "type", &at).map_err(invalid)? {
        "text" => {
            if !matches!(obj.get("text"), Some(Value::String(_))) {
                return Err(bad("invalid_content", format!("{at}text must be a string")));
            }
        }
        "code" => {
            if !matches!(obj.get("code"), Some(Value::String(_))) {
                return Err(bad("invalid_content", format!("{at}code must be a string")));
            }
            if obj.get("language").is_some_and(|l| !l.is_string()) {
                return Err(bad("invalid_content", format!("{at}language must be a string")));
            }
        }
        "image" => {
            let Some(Value::Object(src)) = obj.get("source") else { return Err(bad("invalid_content", format!("{at}source is required"))) };
            let within = format!("{at}source.");
            match text_field(src, "type", &within).map_err(invalid)? {
                "url" => {
                    text_field(src, "url", &within).map_err(invalid)?;
                }
                "base64" => {
                    text_field(src, "media_type", &within).map_err(invalid)?;
                    let data = text_field(src, "data", &within).map_err(invalid)?;
                    if !data.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=')) {
                        return Err(bad("invalid_content", format!("{within}data is not base64")));
                    }
                }
                other => return Err(bad("invalid_content", format!("{within}type {other:?} is not url or base64"))),
            }
        }
        "file" => {
            text_field(obj, "name", &at).map_err(invalid)?;
            let Some(Value::Object(src)) = obj.get("source") else { return Err(bad("invalid_content", format!("{at}source is required"))) };
            let within = format!("{at}source.");
            if text_field(src, "type", &within).map_err(invalid)? != "url" {
                return Err(bad("invalid_content", format!("{within}type must be url")));
            }
            text_field(src, "url", &within).map_err(invalid)?;
        }
        other => return Err(bad("invalid_content", format!("{at}type {other:?} is not text, image, code or file"))),
    }
    Ok(b.clone())
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction][Z|±HH:MM]` (a missing zone is accepted).
pub fn is_rfc3339(t: &str) -> bool {
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r.clone()).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    if b.len() < 19 || !digits(0..4) || b[4] != b'-' || !digits(5..7) || b[7] != b'-' || !digits(8..10) || !matches!(b[10], b'T' | b't' | b' ') {
        return false;
    }
    if !digits(11..13) || b[13] != b':' || !digits(14..16) || b[16] != b':' || !digits(17..19) {
        return false;
    }
    let num = |r: std::ops::Range<usize>| t[r].parse::<u32>().unwrap_or(99);
    if !(1..=12).contains(&num(5..7)) || !(1..=31).contains(&num(8..10)) || num(11..13) > 23 || num(14..16) > 59 || num(17..19) > 60 {
        return false;
    }
    let mut rest = &t[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest {
        "" | "Z" | "z" => true,
        zone => {
            let z = zone.as_bytes();
            z.len() == 6 && matches!(z[0], b'+' | b'-') && z[1..3].iter().all(u8::is_ascii_digit) && z[3] == b':' && z[4..6].iter().all(u8::is_ascii_digit)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_uris() {
        assert_eq!(AgentUri::parse("agent://Example.com/bot-1"), Some(AgentUri { domain: "example.com".into(), agent: "bot-1".into() }));
        assert_eq!(AgentUri::parse("agent://gw.example:8443/a_b.c"), Some(AgentUri { domain: "gw.example:8443".into(), agent: "a_b.c".into() }));
        for bad in ["agent://example.com", "agent:///bot", "http://example.com/bot", "agent://ex ample/bot", "agent://example.com/a/b", "agent://example.com/"]
        {
            assert_eq!(AgentUri::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn timestamps() {
        for ok in ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05.123+08:00", "2026-01-02T03:04:05", "2026-12-31t23:59:60-05:30"] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in ["2026-13-02T03:04:05Z", "2026-01-02", "2026-01-02T03:04Z", "yesterday", "2026-01-02T03:04:05+0800", "2026-01-02T03:04:05."] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }

    #[test]
    fn content_is_normalised_to_blocks() {
        assert_eq!(blocks(&json!("hi")).unwrap(), vec![json!({"type": "text", "text": "hi"})]);
        let mixed = json!([
            {"type": "text", "text": "see"},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png", "media_type": "image/png"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}},
            {"type": "code", "language": "rust", "code": "fn main() {}"},
            {"type": "file", "name": "a.pdf", "mime_type": "application/pdf", "source": {"type": "url", "url": "https://x/a.pdf"}},
        ]);
        assert_eq!(blocks(&mixed).unwrap().len(), 5);
        for bad in [
            json!([]),
            json!(5),
            json!([{"type": "video"}]),
            json!([{"type": "text"}]),
            json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "not base64!"}}]),
        ] {
            assert_eq!(blocks(&bad).unwrap_err().error, "invalid_content", "{bad}");
        }
    }
}
