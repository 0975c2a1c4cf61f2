//! The configuration as TOML for people to read, without its secrets.

use super::secret::{Secret, SecretUrl, R};
use super::tenants::Credential;
use super::Config;

impl Config {
    /// The configuration as TOML, with every secret replaced by `"<redacted>"`.
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        let hide = |s: &mut Secret| {
            if !s.is_empty() {
                *s = Secret::new(R.into());
            }
        };
        let mut c = self.clone();
        for login in c.oci.auth.values_mut() {
            hide(&mut login.password);
            hide(&mut login.token);
        }
        hide(&mut c.admin.token);
        hide(&mut c.auth.token_secret);
        c.storage.url = SecretUrl::new(c.storage.url.shown());
        c.cluster.nats = SecretUrl::new(c.cluster.nats.shown());
        for plugin in c.plugins.iter_mut().flat_map(|p| p.values_mut()) {
            plugin.config = plugin.config.redacted();
        }
        for t in &mut c.tenants {
            t.plugin_config.values_mut().for_each(|s| *s = s.redacted());
            for cred in t.api_keys.iter_mut().chain(t.bearer_tokens.iter_mut()) {
                let principal = cred.principal().map(String::from);
                *cred = Credential::WithPrincipal { secret: Secret::new(R.into()), principal };
            }
            if let Some(credentials) = &mut t.credentials {
                credentials.redact();
            }
            if let Some(j) = &mut t.jwt {
                hide(&mut j.secret);
            }
            if let Some(f) = &mut t.federation {
                f.trusted_issuers.iter_mut().for_each(|i| hide(&mut i.secret));
                // What this gateway presents to a peer: its method stays, every other field goes.
                for auth in f.peers.iter_mut().filter_map(|p| p.auth.as_mut()) {
                    let mut shown = auth.expose().clone();
                    for (key, value) in shown.as_object_mut().into_iter().flatten().filter(|(k, _)| k.as_str() != "method") {
                        *value = serde_json::Value::String(format!("{R} ({key})"));
                    }
                    *auth = Secret::new(shown);
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

    #[test]
    fn no_debug_shows_a_secret() {
        let c: Config = toml::from_str(
            "[admin]\ntoken=\"adm1n\"\n[auth]\ntoken_secret=\"tok3n-secret\"\n[storage]\nurl=\"postgres://u:pw-db@h/db\"\n[cluster]\nnats=\"nats://n:pw-nats@h:4222\"\n\
             [oci.auth.\"r.example\"]\nusername=\"ci\"\npassword=\"pw-oci\"\n[[tenants]]\nid=\"a\"\napi_keys=[\"api-k1\", {secret=\"api-k2\", principal=\"bob\"}]\n\
             bearer_tokens=[\"bearer-b1\"]\njwt={secret=\"s3cr3t\"}\n[tenants.federation]\nsystem_id=\"sys-a\"\ntrusted_issuers=[{issuer=\"idp\", secret=\"issuer-s3cret\"}]\n\
             [[tenants.federation.peers]]\nsystem_id=\"sys-b\"\nprincipal=\"peer-b\"\nauth={method=\"api-key\", credential=\"peer-cr3d\"}",
        )
        .unwrap();
        let debug = format!("{c:?}");
        for secret in ["adm1n", "tok3n-secret", "pw-db", "pw-nats", "pw-oci", "api-k1", "api-k2", "bearer-b1", "s3cr3t", "issuer-s3cret", "peer-cr3d"] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        assert!(debug.contains("postgres://u:<redacted>@h/db") && debug.contains("bob"), "{debug}");
    }
}
