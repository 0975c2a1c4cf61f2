//! `[oci]`: how plugins named by `source = "oci://…"` are fetched.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::secret::Secret;

#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OciConfig {
    /// Registries (`host:port`) spoken to over plain HTTP, such as one on
    /// loopback; every other registry over HTTPS.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub insecure: Vec<String>,
    /// Credentials per registry (`host[:port]`, as in the source); absent: anonymous.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub auth: BTreeMap<String, OciAuth>,
}

/// A registry login: `username` and `password` (HTTP Basic, which the
/// registry may exchange for a bearer token), or a `token` sent as a bearer.
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OciAuth {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "Secret::is_empty")]
    pub password: Secret,
    #[serde(skip_serializing_if = "Secret::is_empty")]
    pub token: Secret,
}
