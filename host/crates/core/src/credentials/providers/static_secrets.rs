//! Secrets from the configuration, one per scope; `env:NAME` values are
//! read from the environment when the configuration is applied.

use std::collections::HashMap;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use super::{Issued, Provider, ProviderError};
use map_config::StaticProvider;

pub struct StaticSecrets {
    /// Scope → (credential type, credential object).
    by_scope: HashMap<String, (String, Value)>,
}

impl StaticSecrets {
    pub fn new(config: &StaticProvider) -> anyhow::Result<StaticSecrets> {
        let mut by_scope = HashMap::new();
        for (scope, s) in &config.secrets {
            let read = |secret: &map_config::EnvSecret| secret.reveal().map_err(|e| anyhow::anyhow!("the secret for {scope:?}: {e}"));
            let credential = match &s.value {
                Some(value) => {
                    let key = if s.kind == "api_key" { "apiKey" } else { "token" };
                    let mut object = Map::new();
                    object.insert(key.into(), Value::String(read(value)?));
                    if s.kind == "bearer_token" {
                        object.insert("tokenType".into(), Value::from("Bearer"));
                    }
                    object
                }
                None => s.fields.iter().map(|(k, v)| Ok((k.clone(), Value::String(read(v)?)))).collect::<anyhow::Result<Map<_, _>>>()?,
            };
            by_scope.insert(scope.clone(), (s.kind.clone(), Value::Object(credential)));
        }
        Ok(StaticSecrets { by_scope })
    }
}

impl Provider for StaticSecrets {
    fn kind(&self) -> &'static str {
        "static"
    }

    fn issue<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Issued, ProviderError>> {
        let issued = match self.by_scope.get(scope) {
            Some((kind, credential)) => Ok(Issued { credential_type: kind.clone(), credential: credential.clone(), expires_at: None }),
            None => Err(ProviderError::Unavailable(format!("no secret is configured for scope {scope:?}"))),
        };
        Box::pin(std::future::ready(issued))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn values_and_fields_become_credential_objects() {
        std::env::set_var("MAP_TEST_STATIC_SECRET", "from-env");
        let config: StaticProvider = toml::from_str(
            r#"secrets = { "a" = { type = "bearer_token", value = "env:MAP_TEST_STATIC_SECRET" }, "b" = { type = "api_key", value = "k" }, "c" = { type = "aws_credentials", fields = { accessKeyId = "id", secretAccessKey = "sk" } } }"#,
        )
        .unwrap();
        let p = StaticSecrets::new(&config).unwrap();
        let a = p.issue("a").await.unwrap();
        assert_eq!((a.credential_type.as_str(), a.credential), ("bearer_token", serde_json::json!({"token": "from-env", "tokenType": "Bearer"})));
        assert_eq!(p.issue("b").await.unwrap().credential, serde_json::json!({"apiKey": "k"}));
        assert_eq!(p.issue("c").await.unwrap().credential, serde_json::json!({"accessKeyId": "id", "secretAccessKey": "sk"}));
        assert!(matches!(p.issue("d").await, Err(ProviderError::Unavailable(_))));
        let missing: StaticProvider = toml::from_str(r#"secrets = { "a" = { type = "api_key", value = "env:MAP_TEST_NOT_SET_ANYWHERE" } }"#).unwrap();
        let e = StaticSecrets::new(&missing).err().unwrap().to_string();
        assert!(e.contains("MAP_TEST_NOT_SET_ANYWHERE") && e.contains("\"a\""), "{e}");
    }
}
