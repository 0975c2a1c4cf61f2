//! The embedded defaults: what a field left out of the file is.

use std::path::PathBuf;

use super::plugins::{InstanceMode, PluginConfig};
use super::secret::{PluginSettings, Secret, SecretUrl};
use super::tenants::TenantConfig;
use super::{AcpConfig, AdminConfig, AuthConfig, ClusterConfig, Config, LimitsConfig, ServerConfig, StorageConfig, TelemetryConfig, TlsConfig};

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:4700".parse().expect("valid literal"),
            data_dir: PathBuf::from("data"),
            name: "map-gateway".into(),
            plugin_dir: PathBuf::from("plugins/dist"),
            plugin_signers: Vec::new(),
            cache_dir: PathBuf::new(),
            keep_versions: 2,
            max_message_bytes: 8 << 20,
            resume_window_secs: 300,
            allowed_origins: Vec::new(),
            header_timeout_ms: 10_000,
            idle_timeout_secs: 120,
            max_connections: 10_000,
            plugin_threads: 0,
            max_instances: 512,
            drain_secs: 10,
            metrics: true,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous_tenant: "default".into(),
            anonymous_remote: false,
            failures_per_minute: 30,
            failures_per_connection: 5,
            token_secret: Secret::default(),
            token_ttl_secs: 3600,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig { replay_events: 10_000, replay_bytes: 64 << 20, outbox_frames: 4096, outbox_bytes: 32 << 20 }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            storage: StorageConfig::default(),
            admin: AdminConfig::default(),
            telemetry: TelemetryConfig::default(),
            tls: TlsConfig::default(),
            acp: AcpConfig::default(),
            cluster: ClusterConfig::default(),
            workspace: Default::default(),
            oci: Default::default(),
            pins: Default::default(),
            keep_digests: Default::default(),
            plugins: None,
            tenants: vec![TenantConfig { id: "default".into(), ..Default::default() }],
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig { url: SecretUrl::default(), sync: "normal".into(), cache_mb: 64, event_log_flush_ms: 1000, probe_ms: 5 }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nats: SecretUrl::default(),
            node: String::new(),
            name: "map".into(),
            presence_timeout_ms: 3000,
            checkpoint_ms: 250,
            singleton_lease_ms: 5000,
            event_backlog_mb: 64,
        }
    }
}

impl Default for AcpConfig {
    fn default() -> Self {
        AcpConfig { client_request_timeout_ms: 30_000, agent_request_timeout_ms: 600_000 }
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            log_format: "text".into(),
            otlp_endpoint: String::new(),
            otlp_protocol: "http/protobuf".into(),
            sample_ratio: 1.0,
            service_name: "map-gateway".into(),
        }
    }
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            path: PathBuf::new(),
            source: None,
            config: PluginSettings::new(serde_json::json!({})),
            deadline_ms: 1000,
            memory_mb: 64,
            instances: 4,
            max_concurrency: 64,
            http_prefix: String::new(),
            mode: InstanceMode::Pooled,
            outbound_hosts: Vec::new(),
            outbound_timeout_ms: 10_000,
            outbound_max_bytes: 8 << 20,
            sha256: None,
            stream_max_ms: 3_600_000,
            stream_idle_ms: 60_000,
            max_streams: 64,
            stream_buffer_bytes: 64 << 10,
        }
    }
}
