//! TLS on the listener against the real binary: HTTPS and WSS with a
//! certificate from config, plain TCP refused, and a replaced certificate
//! served after SIGHUP without a restart.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::Message;

/// A self-signed certificate for `names`, written as PEM files; its DER for the client.
fn certificate(dir: &Path, names: &[&str]) -> CertificateDer<'static> {
    let generated = rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("a certificate");
    std::fs::write(dir.join("cert.pem"), generated.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), generated.signing_key.serialize_pem()).unwrap();
    generated.cert.der().clone()
}

fn connector(trusted: &CertificateDer<'static>) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config =
        ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions().unwrap().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

async fn tls_connect(addr: &str, trusted: &CertificateDer<'static>) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap().to_owned();
    connector(trusted).connect(name, tcp).await
}

async fn https_get(addr: &str, trusted: &CertificateDer<'static>, path: &str) -> String {
    let mut s = tls_connect(addr, trusted).await.expect("TLS handshake");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn https_and_wss_are_served_and_a_renewed_certificate_is_picked_up() {
    let dir = TempDir::new("tls");
    let first = certificate(dir.path(), &["127.0.0.1", "localhost"]);
    let tls = format!("[tls]\ncert_file = {:?}\nkey_file = {:?}\n", dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let gw = Gateway::start_with(65536, &format!("{tls}{TENANTS}"));
    let addr = gw.addr();

    let health = https_get(&addr, &first, "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.contains("\"status\":\"ok\""), "{health}");

    // MAP over WSS.
    let stream = tls_connect(&addr, &first).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("wss://{addr}/map"), stream).await.expect("WSS upgrade");
    let connect = json!({"jsonrpc": "2.0", "id": 1, "method": "map/connect", "params": {"protocolVersion": 1, "participantType": "agent"}});
    ws.send(Message::text(connect.to_string())).await.unwrap();
    let answer = loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("an answer").unwrap().unwrap() {
            Message::Text(t) => break serde_json::from_str::<Value>(&t).unwrap(),
            _ => continue,
        }
    };
    assert!(answer["result"]["sessionId"].is_string(), "{answer}");

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(&addr).await.unwrap();
    plain.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut out)).await;
    assert!(!String::from_utf8_lossy(&out).contains("200 OK"), "plain HTTP must not be served");

    // Renewal: new files, SIGHUP; new handshakes present the new certificate.
    let dir2 = TempDir::new("tls-renewed");
    let renewed = certificate(dir2.path(), &["127.0.0.1", "renewed.example"]);
    std::fs::copy(dir2.path().join("cert.pem"), dir.path().join("cert.pem")).unwrap();
    std::fs::copy(dir2.path().join("key.pem"), dir.path().join("key.pem")).unwrap();
    assert!(tls_connect(&addr, &renewed).await.is_err(), "still the first certificate before the reload");
    assert!(Command::new("kill").args(["-HUP", &gw_pid(&gw)]).status().unwrap().success());
    if wait::until(Duration::from_secs(5), async || tls_connect(&addr, &renewed).await.map(drop)).await.is_err() {
        panic!("the renewed certificate was not served after SIGHUP; log:\n{}", gw.log());
    }
    assert!(tls_connect(&addr, &first).await.is_err(), "the old certificate is no longer served");
    // The connection opened before goes on.
    ws.send(Message::text(json!({"jsonrpc": "2.0", "id": 2, "method": "map/agents/list", "params": {}}).to_string())).await.unwrap();
    assert!(tokio::time::timeout(WAIT, ws.next()).await.is_ok());

    // A broken renewal leaves the served certificate as it was.
    std::fs::write(dir.path().join("cert.pem"), "not a certificate").unwrap();
    assert!(Command::new("kill").args(["-HUP", &gw_pid(&gw)]).status().unwrap().success());
    gw.log_line(Duration::from_secs(5), "the reload failure logged", |l| l.contains("TLS reload failed")).await;
    assert!(https_get(&addr, &renewed, "/healthz").await.starts_with("HTTP/1.1 200"));

    // A renewal that rewrites the files is picked up without a signal (the files are looked at every 10 s).
    let dir3 = TempDir::new("tls-third");
    let third = certificate(dir3.path(), &["127.0.0.1"]);
    std::fs::copy(dir3.path().join("key.pem"), dir.path().join("key.pem")).unwrap();
    std::fs::copy(dir3.path().join("cert.pem"), dir.path().join("cert.pem")).unwrap();
    if wait::until(Duration::from_secs(25), async || tls_connect(&addr, &third).await.map(drop)).await.is_err() {
        panic!("the rewritten certificate was not picked up; log:\n{}", gw.log());
    }
}

#[tokio::test]
async fn a_connection_that_sends_no_request_after_its_handshake_is_closed_after_the_header_timeout() {
    let dir = TempDir::new("tls-silent");
    let cert = certificate(dir.path(), &["127.0.0.1"]);
    let tls = format!("[tls]\ncert_file = {:?}\nkey_file = {:?}\n", dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let config = write_config_server(dir.path(), "header_timeout_ms = 1000\nidle_timeout_secs = 60", &format!("{tls}{TENANTS}"));
    let gw = Gateway::launch(TempDir::new("tls-silent-run"), config);
    // The handshake, then nothing: the header timeout counts from accept, over the handshake too.
    let mut s = tls_connect(&gw.addr(), &cert).await.expect("TLS handshake");
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(4), s.read(&mut buf)).await.expect("closed after the header timeout, not the idle one");
    assert!(!matches!(n, Ok(n) if n > 0), "closed without an answer: {n:?}");
    // A silent TCP peer that never starts the handshake is closed alike.
    let mut raw = TcpStream::connect(gw.addr()).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(4), raw.read(&mut buf)).await.expect("closed after the header timeout");
    assert!(!matches!(n, Ok(n) if n > 0), "{n:?}");
}

#[test]
fn check_refuses_a_key_that_does_not_match_the_certificate() {
    let dir = TempDir::new("tls-check");
    certificate(dir.path(), &["127.0.0.1"]);
    let other = TempDir::new("tls-check-other");
    certificate(other.path(), &["127.0.0.1"]);
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, format!("[tls]\ncert_file = {:?}\nkey_file = {:?}\n", dir.path().join("cert.pem"), other.path().join("key.pem"))).unwrap();
    let out = Command::new(BIN).args(["check", "--config"]).arg(&config).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("do not belong together"), "{err}");
    std::fs::write(&config, format!("[tls]\ncert_file = {:?}\n", dir.path().join("cert.pem"))).unwrap();
    let out = Command::new(BIN).args(["check", "--config"]).arg(&config).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("go together"), "{}", String::from_utf8_lossy(&out.stderr));
}

fn gw_pid(gw: &Gateway) -> String {
    gw.pid().to_string()
}
