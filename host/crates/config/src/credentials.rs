//! A tenant's credentials broker (`[tenants.credentials]`): its providers,
//! who may get what, the secrets' form (`env:NAME` or the value), and the
//! pattern rule grants and provider scopes share.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::bail;
use serde::{Deserialize, Serialize};

/// Absent, the tenant has no broker and `cred/get` and `cred/list` answer 11000.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct CredentialsConfig {
    /// Providers by name; each serves the scopes it names, no scope two providers.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Who may get what. A principal no grant names gets nothing.
    pub grants: Vec<GrantConfig>,
}

/// Where credentials come from.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProviderConfig {
    /// Secrets from the configuration (or the environment), one per scope.
    Static(StaticProvider),
    /// Tokens from an OAuth 2.0 token endpoint (client credentials grant).
    Oauth2(OAuth2Provider),
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct StaticProvider {
    /// Scope (exact) → the credential handed out for it.
    pub secrets: BTreeMap<String, StaticSecret>,
}

/// One static credential: `value` for `bearer_token` (`{token}`) and
/// `api_key` (`{apiKey}`), or `fields` as the credential object itself
/// (`aws_credentials` needs `accessKeyId` and `secretAccessKey`).
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct StaticSecret {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<EnvSecret>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, EnvSecret>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuth2Provider {
    /// `https://…`, or `http://` to a loopback address.
    pub token_url: String,
    pub client_id: String,
    pub client_secret: EnvSecret,
    /// MAP scopes it serves (exact, or ending in `*`).
    pub scopes: Vec<String>,
    /// The OAuth scope asked for a MAP scope; one not listed is asked as it is.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub oauth_scopes: BTreeMap<String, String>,
    /// The whole exchange (connect, request, response) must end within this.
    pub timeout_ms: u64,
}

impl Default for OAuth2Provider {
    fn default() -> Self {
        OAuth2Provider {
            token_url: String::new(),
            client_id: String::new(),
            client_secret: EnvSecret::default(),
            scopes: Vec::new(),
            oauth_scopes: BTreeMap::new(),
            timeout_ms: 10_000,
        }
    }
}

/// A principal (or several) may get scopes on resources.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct GrantConfig {
    /// The principal the session authenticated as (exact, or ending in `*`).
    pub principal: String,
    pub scopes: Vec<String>,
    pub resources: Vec<String>,
}

/// A broker secret: `env:NAME` (read from the environment when the configuration
/// is applied, so the file holds no secret) or the value itself. Neither
/// `Debug` nor the printed configuration shows a value.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct EnvSecret(String);

const REDACTED: &str = "<redacted>";

impl EnvSecret {
    pub fn new(text: impl Into<String>) -> EnvSecret {
        EnvSecret(text.into())
    }

    /// The environment variable it names, if it names one.
    pub fn env_name(&self) -> Option<&str> {
        self.0.strip_prefix("env:")
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty() || self.env_name().is_some_and(str::is_empty)
    }

    /// The secret's value; `Err` names the variable that is not set.
    pub fn reveal(&self) -> anyhow::Result<String> {
        match self.env_name() {
            Some(name) => std::env::var(name).map_err(|_| anyhow::anyhow!("the environment variable {name} is not set")),
            None => Ok(self.0.clone()),
        }
    }

    /// As printed: an `env:` reference stays (it names no secret), a value does not.
    fn redacted(&self) -> EnvSecret {
        match self.env_name() {
            Some(_) => self.clone(),
            None => EnvSecret(REDACTED.into()),
        }
    }
}

impl fmt::Debug for EnvSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.env_name() {
            Some(_) => write!(f, "{:?}", self.0),
            None => f.write_str(REDACTED),
        }
    }
}

/// Grants and provider scopes name things exactly, or by a prefix ending
/// in `*` (`acme/*`, `github:*`; `*` alone is anything).
pub fn pattern_matches(pattern: &str, value: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix),
        None => pattern == value,
    }
}

/// Whether some value matches both patterns.
pub fn patterns_overlap(a: &str, b: &str) -> bool {
    match (a.strip_suffix('*'), b.strip_suffix('*')) {
        (Some(p), Some(q)) => p.starts_with(q) || q.starts_with(p),
        (Some(p), None) => b.starts_with(p),
        (None, Some(q)) => a.starts_with(q),
        (None, None) => a == b,
    }
}

fn check_pattern(what: &str, p: &str) -> anyhow::Result<()> {
    let star_inside = p.trim_end_matches('*').contains('*') || p.ends_with("**");
    if p.is_empty() || p.chars().any(char::is_whitespace) || star_inside {
        bail!("{what} {p:?} must be a name, or a prefix ending in one `*`, without spaces");
    }
    Ok(())
}

const CREDENTIAL_TYPES: &[&str] = &["bearer_token", "api_key", "aws_credentials"];

impl CredentialsConfig {
    /// The scopes each provider serves, in provider order.
    pub fn provider_scopes(&self) -> Vec<(&str, Vec<&str>)> {
        fn scopes(p: &ProviderConfig) -> Vec<&str> {
            match p {
                ProviderConfig::Static(s) => s.secrets.keys().map(String::as_str).collect(),
                ProviderConfig::Oauth2(o) => o.scopes.iter().map(String::as_str).collect(),
            }
        }
        self.providers.iter().map(|(name, p)| (name.as_str(), scopes(p))).collect()
    }

    /// Every provider complete, no scope served twice, every grant's scopes served.
    pub(super) fn check(&self, tenant: &str) -> anyhow::Result<()> {
        let at = |what: String| format!("tenant {tenant:?}: credentials: {what}");
        if self.providers.is_empty() {
            bail!(at("at least one provider is needed ([tenants.credentials.providers.NAME] with type = \"static\" or \"oauth2\")".into()));
        }
        for (name, p) in &self.providers {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                bail!(at(format!("provider name {name:?} must be letters, digits, - and _")));
            }
            let checked = match p {
                ProviderConfig::Static(s) => s.check(),
                ProviderConfig::Oauth2(o) => o.check(),
            };
            checked.map_err(|e| anyhow::anyhow!(at(format!("provider {name:?}: {e}"))))?;
        }
        let served = self.provider_scopes();
        for (i, (a, scopes_a)) in served.iter().enumerate() {
            for (b, scopes_b) in &served[i + 1..] {
                if let Some((x, y)) = scopes_a.iter().flat_map(|x| scopes_b.iter().map(move |y| (x, y))).find(|(x, y)| patterns_overlap(x, y)) {
                    bail!(at(format!("scope {x:?} of provider {a:?} overlaps {y:?} of provider {b:?}: a scope must lead to one provider")));
                }
            }
        }
        for g in &self.grants {
            g.check(&served).map_err(|e| anyhow::anyhow!(at(format!("grant for {:?}: {e}", g.principal))))?;
        }
        Ok(())
    }

    /// Every secret value as `<redacted>` (`env:` references stay).
    pub(super) fn redact(&mut self) {
        for p in self.providers.values_mut() {
            match p {
                ProviderConfig::Static(s) => {
                    for secret in s.secrets.values_mut() {
                        secret.value = secret.value.as_ref().map(EnvSecret::redacted);
                        secret.fields.values_mut().for_each(|f| *f = f.redacted());
                    }
                }
                ProviderConfig::Oauth2(o) => o.client_secret = o.client_secret.redacted(),
            }
        }
    }
}

impl StaticProvider {
    fn check(&self) -> anyhow::Result<()> {
        if self.secrets.is_empty() {
            bail!("a static provider needs secrets = {{ \"<scope>\" = {{ type = \"bearer_token\", value = \"env:NAME\" }} }}");
        }
        for (scope, s) in &self.secrets {
            if scope.is_empty() || scope.contains('*') || scope.chars().any(char::is_whitespace) {
                bail!("secret scope {scope:?} must be one scope (no `*`, no spaces)");
            }
            if !CREDENTIAL_TYPES.contains(&s.kind.as_str()) {
                bail!("secret for {scope:?}: type must be one of {CREDENTIAL_TYPES:?}, not {:?}", s.kind);
            }
            match (&s.value, s.fields.is_empty()) {
                (Some(_), false) | (None, true) => bail!("secret for {scope:?}: give either value or fields"),
                (Some(_), true) if s.kind == "aws_credentials" => {
                    bail!("secret for {scope:?}: aws_credentials takes fields (accessKeyId, secretAccessKey, sessionToken)")
                }
                _ => {}
            }
            if s.kind == "aws_credentials" && !(s.fields.contains_key("accessKeyId") && s.fields.contains_key("secretAccessKey")) {
                bail!("secret for {scope:?}: aws_credentials fields need accessKeyId and secretAccessKey");
            }
            if s.value.iter().chain(s.fields.values()).any(EnvSecret::is_empty) {
                bail!("secret for {scope:?}: a value or field is empty");
            }
        }
        Ok(())
    }
}

impl OAuth2Provider {
    fn check(&self) -> anyhow::Result<()> {
        check_token_url(&self.token_url)?;
        if self.client_id.is_empty() || self.client_secret.is_empty() {
            bail!("an oauth2 provider needs client_id and client_secret (\"env:NAME\" keeps the secret out of the file)");
        }
        if self.scopes.is_empty() {
            bail!("an oauth2 provider needs scopes: the MAP scopes it serves");
        }
        for s in &self.scopes {
            check_pattern("scope", s)?;
        }
        if let Some(s) = self.oauth_scopes.keys().find(|k| !self.scopes.iter().any(|p| pattern_matches(p, k))) {
            bail!("oauth_scopes names {s:?}, which is not among its scopes");
        }
        if !(1..=120_000).contains(&self.timeout_ms) {
            bail!("timeout_ms must be between 1 and 120000");
        }
        Ok(())
    }
}

/// `https://`, or plain `http://` only to this host (a secret never crosses a network in clear).
fn check_token_url(url: &str) -> anyhow::Result<()> {
    let uri: http::Uri = url.parse().map_err(|e| anyhow::anyhow!("token_url {url:?} is not a URL: {e}"))?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        bail!("token_url {url:?} holds a user or password: give them as client_id and client_secret");
    }
    let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match uri.scheme_str() {
        Some("https") if !host.is_empty() => Ok(()),
        Some("http") if loopback => Ok(()),
        Some("http") => bail!("token_url {url:?}: plain http:// is allowed to a loopback address only; use https://"),
        _ => bail!("token_url {url:?} must be an https:// URL"),
    }
}

impl GrantConfig {
    fn check(&self, served: &[(&str, Vec<&str>)]) -> anyhow::Result<()> {
        check_pattern("principal", &self.principal)?;
        if self.scopes.is_empty() || self.resources.is_empty() {
            bail!("a grant names its scopes and resources (\"*\" for any resource)");
        }
        for s in &self.scopes {
            check_pattern("scope", s)?;
            if !served.iter().flat_map(|(_, scopes)| scopes).any(|p| patterns_overlap(p, s)) {
                bail!("no provider serves scope {s:?}");
            }
        }
        for r in &self.resources {
            check_pattern("resource", r)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    const GOOD: &str = r#"
[[tenants]]
id = "acme"
[tenants.credentials.providers.github]
type = "static"
secrets = { "github:repo:read" = { type = "bearer_token", value = "ghp-literal" }, "aws:s3" = { type = "aws_credentials", fields = { accessKeyId = "AKIA", secretAccessKey = "env:AWS_SECRET" } } }
[tenants.credentials.providers.corp]
type = "oauth2"
token_url = "https://idp.example/token"
client_id = "gw"
client_secret = "oauth-literal"
scopes = ["corp:*"]
[[tenants.credentials.grants]]
principal = "alice"
scopes = ["github:repo:read", "corp:*"]
resources = ["acme/*"]
"#;

    fn config(text: &str) -> Config {
        toml::from_str(&format!("[auth]\nanonymous_tenant = \"\"\n{text}")).unwrap()
    }

    #[test]
    fn patterns_are_exact_or_a_prefix() {
        assert!(pattern_matches("acme/*", "acme/frontend") && pattern_matches("*", "x") && pattern_matches("a", "a"));
        assert!(!pattern_matches("acme/*", "acmex/y") && !pattern_matches("a", "ab"));
        assert!(patterns_overlap("github:*", "github:repo:read") && patterns_overlap("git*", "github:*"));
        assert!(!patterns_overlap("github:*", "gitlab:*") && !patterns_overlap("a", "b"));
    }

    #[test]
    fn a_good_broker_passes_and_prints_without_secrets() {
        let c = config(GOOD);
        c.validate().unwrap();
        let text = c.to_redacted_toml().unwrap();
        for secret in ["ghp-literal", "oauth-literal", "AKIA"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("env:AWS_SECRET"), "references stay: {text}");
        let debug = format!("{c:?}");
        assert!(!debug.contains("ghp-literal") && !debug.contains("oauth-literal"), "{debug}");
        let back: Config = toml::from_str(&text).unwrap();
        back.validate().unwrap();
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (GOOD.replace("https://idp.example/token", "http://idp.example/token"), "loopback"),
            (GOOD.replace("https://idp.example/token", "http://127.0.0.1:9/token"), ""),
            (GOOD.replace("https://idp.example/token", "https://gw:pw@idp.example/token"), "user or password"),
            (GOOD.replace("\"corp:*\"]\n[[", "\"github:*\"]\n[["), "overlaps"),
            (GOOD.replace("\"github:repo:read\", \"corp:*\"", "\"gitlab:read\""), "no provider serves"),
            (GOOD.replace("resources = [\"acme/*\"]", "resources = []"), "scopes and resources"),
            (GOOD.replace("resources = [\"acme/*\"]", "resources = [\"a*b\"]"), "prefix ending"),
            (GOOD.replace("type = \"bearer_token\"", "type = \"password\""), "type must be"),
            (GOOD.replace("accessKeyId = \"AKIA\", ", ""), "accessKeyId"),
            (GOOD.replace("client_id = \"gw\"", "client_id = \"\""), "client_id"),
        ];
        for (text, needle) in cases {
            let result = config(&text).validate();
            match needle {
                "" => result.unwrap(),
                _ => {
                    let e = result.unwrap_err().to_string();
                    assert!(e.contains(needle) && e.contains("tenant \"acme\""), "{needle}: {e}");
                }
            }
        }
        assert!(toml::from_str::<Config>(&GOOD.replace("client_id", "client_name")).is_err(), "unknown fields");
    }
}
