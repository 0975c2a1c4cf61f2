//! The checks mail makes on request params beyond their shape (which
//! `Call::params` decodes): every failure is -32602.

use map_plugin_sdk::{Error, Result};

pub use map_plugin_sdk::params::OneOrMany;

/// A page size: `default` when absent, at least 1, at most `max`.
pub fn limit(given: Option<u64>, default: usize, max: usize) -> usize {
    given.map_or(default, |n| (n as usize).clamp(1, max))
}

/// A required, non-empty id.
pub fn id<'a>(name: &str, value: &'a str) -> Result<&'a str> {
    if value.trim().is_empty() {
        return Err(Error::invalid_params(format!("{name} must be a non-empty string")));
    }
    Ok(value)
}

/// A cursor this plugin handed out: an id with the expected prefix.
pub fn cursor<'a>(value: &'a str, prefix: &str) -> Result<&'a str> {
    if value.starts_with(prefix) && !value.contains('/') {
        Ok(value)
    } else {
        Err(Error::invalid_params(format!("Invalid cursor {value:?}")))
    }
}
