//! Request params: decoded from the raw JSON text into a serde type, and
//! checked. Every failure is -32602 (invalid params) with a message that
//! names the method and what is wrong (serde's own words: the missing
//! field, the unexpected type, where).

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::{Error, Result};

/// Decode `text` (the params of `method`) into `T`.
pub fn parse<T: DeserializeOwned>(method: &str, text: &str) -> Result<T> {
    parse_borrowed(method, text)
}

/// Decode `text` into a `T` that may borrow from it (`&str`, `&RawValue`),
/// so large values are not copied.
pub fn parse_borrowed<'a, T: Deserialize<'a>>(method: &str, text: &'a str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::invalid_params(format!("Invalid params for {method}: {e}")))
}

/// An identifier the client chose: not empty, at most `max_bytes` long, and
/// without U+10FFFF (the host store reserves it as its range end), so it is
/// safe inside a storage key.
pub fn check_id(what: &str, value: &str, max_bytes: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid_params(format!("{what} must not be empty")));
    }
    if value.len() > max_bytes {
        return Err(Error::invalid_params(format!("{what} is longer than {max_bytes} bytes")));
    }
    if value.contains('\u{10FFFF}') {
        return Err(Error::invalid_params(format!("{what} may not contain U+10FFFF")));
    }
    Ok(())
}

/// A page size: `default` when absent, 0 refused, at most `max`.
pub fn page_size(given: Option<u32>, default: u32, max: u32) -> Result<u32> {
    match given {
        None => Ok(default),
        Some(0) => Err(Error::invalid_params("limit must be at least 1")),
        Some(n) => Ok(n.min(max)),
    }
}

/// A value given either as one item or as a list (`"a"` or `["a", "b"]`).
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub fn into_vec(self) -> Vec<T> {
        match self {
            OneOrMany::One(x) => vec![x],
            OneOrMany::Many(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes::INVALID_PARAMS;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Get {
        note_id: String,
        #[serde(default)]
        limit: Option<u32>,
    }

    #[test]
    fn malformed_params_are_invalid_params_naming_the_method_and_field() {
        let e = parse::<Get>("notes/get", "{}").unwrap_err();
        assert_eq!(e.code(), Some(INVALID_PARAMS));
        assert!(e.message().starts_with("Invalid params for notes/get: missing field `noteId`"), "{}", e.message());
        let e = parse::<Get>("notes/get", r#"{"noteId": 5}"#).unwrap_err();
        assert!(e.message().contains("invalid type"), "{}", e.message());
        let ok = parse::<Get>("notes/get", r#"{"noteId":"n","limit":3}"#).unwrap();
        assert_eq!((ok.note_id.as_str(), ok.limit), ("n", Some(3)));
        assert_eq!(parse::<Get>("m", "[1,").unwrap_err().code(), Some(INVALID_PARAMS));
    }

    #[test]
    fn borrowed_params_point_into_the_request() {
        #[derive(Deserialize)]
        struct Put<'a> {
            #[serde(borrow)]
            body: &'a str,
        }
        let text = r#"{"body": "a long text"}"#;
        let p: Put = parse_borrowed("m", text).unwrap();
        assert_eq!(p.body, "a long text");
        assert!(text.as_ptr() <= p.body.as_ptr() && p.body.as_ptr() < text[text.len()..].as_ptr(), "not copied");
    }

    #[test]
    fn ids_and_page_sizes_are_checked() {
        assert!(check_id("id", "", 8).is_err());
        assert!(check_id("id", "123456789", 8).is_err());
        assert!(check_id("id", "a\u{10FFFF}", 8).is_err());
        assert!(check_id("id", "a/b", 8).is_ok());
        assert_eq!(page_size(None, 50, 500).unwrap(), 50);
        assert_eq!(page_size(Some(0), 50, 500).unwrap_err().code(), Some(INVALID_PARAMS));
        assert_eq!(page_size(Some(10_000), 50, 500).unwrap(), 500);
    }

    #[test]
    fn one_or_many() {
        let one: OneOrMany<String> = serde_json::from_str(r#""a""#).unwrap();
        let many: OneOrMany<String> = serde_json::from_str(r#"["a","b"]"#).unwrap();
        assert_eq!(one.into_vec(), ["a"]);
        assert_eq!(many.into_vec(), ["a", "b"]);
    }
}
