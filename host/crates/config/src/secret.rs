//! Secrets of the configuration in types no `Debug` shows: `Secret` (keys,
//! tokens, passwords) and `SecretUrl` (a URL that may hold a password).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What is shown instead of a secret.
pub const R: &str = "<redacted>";

/// A secret of the configuration (a key, a token, a password, a peer's
/// credentials): `Debug` prints `<redacted>`; `expose` gives the value where
/// it is used.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct Secret<T = String>(T);

impl<T> Secret<T> {
    pub fn new(value: T) -> Secret<T> {
        Secret(value)
    }

    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl Secret {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(R)
    }
}

/// A URL that may carry a password (`postgres://user:password@host/db`):
/// `Debug` and `shown` print it without the password.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> SecretUrl {
        SecretUrl(url.into())
    }

    /// The URL, password and all, to connect with.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The URL without its password, for messages.
    pub fn shown(&self) -> String {
        redact_url(&self.0)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.shown())
    }
}

/// A URL with the password of its user information (`user:password@`)
/// replaced by `<redacted>`; the user stays. A URL without one is returned as it is.
pub fn redact_url(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else { return url.to_string() };
    let authority_end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
    let Some(at) = url[start..authority_end].rfind('@').map(|i| start + i) else { return url.to_string() };
    match url[start..at].find(':').map(|i| start + i) {
        Some(colon) => format!("{}{R}{}", &url[..colon + 1], &url[at..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_only_their_password() {
        assert_eq!(redact_url("postgres://u:pw@h:5432/db?x=1"), "postgres://u:<redacted>@h:5432/db?x=1");
        assert_eq!(redact_url("nats://u:p@ss@h"), "nats://u:<redacted>@h");
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("postgres://h/db?mail=a@b"), "postgres://h/db?mail=a@b");
        assert_eq!(redact_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
    }
}
