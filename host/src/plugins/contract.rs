//! What the host checks in a plugin's answer to a JSON-RPC call before it
//! reaches a client: a result is JSON within the size and nesting limits;
//! an error has a code of the plugin's own range (or a JSON-RPC one) and
//! fits the limit. `Err` says how the plugin broke the contract.

use serde_json::value::RawValue;
use serde_json::Value;

use crate::rpc::RpcError;

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

/// A result of at most `max` bytes.
pub fn check_result(text: String, max: usize) -> Result<Box<RawValue>, String> {
    if text.len() > max {
        return Err(format!("returned an oversized result ({} bytes; the limit is {max})", text.len()));
    }
    if json_depth(&text) > MAX_JSON_DEPTH {
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
    if data.as_deref().is_some_and(|d| json_depth(d) > MAX_JSON_DEPTH) {
        return Err(format!("returned error data nested deeper than {MAX_JSON_DEPTH} levels"));
    }
    let mut err = RpcError::new(code, message);
    if let Some(data) = data.and_then(|d| serde_json::from_str::<Value>(&d).ok()) {
        err.data = Some(data);
    }
    Ok(err)
}
