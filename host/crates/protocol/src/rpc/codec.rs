use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::RpcError;

/// One JSON-RPC call or notification from a peer, borrowed from the frame it came in.
#[derive(Debug)]
pub struct Request<'a> {
    /// `None` for a notification; otherwise the id exactly as sent (string, number or null).
    pub id: Option<Value>,
    pub method: Cow<'a, str>,
    pub params: Option<&'a RawValue>,
}

impl<'a> Request<'a> {
    #[cfg(test)]
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }

    /// Decode `params` into `T` (which may borrow strings from the frame);
    /// absent or null params decode as `{}`.
    pub fn params<T: Deserialize<'a>>(&self) -> Result<T, RpcError> {
        let text = match self.params {
            Some(raw) if raw.get() != "null" => raw.get(),
            _ => "{}",
        };
        serde_json::from_str(text).map_err(|e| RpcError::invalid_params(format!("Invalid params for {}: {e}", self.method)))
    }
}

/// What one frame (a WebSocket text frame, an NDJSON line, an HTTP body) held.
#[derive(Debug)]
pub enum Decoded<'a> {
    /// A single message. `Err` carries the id to answer with (null when unknown).
    Single(Result<Request<'a>, (Value, RpcError)>),
    /// A batch, in order. Responses (peers answering us) are dropped silently.
    Batch(Vec<Result<Request<'a>, (Value, RpcError)>>),
    /// Not JSON, or an empty batch: answer once with id null.
    Invalid(RpcError),
    /// A response from the peer (we send no requests, so there is nothing to do).
    Ignored,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<&'a str>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    // Present even when null: `"result": null` is a response too.
    #[serde(default, deserialize_with = "present")]
    result: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    error: Option<IgnoredAny>,
}

/// Distinguish a member that is null (present) from an absent one: `"id":
/// null` from a notification, `"result": null` from a request.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Decode one frame into requests, keeping each message's own error.
pub fn decode_frame(bytes: &[u8]) -> Decoded<'_> {
    // Checked once here, so the parser need not check each string again.
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => return Decoded::Invalid(RpcError::parse_error(e)),
    };
    let first = text.bytes().find(|b| !b.is_ascii_whitespace());
    if first == Some(b'[') {
        let items: Vec<&'_ RawValue> = match serde_json::from_str(text) {
            Ok(items) => items,
            Err(e) => return Decoded::Invalid(RpcError::parse_error(e)),
        };
        if items.is_empty() {
            return Decoded::Invalid(RpcError::invalid_request("Invalid Request: empty batch"));
        }
        let out = items
            .into_iter()
            .filter_map(|raw| match decode_one(raw.get()) {
                Decoded::Single(r) => Some(r),
                Decoded::Invalid(e) => Some(Err((Value::Null, e))),
                _ => None,
            })
            .collect();
        return Decoded::Batch(out);
    }
    decode_one(text)
}

fn decode_one(text: &str) -> Decoded<'_> {
    match serde_json::from_str::<Envelope>(text) {
        Ok(env) => from_envelope(env),
        // Valid JSON of the wrong shape is an invalid request; anything else a parse error.
        Err(e) => match serde_json::from_str::<Value>(text) {
            Ok(v) => {
                let id = v.get("id").filter(|id| valid_id(id)).cloned().unwrap_or(Value::Null);
                Decoded::Single(Err((id, RpcError::invalid_request(format!("Invalid Request: {e}")))))
            }
            Err(e) => Decoded::Invalid(RpcError::parse_error(e)),
        },
    }
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_) | Value::Null)
}

fn from_envelope(env: Envelope<'_>) -> Decoded<'_> {
    let id_for_error = env.id.clone().filter(valid_id).unwrap_or(Value::Null);
    let fail = |msg: &str| Decoded::Single(Err((id_for_error.clone(), RpcError::invalid_request(format!("Invalid Request: {msg}")))));
    if env.jsonrpc != Some("2.0") {
        return fail("\"jsonrpc\" must be \"2.0\"");
    }
    if env.id.as_ref().is_some_and(|id| !valid_id(id)) {
        return fail("\"id\" must be a string, a number or null");
    }
    let Some(method) = env.method else {
        if env.result.is_some() || env.error.is_some() {
            return Decoded::Ignored;
        }
        return fail("\"method\" is missing");
    };
    if let Some(p) = &env.params {
        let t = p.get().as_bytes().first().copied();
        if !matches!(t, Some(b'{') | Some(b'[') | Some(b'n')) {
            return fail("\"params\" must be an object or an array");
        }
    }
    Decoded::Single(Ok(Request { id: env.id, method, params: env.params }))
}

fn envelope(id: &Value, key: &str, size_hint: usize, body: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::with_capacity(48 + size_hint);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    serde_json::to_writer(&mut out, id).expect("ids serialise");
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
    body(&mut out);
    out.push(b'}');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn encode_result(id: &Value, result: &impl Serialize) -> String {
    envelope(id, "result", 80, |out| {
        if serde_json::to_writer(&mut *out, result).is_err() {
            out.extend_from_slice(b"null");
        }
    })
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` around JSON text the caller built itself.
pub fn encode_result_json(id: &Value, json: &str) -> String {
    envelope(id, "result", json.len(), |out| out.extend_from_slice(json.as_bytes()))
}

/// Whether any byte is a control character, `"` or `\\`: eight bytes at a
/// time, since every id written into a frame passes here.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS != 0;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        // A byte below 0x20 has none of the bits 0x20..0x80 set, unless its top bit is.
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGHS != 0;
        if control || zero_byte(w ^ (ONES * b'"' as u64)) || zero_byte(w ^ (ONES * b'\\' as u64)) {
            return true;
        }
    }
    chunks.remainder().iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// Append `s` as a JSON string literal (quoted and escaped) without allocating.
pub fn push_json_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    if !needs_escape(s.as_bytes()) {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            let _ = std::fmt::Write::write_fmt(out, format_args!("\\u{b:04x}"));
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// `{"jsonrpc":"2.0","id":…,"error":{code,message,data}}`.
pub fn encode_error(id: &Value, error: &RpcError) -> String {
    envelope(id, "error", 80, |out| serde_json::to_writer(out, &error.to_json()).expect("error serialises"))
}

/// `{"jsonrpc":"2.0","method":…,"params":…}`.
pub fn encode_notification(method: &str, params: &impl Serialize) -> String {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    serde_json::to_writer(&mut out, method).expect("method serialises");
    out.extend_from_slice(b",\"params\":");
    if serde_json::to_writer(&mut out, params).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.push(b'}');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::codes;
    use serde_json::json;

    fn single(text: &str) -> Result<Request<'_>, (Value, RpcError)> {
        match decode_frame(text.as_bytes()) {
            Decoded::Single(r) => r,
            other => panic!("expected single, got {other:?}"),
        }
    }

    #[test]
    fn keeps_id_type() {
        assert_eq!(single(r#"{"jsonrpc":"2.0","id":7,"method":"m"}"#).unwrap().id, Some(json!(7)));
        assert_eq!(single(r#"{"jsonrpc":"2.0","id":"a","method":"m"}"#).unwrap().id, Some(json!("a")));
        assert_eq!(single(r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#).unwrap().id, Some(Value::Null));
        assert!(single(r#"{"jsonrpc":"2.0","method":"m"}"#).unwrap().is_notification());
    }

    #[test]
    fn classifies_bad_frames() {
        assert!(matches!(decode_frame(b"{oops"), Decoded::Invalid(e) if e.code == codes::PARSE_ERROR));
        assert!(matches!(decode_frame(b"[]"), Decoded::Invalid(e) if e.code == codes::INVALID_REQUEST));
        let (id, e) = single(r#"{"id":3,"method":"m"}"#).unwrap_err();
        assert_eq!((id, e.code), (json!(3), codes::INVALID_REQUEST));
        let (id, e) = single(r#"{"jsonrpc":"2.0","id":4,"method":5}"#).unwrap_err();
        assert_eq!((id, e.code), (json!(4), codes::INVALID_REQUEST));
        let (id, _) = single(r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#).unwrap_err();
        assert_eq!(id, Value::Null);
        assert!(single(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#).is_err());
        assert!(matches!(decode_frame(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Decoded::Ignored));
        assert!(matches!(decode_frame(br#"{"jsonrpc":"2.0","id":1,"result":null}"#), Decoded::Ignored));
    }

    #[test]
    fn batch_keeps_order_and_errors() {
        let Decoded::Batch(items) = decode_frame(br#"[{"jsonrpc":"2.0","id":1,"method":"a"}, 1, {"jsonrpc":"2.0","method":"n"}]"#) else { panic!() };
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_ref().unwrap().method, "a");
        assert!(items[1].is_err());
        assert!(items[2].as_ref().unwrap().is_notification());
    }

    #[test]
    fn finds_every_byte_that_needs_escaping() {
        for fill in [b'a', 0x21, 0x80, 0xc3, 0xff] {
            for len in 0..20 {
                for at in 0..len {
                    for b in 0u8..=255 {
                        let mut bytes = vec![fill; len];
                        bytes[at] = b;
                        let want = b < 0x20 || b == b'"' || b == b'\\';
                        assert_eq!(needs_escape(&bytes), want, "byte {b:#x} at {at} of {len} in {fill:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn escapes_strings_as_serde_does() {
        for s in ["plain", "q\"uote", "back\\slash", "nl\n tab\t cr\r", "\u{1}\u{8}\u{c}\u{1f}\u{7f}", "ünï 😀", ""] {
            let mut out = String::from("x");
            push_json_str(&mut out, s);
            assert_eq!(out[1..], serde_json::to_string(s).unwrap());
        }
    }

    #[test]
    fn encodes_envelopes() {
        let r = encode_result(&json!(1), &json!({"ok": true}));
        assert_eq!(serde_json::from_str::<Value>(&r).unwrap(), json!({"jsonrpc":"2.0","id":1,"result":{"ok":true}}));
        let n = encode_notification("map/message", &json!({"message": {}}));
        assert_eq!(serde_json::from_str::<Value>(&n).unwrap()["method"], "map/message");
    }
}
