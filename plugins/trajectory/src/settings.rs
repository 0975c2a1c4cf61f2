//! The plugin's configuration for the calling tenant (`[plugins.trajectory.config]`,
//! overlaid by the tenant's `plugin_config.trajectory`).

use map_plugin_sdk::config;
use serde::Deserialize;

/// Smallest and largest stored (and streamed) chunk, in bytes before base64.
const MIN_CHUNK_BYTES: usize = 1 << 10;
const MAX_CHUNK_BYTES: usize = 4 << 20;

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// `false` answers every method with 13000.
    pub enabled: bool,
    /// Bytes of artifacts `trajectory/content` may return inline in one
    /// response; it has to stay below the gateway's `max_message_bytes`.
    pub inline_max_bytes: usize,
    /// Artifact bytes per stored chunk and per `trajectory/content.chunk`.
    /// Fixed for an artifact when it is reported.
    pub chunk_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { enabled: true, inline_max_bytes: 32 << 10, chunk_bytes: 192 << 10 }
    }
}

impl Settings {
    /// Read the configuration; a malformed one is logged and the defaults apply.
    pub fn load() -> Settings {
        config::load::<Settings>().normalised()
    }

    fn normalised(mut self) -> Settings {
        // A multiple of 3 makes every chunk but the last encode to base64
        // without padding, so the chunks' base64 texts also concatenate.
        self.chunk_bytes = self.chunk_bytes.clamp(MIN_CHUNK_BYTES, MAX_CHUNK_BYTES) / 3 * 3;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_is_clamped_to_a_multiple_of_three() {
        let s = Settings { chunk_bytes: 10, ..Settings::default() }.normalised();
        assert_eq!(s.chunk_bytes, 1023);
        let s = Settings { chunk_bytes: 1 << 30, ..Settings::default() }.normalised();
        assert_eq!(s.chunk_bytes % 3, 0);
        assert!(s.chunk_bytes <= MAX_CHUNK_BYTES);
        assert_eq!(Settings::default().normalised().chunk_bytes, 192 << 10);
    }

    #[test]
    fn partial_configuration_keeps_defaults() {
        let s: Settings = serde_json::from_str(r#"{"enabled": false}"#).unwrap();
        assert!(!s.enabled);
        assert_eq!(s.inline_max_bytes, Settings::default().inline_max_bytes);
    }
}
