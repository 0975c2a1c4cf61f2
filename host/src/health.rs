//! `map-gateway health`: one `GET /readyz` (or `/healthz`) to a gateway on
//! this host, for a container's health check, where no curl is installed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the whole exchange may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The answer's first line and body when its status is 200; else an error with both.
pub async fn probe(addr: SocketAddr, tls: bool, live: bool) -> anyhow::Result<String> {
    if tls {
        bail!("the listener speaks TLS: probe it with an HTTPS client (the health command speaks plain HTTP)");
    }
    // A wildcard listener is asked on loopback.
    let addr = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port()),
        _ => addr,
    };
    let path = if live { "/healthz" } else { "/readyz" };
    let answer = tokio::time::timeout(TIMEOUT, get(addr, path)).await.with_context(|| format!("{addr}{path}: no answer within {} s", TIMEOUT.as_secs()))??;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("{addr}{path}: {status} {}", body.trim());
    }
    Ok(format!("{addr}{path}: {}", body.trim()))
}

async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    // Health answers are small: more than 64 KiB is not one.
    stream.take(64 << 10).read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}
