//! TLS on the listener, by rustls: the certificate chain and key come from
//! PEM files (`[tls]`), and are read again on SIGHUP and when either file
//! changes, so that a renewed certificate is served without a restart
//! (connections already open keep the one they began with). ALPN offers
//! HTTP/2 (gRPC) and HTTP/1.1 (everything else, WebSocket upgrades too).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use parking_lot::{Mutex, RwLock};
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use map_config::TlsConfig;

/// How often the files are looked at for a change.
const WATCH_EVERY: Duration = Duration::from_secs(10);

/// The certificate served now, and where it came from.
#[derive(Debug)]
struct Current {
    cert_file: PathBuf,
    key_file: PathBuf,
    key: RwLock<Arc<CertifiedKey>>,
    /// Modification times of the files when they were last read.
    read_at: Mutex<(Option<SystemTime>, Option<SystemTime>)>,
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.key.read().clone())
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Read and check a certificate chain and its key.
pub fn load(cert_file: &Path, key_file: &Path) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_file_iter(cert_file)
        .with_context(|| format!("reading tls.cert_file {}", cert_file.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing tls.cert_file {}", cert_file.display()))?;
    if chain.is_empty() {
        anyhow::bail!("tls.cert_file {} holds no certificate", cert_file.display());
    }
    let key = PrivateKeyDer::from_pem_file(key_file).with_context(|| format!("reading tls.key_file {} (a PEM private key)", key_file.display()))?;
    let provider = ring::default_provider();
    let key = CertifiedKey::from_der(chain, key, &provider).context("the certificate and key do not belong together")?;
    Ok(key)
}

/// The listener's TLS: an acceptor whose certificate can be replaced.
pub struct Tls {
    current: Arc<Current>,
    acceptor: TlsAcceptor,
}

impl Tls {
    pub fn new(config: &TlsConfig) -> anyhow::Result<Arc<Tls>> {
        let key = load(&config.cert_file, &config.key_file)?;
        let current = Arc::new(Current {
            cert_file: config.cert_file.clone(),
            key_file: config.key_file.clone(),
            key: RwLock::new(Arc::new(key)),
            read_at: Mutex::new((modified(&config.cert_file), modified(&config.key_file))),
        });
        let mut server = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(Tls { current, acceptor: TlsAcceptor::from(Arc::new(server)) }))
    }

    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// Read the files again. A pair that does not load leaves the served
    /// certificate as it was (the error says why).
    pub fn reload(&self) -> anyhow::Result<()> {
        let c = &self.current;
        let stamps = (modified(&c.cert_file), modified(&c.key_file));
        let key = load(&c.cert_file, &c.key_file)?;
        *c.key.write() = Arc::new(key);
        *c.read_at.lock() = stamps;
        tracing::info!(cert_file = %c.cert_file.display(), "TLS certificate loaded");
        Ok(())
    }

    /// Reload whenever the files change, for as long as the process runs.
    pub fn watch(self: &Arc<Self>) {
        let tls = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let Some(tls) = tls.upgrade() else { return };
                let c = &tls.current;
                let now = (modified(&c.cert_file), modified(&c.key_file));
                if now != *c.read_at.lock() {
                    if let Err(e) = tls.reload() {
                        // Half-written files are common mid-renewal: try again at the next look.
                        tracing::warn!(error = %format!("{e:#}"), "the TLS files changed but do not load; the previous certificate stays");
                    }
                }
            }
        });
    }
}
