//! The checks a configuration must pass before the gateway starts on it,
//! one function per concern; the first failure is the error.

use std::collections::HashSet;

use anyhow::bail;

use super::Config;

impl Config {
    pub fn validate(&self) -> anyhow::Result<()> {
        self.check_tenants()?;
        self.check_storage()?;
        for (name, p) in self.plugins.iter().flatten() {
            p.validate(name)?;
        }
        self.check_server()?;
        self.check_tls_and_acp()?;
        self.check_cluster()?;
        self.check_federation()?;
        self.workspace.check()?;
        for t in &self.tenants {
            t.credentials.as_ref().map_or(Ok(()), |c| c.check(&t.id))?;
        }
        self.check_telemetry()
    }

    /// Every federating tenant names itself and its peers, once each, with ids
    /// that can be part of an address (`<system>:agent:<id>`).
    fn check_federation(&self) -> anyhow::Result<()> {
        let id_ok = |s: &str| !s.is_empty() && !s.contains(':') && !s.chars().any(char::is_whitespace);
        for t in &self.tenants {
            let Some(f) = &t.federation else { continue };
            if !id_ok(&f.system_id) {
                bail!("tenant {:?}: federation.system_id must be non-empty, without ':' or spaces", t.id);
            }
            let mut seen = HashSet::new();
            for p in &f.peers {
                if !id_ok(&p.system_id) || p.system_id == f.system_id || !seen.insert(p.system_id.as_str()) {
                    bail!("tenant {:?}: each federation peer needs its own system_id (not this system's, without ':'), got {:?}", t.id, p.system_id);
                }
                if p.principal.is_empty() {
                    bail!(
                        "tenant {:?}: peer {} needs the principal it authenticates as here (its sessions are limited to what it is shown)",
                        t.id,
                        p.system_id
                    );
                }
                if !p.endpoint.is_empty() && !p.endpoint.starts_with("ws://") && !p.endpoint.starts_with("wss://") {
                    bail!("tenant {:?}: peer {} endpoint must be a ws:// or wss:// URL", t.id, p.system_id);
                }
                if !p.ca_file.as_os_str().is_empty() && !p.endpoint.starts_with("wss://") {
                    bail!("tenant {:?}: peer {} has a ca_file but no wss:// endpoint to check with it", t.id, p.system_id);
                }
                if !matches!(p.expose.agents.as_str(), "none" | "tagged" | "all") {
                    bail!("tenant {:?}: peer {} expose.agents must be none, tagged or all", t.id, p.system_id);
                }
            }
            if f.max_hops == 0 || f.buffer_messages == 0 || f.routes_per_second == 0 {
                bail!("tenant {:?}: federation.max_hops, buffer_messages and routes_per_second must be positive", t.id);
            }
        }
        Ok(())
    }

    /// Unique tenants and credentials, one tenant for `none`, and an
    /// anonymous tenant that exists.
    fn check_tenants(&self) -> anyhow::Result<()> {
        if self.tenants.is_empty() {
            bail!("at least one [[tenants]] entry is required");
        }
        let mut seen = HashSet::new();
        let mut credentials = HashSet::new();
        for t in &self.tenants {
            if t.id.is_empty() || !seen.insert(t.id.as_str()) {
                bail!("tenant ids must be unique and non-empty (got {:?})", t.id);
            }
            for c in t.api_keys.iter().chain(&t.bearer_tokens) {
                if c.secret().is_empty() || !credentials.insert(c.secret()) {
                    bail!("a credential is empty or given more than once");
                }
            }
            if t.none_principal.as_deref().is_some_and(str::is_empty) {
                bail!("tenant {:?}: none_principal must name a principal", t.id);
            }
        }
        if self.tenants.iter().filter(|t| t.none_principal.is_some()).count() > 1 {
            bail!("none_principal is set on more than one tenant: auth method none can lead into one tenant only");
        }
        let anon = &self.auth.anonymous_tenant;
        if !anon.is_empty() && !seen.contains(anon.as_str()) {
            bail!("auth.anonymous_tenant {anon:?} is not a configured tenant");
        }
        Ok(())
    }

    fn check_storage(&self) -> anyhow::Result<()> {
        if self.storage.cache_mb > 1 << 20 {
            bail!("storage.cache_mb must be at most 1048576");
        }
        if !matches!(self.storage.sync.as_str(), "normal" | "full") {
            bail!("storage.sync must be normal or full");
        }
        if !(1..=60_000).contains(&self.storage.probe_ms) {
            bail!("storage.probe_ms must be between 1 and 60000");
        }
        Ok(())
    }

    /// The listener's sizes, timeouts and origins, and the queues that must hold one message.
    fn check_server(&self) -> anyhow::Result<()> {
        if self.server.max_message_bytes < 1024 {
            bail!("server.max_message_bytes must be at least 1024");
        }
        if self.limits.outbox_bytes < self.server.max_message_bytes || self.limits.replay_bytes < self.server.max_message_bytes {
            bail!("limits.outbox_bytes and limits.replay_bytes must be at least server.max_message_bytes");
        }
        if self.server.max_connections == 0 || self.server.header_timeout_ms == 0 || self.server.idle_timeout_secs == 0 {
            bail!("server.max_connections, header_timeout_ms and idle_timeout_secs must be positive");
        }
        if !(1..=100_000).contains(&self.server.max_instances) {
            bail!("server.max_instances must be between 1 and 100000");
        }
        for o in &self.server.allowed_origins {
            if o != "*" && !(o.starts_with("http://") || o.starts_with("https://")) || o.ends_with('/') {
                bail!("server.allowed_origins: {o:?} is not an origin like https://app.example (or *)");
            }
        }
        Ok(())
    }

    fn check_tls_and_acp(&self) -> anyhow::Result<()> {
        if self.tls.cert_file.as_os_str().is_empty() != self.tls.key_file.as_os_str().is_empty() {
            bail!("tls.cert_file and tls.key_file go together: give both or neither");
        }
        let day = 1..=86_400_000;
        if !day.contains(&self.acp.client_request_timeout_ms) || !day.contains(&self.acp.agent_request_timeout_ms) {
            bail!("acp.client_request_timeout_ms and acp.agent_request_timeout_ms must be between 1 and 86400000 (a day)");
        }
        Ok(())
    }

    /// Only when cluster mode is on: shared PostgreSQL, a usable name, sane timings.
    fn check_cluster(&self) -> anyhow::Result<()> {
        if !self.cluster.enabled() {
            return Ok(());
        }
        if !self.storage.url.expose().starts_with("postgres") {
            bail!("cluster mode keeps plugin state in PostgreSQL: set storage.url to a postgres:// URL shared by every node");
        }
        if self.cluster.name.is_empty() || !self.cluster.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            bail!("cluster.name must be letters, digits, - and _");
        }
        if self.cluster.event_backlog_mb == 0 || self.cluster.event_backlog_mb > 1 << 20 {
            bail!("cluster.event_backlog_mb must be between 1 and 1048576");
        }
        if self.cluster.presence_timeout_ms < 100 || self.cluster.checkpoint_ms == 0 {
            bail!("cluster.presence_timeout_ms must be at least 100 and cluster.checkpoint_ms positive");
        }
        if self.cluster.singleton_lease_ms < 400 {
            bail!("cluster.singleton_lease_ms must be at least 400");
        }
        Ok(())
    }

    fn check_telemetry(&self) -> anyhow::Result<()> {
        let t = &self.telemetry;
        if !matches!(t.log_format.as_str(), "text" | "json") {
            bail!("telemetry.log_format must be text or json");
        }
        if !matches!(t.otlp_protocol.as_str(), "http/protobuf" | "http/json") {
            bail!("telemetry.otlp_protocol must be http/protobuf or http/json");
        }
        if !(t.otlp_endpoint.is_empty() || t.otlp_endpoint.starts_with("http://")) {
            bail!("telemetry.otlp_endpoint must be an http:// URL (or empty): export to a collector on the host or its network");
        }
        if !(0.0..=1.0).contains(&t.sample_ratio) {
            bail!("telemetry.sample_ratio must be between 0.0 and 1.0");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unknown_fields_and_bad_tenants() {
        assert!(toml::from_str::<Config>("[server]\nlisten_port = 1").is_err());
        let c: Config = toml::from_str("[auth]\nanonymous_tenant = \"nope\"").unwrap();
        assert!(c.validate().is_err());
        let c: Config =
            toml::from_str("[[tenants]]\nid=\"a\"\napi_keys=[\"k\"]\n[[tenants]]\nid=\"b\"\napi_keys=[\"k\"]\n[auth]\nanonymous_tenant=\"\"").unwrap();
        assert!(c.validate().is_err());
        let c: Config =
            toml::from_str("[[tenants]]\nid=\"a\"\nnone_principal=\"g\"\n[[tenants]]\nid=\"b\"\nnone_principal=\"h\"\n[auth]\nanonymous_tenant=\"\"").unwrap();
        assert!(c.validate().is_err(), "none leads into one tenant only");
        let c: Config = toml::from_str("[[tenants]]\nid=\"a\"\nnone_principal=\"\"\n[auth]\nanonymous_tenant=\"\"").unwrap();
        assert!(c.validate().is_err(), "a named principal");
    }

    #[test]
    fn acp_bounds_are_checked() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!((c.acp.client_request_timeout_ms, c.acp.agent_request_timeout_ms), (30_000, 600_000));
        for bad in ["agent_request_timeout_ms = 0", "client_request_timeout_ms = 0", "agent_request_timeout_ms = 86400001"] {
            let c: Config = toml::from_str(&format!("[acp]\n{bad}")).unwrap();
            assert!(c.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_bounds_are_checked_only_in_cluster_mode() {
        let cluster = "[storage]\nurl = \"postgres://127.0.0.1/test\"\n[cluster]\nnats = \"nats://127.0.0.1:4222\"\nnode = \"a\"\n";
        let c: Config = toml::from_str(cluster).unwrap();
        assert!(c.validate().is_ok(), "{:?}", c.validate());
        for bad in ["event_backlog_mb = 0", "event_backlog_mb = 1048577", "presence_timeout_ms = 99", "singleton_lease_ms = 399", "name = \"a b\""] {
            let c: Config = toml::from_str(&format!("{cluster}{bad}")).unwrap();
            let err = c.validate().expect_err(bad).to_string();
            assert!(err.contains("cluster."), "{bad}: {err}");
            // The same setting without cluster mode is not looked at.
            let c: Config = toml::from_str(&format!("[cluster]\n{bad}")).unwrap();
            assert!(c.validate().is_ok(), "{bad} outside cluster mode: {:?}", c.validate());
        }
    }
}
