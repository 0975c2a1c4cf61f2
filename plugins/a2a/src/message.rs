//! A2A 1.0 messages, parts and artifacts as they arrive (untrusted): each
//! known field is checked and only those are kept; unknown fields are
//! ignored (A2A §5.7: receivers SHOULD ignore unrecognized fields).

use serde_json::{json, Map, Value};

/// Limits on what one message may hold.
pub const MAX_PARTS: usize = 64;
pub const MAX_ID: usize = 128;
pub const MAX_TEXT: usize = 64 << 10;

/// A refusal of some field: `-32602` with this text.
pub type Invalid = String;

pub fn id(v: &Value, field: &str) -> Result<String, Invalid> {
    match v.as_str() {
        Some(s) if !s.is_empty() && s.len() <= MAX_ID && s.chars().all(|c| c.is_ascii_graphic()) => Ok(s.to_string()),
        Some(_) => Err(format!("{field} must be 1 to {MAX_ID} printable ASCII characters")),
        None => Err(format!("{field} must be a string")),
    }
}

pub fn optional_id(v: &Value, field: &str) -> Result<Option<String>, Invalid> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        _ => id(v, field).map(Some),
    }
}

fn object(v: &Value, field: &str) -> Result<Option<Value>, Invalid> {
    match v {
        Value::Null => Ok(None),
        Value::Object(_) => Ok(Some(v.clone())),
        _ => Err(format!("{field} must be an object")),
    }
}

fn short_text(v: &Value, field: &str, max: usize) -> Result<Option<String>, Invalid> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.len() <= max => Ok(Some(s.clone())),
        Value::String(_) => Err(format!("{field} is longer than {max} bytes")),
        _ => Err(format!("{field} must be a string")),
    }
}

/// One part: exactly one of `text`, `raw` (base64), `url`, `data`.
pub fn part(v: &Value, at: &str) -> Result<Value, Invalid> {
    let o = v.as_object().ok_or_else(|| format!("{at} must be an object"))?;
    let content: Vec<&str> = ["text", "raw", "url", "data"].into_iter().filter(|k| o.contains_key(*k)).collect();
    if content.len() != 1 {
        return Err(format!("{at} must hold exactly one of text, raw, url, data"));
    }
    let mut out = Map::new();
    let kind = content[0];
    match kind {
        "text" => out.insert("text".into(), json!(short_text(&o["text"], &format!("{at}.text"), MAX_TEXT)?.unwrap_or_default())),
        "raw" => {
            let raw = short_text(&o["raw"], &format!("{at}.raw"), MAX_TEXT * 4)?.unwrap_or_default();
            if !raw.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=-_".contains(&b)) {
                return Err(format!("{at}.raw must be base64"));
            }
            out.insert("raw".into(), json!(raw))
        }
        "url" => {
            let url = short_text(&o["url"], &format!("{at}.url"), 2048)?.unwrap_or_default();
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(format!("{at}.url must be an http(s) URL"));
            }
            out.insert("url".into(), json!(url))
        }
        _ => out.insert("data".into(), o["data"].clone()),
    };
    if let Some(m) = object(o.get("metadata").unwrap_or(&Value::Null), &format!("{at}.metadata"))? {
        out.insert("metadata".into(), m);
    }
    for (k, max) in [("filename", 256), ("mediaType", 128)] {
        if let Some(s) = short_text(o.get(k).unwrap_or(&Value::Null), &format!("{at}.{k}"), max)? {
            out.insert(k.into(), json!(s));
        }
    }
    Ok(Value::Object(out))
}

pub fn parts(v: &Value, at: &str) -> Result<Vec<Value>, Invalid> {
    let list = v.as_array().ok_or_else(|| format!("{at} must be a list"))?;
    if list.is_empty() || list.len() > MAX_PARTS {
        return Err(format!("{at} must hold 1 to {MAX_PARTS} parts"));
    }
    list.iter().enumerate().map(|(i, p)| part(p, &format!("{at}[{i}]"))).collect()
}

/// A message, with the role it must have (`ROLE_USER` from clients,
/// `ROLE_AGENT` from MAP agents; a missing role takes it).
pub fn message(v: &Value, at: &str, role: &str) -> Result<Value, Invalid> {
    let o = v.as_object().ok_or_else(|| format!("{at} must be an object"))?;
    match o.get("role").and_then(Value::as_str) {
        None if !o.contains_key("role") => {}
        Some(r) if r == role => {}
        _ => return Err(format!("{at}.role must be {role}")),
    }
    let mut out = Map::new();
    out.insert("messageId".into(), json!(id(o.get("messageId").unwrap_or(&Value::Null), &format!("{at}.messageId"))?));
    for k in ["contextId", "taskId"] {
        if let Some(s) = optional_id(o.get(k).unwrap_or(&Value::Null), &format!("{at}.{k}"))? {
            out.insert(k.into(), json!(s));
        }
    }
    out.insert("role".into(), json!(role));
    out.insert("parts".into(), json!(parts(o.get("parts").unwrap_or(&Value::Null), &format!("{at}.parts"))?));
    if let Some(m) = object(o.get("metadata").unwrap_or(&Value::Null), &format!("{at}.metadata"))? {
        out.insert("metadata".into(), m);
    }
    for k in ["extensions", "referenceTaskIds"] {
        if let Some(list) = o.get(k) {
            let list = list.as_array().filter(|l| l.len() <= 32).ok_or_else(|| format!("{at}.{k} must be a list of at most 32"))?;
            let ids = list
                .iter()
                .map(|x| short_text(x, &format!("{at}.{k}[]"), 512).and_then(|s| s.ok_or_else(|| format!("{at}.{k}[] must be strings"))))
                .collect::<Result<Vec<_>, _>>()?;
            out.insert(k.into(), json!(ids));
        }
    }
    Ok(Value::Object(out))
}

/// An artifact from a MAP agent.
pub fn artifact(v: &Value, at: &str) -> Result<Value, Invalid> {
    let o = v.as_object().ok_or_else(|| format!("{at} must be an object"))?;
    let mut out = Map::new();
    out.insert("artifactId".into(), json!(id(o.get("artifactId").unwrap_or(&Value::Null), &format!("{at}.artifactId"))?));
    for (k, max) in [("name", 256), ("description", 2048)] {
        if let Some(s) = short_text(o.get(k).unwrap_or(&Value::Null), &format!("{at}.{k}"), max)? {
            out.insert(k.into(), json!(s));
        }
    }
    out.insert("parts".into(), json!(parts(o.get("parts").unwrap_or(&Value::Null), &format!("{at}.parts"))?));
    if let Some(m) = object(o.get("metadata").unwrap_or(&Value::Null), &format!("{at}.metadata"))? {
        out.insert("metadata".into(), m);
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_hold_one_content() {
        assert!(part(&json!({"text": "hi"}), "p").is_ok());
        assert!(part(&json!({"text": "hi", "data": {}}), "p").is_err());
        assert!(part(&json!({"url": "file:///etc/passwd"}), "p").is_err());
        assert!(part(&json!({"raw": "a b"}), "p").is_err());
        assert_eq!(part(&json!({"text": "x", "unknown": 1}), "p").unwrap(), json!({"text": "x"}));
        assert!(part(&json!({"unknown": 1}), "p").is_err());
    }

    #[test]
    fn messages_are_checked() {
        let m = message(&json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}), "message", "ROLE_USER").unwrap();
        assert_eq!(m["parts"][0]["text"], "hi");
        assert!(message(&json!({"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}), "message", "ROLE_USER").is_err());
        assert!(message(&json!({"messageId": "", "parts": [{"text": "hi"}]}), "message", "ROLE_USER").is_err());
        assert!(message(&json!({"messageId": "m", "parts": []}), "message", "ROLE_USER").is_err());
    }
}
