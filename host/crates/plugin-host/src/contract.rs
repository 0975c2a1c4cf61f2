//! What the host checks in a plugin's answer to a JSON-RPC call before it
//! reaches a client: a result is JSON within the size and nesting limits;
//! an error has a code of the plugin's own range (or a JSON-RPC one) and
//! fits the limit. `Err` says how the plugin broke the contract.

use serde_json::value::RawValue;
use serde_json::Value;

use map_protocol::rpc::RpcError;

/// Deepest JSON nesting a plugin may answer with: many clients cannot parse more.
pub const MAX_JSON_DEPTH: usize = 128;

/// The deepest nesting of arrays and objects in JSON text (strings skipped).
pub fn json_depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Whether JSON text nests deeper than `MAX_JSON_DEPTH`. Nesting is never
/// deeper than the number of `[` and `{` bytes, which a plain count (that
/// the compiler vectorises) finds about ten times faster than the exact
/// walk; almost every answer is settled by the count alone.
fn too_deep(text: &str) -> bool {
    let openers = text.bytes().fold(0usize, |n, b| n + usize::from(b == b'[' || b == b'{'));
    openers > MAX_JSON_DEPTH && json_depth(text) > MAX_JSON_DEPTH
}

/// A result of at most `max` bytes.
pub fn check_result(text: String, max: usize) -> Result<Box<RawValue>, String> {
    if text.len() > max {
        return Err(format!("returned an oversized result ({} bytes; the limit is {max})", text.len()));
    }
    if too_deep(&text) {
        return Err(format!("returned JSON nested deeper than {MAX_JSON_DEPTH} levels"));
    }
    RawValue::from_string(text).map_err(|e| format!("returned malformed JSON ({e})"))
}

/// Keep a plugin's error only if its code is its own (`range`, inclusive)
/// or a JSON-RPC one, and it fits in `max` bytes.
pub fn check_error(code: i64, message: String, data: Option<String>, range: (i64, i64), max: usize) -> Result<RpcError, String> {
    let (lo, hi) = range;
    // Every JSON-RPC code, -32603 included (as wit/types.wit says): a
    // plugin may report its own internal error and keep its instance.
    let standard = (-32700..=-32600).contains(&code);
    if !standard && !(lo..=hi).contains(&code) {
        let head: String = message.chars().take(200).collect();
        return Err(format!("returned error code {code} outside its range {lo}..={hi}: {head}"));
    }
    let size = message.len() + data.as_ref().map_or(0, String::len);
    if size > max {
        return Err(format!("returned an oversized error ({size} bytes; the limit is {max})"));
    }
    if data.as_deref().is_some_and(too_deep) {
        return Err(format!("returned error data nested deeper than {MAX_JSON_DEPTH} levels"));
    }
    let mut err = RpcError::new(code, message);
    if let Some(data) = data.and_then(|d| serde_json::from_str::<Value>(&d).ok()) {
        err.data = Some(data);
    }
    Ok(err)
}

/// A plugin's error data with `retryAfterMs` (a store call of the call
/// found the database unreachable): an object gains it unless it has one,
/// absent data becomes `{"retryAfterMs": …}`, other data stays as it is.
pub fn with_retry_after(data: Option<String>, ms: u64) -> Option<String> {
    let mut value = match data.as_deref().map(serde_json::from_str::<Value>) {
        None => Value::Object(Default::default()),
        Some(Ok(v @ Value::Object(_))) => v,
        Some(_) => return data,
    };
    value.as_object_mut().expect("an object").entry("retryAfterMs").or_insert(Value::from(ms));
    Some(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn results_nested_to_the_limit_pass_and_deeper_ones_are_refused() {
        assert!(check_result(nested(MAX_JSON_DEPTH), 1 << 20).is_ok());
        let err = check_result(nested(MAX_JSON_DEPTH + 1), 1 << 20).unwrap_err();
        assert!(err.contains("nested deeper"), "{err}");
    }

    #[test]
    fn many_brackets_in_strings_or_side_by_side_are_not_depth() {
        // More openers than the limit, but shallow: the exact walk decides.
        let in_string = format!(r#"{{"text":"{}"}}"#, "[{".repeat(300));
        assert!(check_result(in_string, 1 << 20).is_ok());
        let siblings = format!("[{}]", vec!["{}"; 500].join(","));
        assert!(check_result(siblings, 1 << 20).is_ok());
    }

    #[test]
    fn retry_after_joins_object_data_or_stands_alone() {
        assert_eq!(with_retry_after(None, 250).as_deref(), Some(r#"{"retryAfterMs":250}"#));
        assert_eq!(with_retry_after(Some(r#"{"retryable":true}"#.into()), 250).as_deref(), Some(r#"{"retryAfterMs":250,"retryable":true}"#));
        assert_eq!(with_retry_after(Some(r#"{"retryAfterMs":9}"#.into()), 250).as_deref(), Some(r#"{"retryAfterMs":9}"#));
        assert_eq!(with_retry_after(Some("[1]".into()), 250).as_deref(), Some("[1]"));
    }

    #[test]
    fn error_data_is_held_to_the_same_depth() {
        assert!(check_error(-32602, "bad".into(), Some(nested(MAX_JSON_DEPTH)), (0, -1), 1 << 20).is_ok());
        assert!(check_error(-32602, "bad".into(), Some(nested(MAX_JSON_DEPTH + 1)), (0, -1), 1 << 20).is_err());
    }
}
