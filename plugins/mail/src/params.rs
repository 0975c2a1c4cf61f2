//! Request parameter helpers: every malformed parameter is -32602.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::{MailError, MailResult};

pub fn parse<T: DeserializeOwned>(params: &str) -> MailResult<T> {
    serde_json::from_str(params).map_err(|e| MailError::invalid_params(format!("Invalid params: {e}")))
}

/// A filter value given either as one item or as a list.
#[derive(Deserialize, Debug, Clone)]
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

/// A page size: `default` when absent, at least 1, at most `max`.
pub fn limit(given: Option<u64>, default: usize, max: usize) -> usize {
    given.map_or(default, |n| (n as usize).clamp(1, max))
}

/// A required, non-empty id.
pub fn id<'a>(name: &str, value: &'a str) -> MailResult<&'a str> {
    if value.trim().is_empty() {
        return Err(MailError::invalid_params(format!("{name} must be a non-empty string")));
    }
    Ok(value)
}

/// A cursor this plugin handed out: an id with the expected prefix.
pub fn cursor<'a>(value: &'a str, prefix: &str) -> MailResult<&'a str> {
    if value.starts_with(prefix) && !value.contains('/') {
        Ok(value)
    } else {
        Err(MailError::invalid_params(format!("Invalid cursor {value:?}")))
    }
}
