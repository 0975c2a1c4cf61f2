//! The configuration as TOML for people to read, without its secrets.

use super::tenants::Credential;
use super::Config;

impl Config {
    /// The configuration as TOML, with every secret replaced by `"<redacted>"`.
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        const R: &str = "<redacted>";
        let mut c = self.clone();
        for login in c.oci.auth.values_mut() {
            for secret in [&mut login.password, &mut login.token].into_iter().filter(|s| !s.is_empty()) {
                *secret = R.into();
            }
        }
        for secret in [&mut c.admin.token, &mut c.auth.token_secret] {
            if !secret.is_empty() {
                *secret = R.into();
            }
        }
        if let Some(at) = c.storage.url.find('@') {
            // postgres://user:password@host/db: keep the user, hide the password.
            if let Some(colon) = c.storage.url[..at].rfind(':').filter(|&i| !c.storage.url[..i].ends_with('/') && c.storage.url[..i].contains("//")) {
                c.storage.url.replace_range(colon + 1..at, R);
            }
        }
        for t in &mut c.tenants {
            for cred in t.api_keys.iter_mut().chain(t.bearer_tokens.iter_mut()) {
                let principal = cred.principal().map(String::from);
                *cred = Credential::WithPrincipal { secret: R.into(), principal };
            }
            if let Some(credentials) = &mut t.credentials {
                credentials.redact();
            }
            if let Some(j) = &mut t.jwt {
                if !j.secret.is_empty() {
                    j.secret = R.into();
                }
            }
            if let Some(f) = &mut t.federation {
                for issuer in f.trusted_issuers.iter_mut().filter(|i| !i.secret.is_empty()) {
                    issuer.secret = R.into();
                }
                // What this gateway presents to a peer: its method stays, every other field goes.
                for auth in f.peers.iter_mut().filter_map(|p| p.auth.as_mut()).filter_map(|a| a.as_object_mut()) {
                    for (key, value) in auth.iter_mut().filter(|(k, _)| k.as_str() != "method") {
                        *value = serde_json::Value::String(format!("{R} ({key})"));
                    }
                }
            }
        }
        Ok(toml::to_string(&c)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_toml_without_secrets() {
        let c: Config = toml::from_str(
            "[admin]\ntoken=\"adm1n\"\n[storage]\nurl=\"postgres://u:pw@h/db\"\n[[tenants]]\nid=\"a\"\napi_keys=[\"k1\", {secret=\"k2\", principal=\"bob\"}]\njwt={secret=\"s3cr3t\"}",
        )
        .unwrap();
        let text = c.to_redacted_toml().unwrap();
        for secret in ["adm1n", "pw@", "k1", "k2", "s3cr3t"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let federated: Config = toml::from_str(
            "[[tenants]]\nid=\"a\"\n[tenants.federation]\nsystem_id=\"sys-a\"\ntrusted_issuers=[{issuer=\"idp\", secret=\"issuer-secret-0123456789\"}]\n[[tenants.federation.peers]]\nsystem_id=\"sys-b\"\nprincipal=\"peer-b\"\nauth={method=\"api-key\", credential=\"peer-credential\"}",
        )
        .unwrap();
        let shown = federated.to_redacted_toml().unwrap();
        assert!(shown.contains("api-key") && shown.contains("idp"), "{shown}");
        for secret in ["issuer-secret-0123456789", "peer-credential"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(text.contains("bob") && text.contains("postgres://u:<redacted>@h/db"), "{text}");
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.tenants[0].api_keys.len(), 2);
    }
}
