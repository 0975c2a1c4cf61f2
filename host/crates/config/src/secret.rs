//! Secrets of the configuration in types no `Debug` shows: `Secret` (keys,
//! tokens, passwords), `SecretUrl` (a URL that may hold a password) and
//! `PluginSettings` (free-form settings whose secrets are known by their names).

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

/// A plugin's free-form settings (`[plugins.NAME] config`, a tenant's
/// `plugin_config.NAME`). The host does not know their fields, so a value
/// whose key names a secret (`secret_name`) is redacted wherever the host
/// shows them: `Debug` and `redacted`.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct PluginSettings(serde_json::Value);

impl PluginSettings {
    pub fn new(value: serde_json::Value) -> PluginSettings {
        PluginSettings(value)
    }

    /// The settings, secrets and all, to hand to the plugin.
    pub fn expose(&self) -> &serde_json::Value {
        &self.0
    }

    /// The settings with the value of every key that names a secret, at
    /// any depth, replaced by `<redacted>`, and the password of every URL.
    pub fn redacted(&self) -> PluginSettings {
        let mut value = self.0.clone();
        redact_named(&mut value);
        PluginSettings(value)
    }
}

impl fmt::Debug for PluginSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.redacted().0)
    }
}

/// Words that make a setting's name the name of a secret.
const SECRET_WORDS: &[&str] = &["key", "secret", "token", "password", "passwd", "passphrase", "bearer", "credential", "authorization", "cookie"];

/// Whether a setting named `name` holds a secret: its name, in any case and
/// with `-`, `_` and `.` left out, contains one of `SECRET_WORDS`
/// (`cardSigningKey`, `api_key`, `bearer`, `clientSecret`, `Authorization`).
pub fn secret_name(name: &str) -> bool {
    let name: String = name.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect();
    SECRET_WORDS.iter().any(|w| name.contains(w))
}

fn redact_named(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if secret_name(key) && !v.is_null() {
                    *v = serde_json::Value::String(R.into());
                } else {
                    redact_named(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_named),
        serde_json::Value::String(text) => *text = redact_url(text),
        _ => {}
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

    #[test]
    fn plugin_settings_lose_values_named_secrets() {
        for name in ["cardSigningKey", "api_key", "bearer", "clientSecret", "Authorization", "refresh-token", "PASSWORD", "credentials"] {
            assert!(secret_name(name), "{name}");
        }
        for name in ["url", "headers", "peers", "timeoutMs", "domain", "returnImmediately"] {
            assert!(!secret_name(name), "{name}");
        }
        let settings = PluginSettings::new(serde_json::json!({
            "cardSigningKey": "ed25519-secret:abc", "name": "gw",
            "peers": {"reports": {"url": "https://u:pw@r.example/a2a", "bearer": "b3arer", "headers": {"x-team": "ops", "Authorization": "Basic zz"}}},
            "list": [{"token": 7}], "signingKey": null,
        }));
        let shown = format!("{settings:?}");
        for secret in ["abc", "pw@", "b3arer", "Basic zz", "7"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        for kept in ["\"name\":\"gw\"", "ops", "https://u:<redacted>@r.example/a2a", "\"signingKey\":null"] {
            assert!(shown.contains(kept), "{kept} not in {shown}");
        }
        assert_eq!(settings.expose()["peers"]["reports"]["bearer"], "b3arer");
    }
}
