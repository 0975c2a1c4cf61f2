//! Field names as the official SDKs read them: ProtoJSON parsers take a
//! field's JSON name (`contextId`) and its proto name (`context_id`) alike,
//! so params are brought to the JSON names (A2A §5.5) before they are read.
//! Free-form values (`metadata`, a data part's `data`, an extension's
//! `params`) keep their keys as sent.

use serde_json::{Map, Value};

/// Keys whose values are the sender's own JSON, left as they are.
const OPAQUE: [&str; 3] = ["metadata", "data", "params"];

/// `context_id` → `contextId`; a name without `_` stays as it is.
fn camel_name(k: &str) -> String {
    if !k.contains('_') || k.starts_with('_') {
        return k.to_string();
    }
    let mut out = String::with_capacity(k.len());
    let mut upper = false;
    for c in k.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// A value with every object key (outside opaque values) in JSON-name form;
/// when both spellings are given, the JSON name wins.
pub fn camel(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut out = Map::new();
            // JSON names first, so that they win over a proto name of the same field.
            let (plain, snake): (Vec<_>, Vec<_>) = o.iter().partition(|(k, _)| !k.contains('_'));
            for (k, val) in plain.into_iter().chain(snake) {
                let name = camel_name(k);
                if out.contains_key(&name) {
                    continue;
                }
                let val = if OPAQUE.contains(&name.as_str()) { val.clone() } else { camel(val) };
                out.insert(name, val);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(camel).collect()),
        _ => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn proto_names_become_json_names_outside_opaque_values() {
        let p = json!({"message": {"message_id": "m", "context_id": "c", "parts": [{"text": "x", "media_type": "text/plain"}], "metadata": {"a_b": 1}},
                       "configuration": {"history_length": 2, "historyLength": 3}});
        let c = camel(&p);
        assert_eq!(c["message"]["messageId"], "m");
        assert_eq!(c["message"]["parts"][0]["mediaType"], "text/plain");
        assert_eq!(c["message"]["metadata"], json!({"a_b": 1}));
        assert_eq!(c["configuration"], json!({"historyLength": 3}));
    }
}
