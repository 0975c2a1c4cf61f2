//! TLS for the MAP client's `wss://` URLs: rustls (ring), the server's
//! certificate checked against the system's root certificates or against
//! the certificates of one CA file.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// What a `wss://` connection trusts.
#[derive(Clone)]
pub struct Trust {
    pub config: Arc<ClientConfig>,
    /// Where its roots came from, for error messages.
    pub roots: String,
}

impl Trust {
    /// Trust the certificates of `ca_file` (PEM), or, when `None`, the
    /// system's roots (its CA store, or `SSL_CERT_FILE` / `SSL_CERT_DIR`).
    pub fn new(ca_file: Option<&Path>) -> anyhow::Result<Trust> {
        let mut store = RootCertStore::empty();
        let roots = match ca_file {
            Some(file) => {
                let certs = CertificateDer::pem_file_iter(file)
                    .with_context(|| format!("reading the CA file {}", file.display()))?
                    .collect::<Result<Vec<_>, _>>()
                    .with_context(|| format!("parsing the CA file {}", file.display()))?;
                let (added, _) = store.add_parsable_certificates(certs);
                if added == 0 {
                    anyhow::bail!("the CA file {} holds no usable certificate", file.display());
                }
                format!("the CA file {}", file.display())
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = store.add_parsable_certificates(found.certs);
                if added == 0 {
                    let why = found.errors.first().map(|e| format!(": {e}")).unwrap_or_default();
                    anyhow::bail!("the system holds no root certificates{why} (give the peer a ca_file, or install the system's CA certificates)");
                }
                "the system's root certificates".to_string()
            }
        };
        let mut config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(store)
            .with_no_client_auth();
        // A gateway's listener offers HTTP/2 first; the WebSocket upgrade is HTTP/1.1.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Trust { config: Arc::new(config), roots })
    }
}
