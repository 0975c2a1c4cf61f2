//! Outbound HTTP for plugins (`wasi:http/outgoing-handler`), denied by
//! default: only hosts the deployment lists for the plugin and tenant, with
//! a timeout and a response size cap. A denied request fails with
//! `HTTP-request-denied` and is logged.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::http;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

type BoxFuture<T> = Box<dyn Future<Output = T> + Send>;

/// One allowed destination: a host, and a port or any.
#[derive(Debug, Clone, PartialEq)]
struct Allowed {
    host: String,
    port: Option<u16>,
}

/// What a plugin of a tenant may reach.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    allowed: Arc<Vec<Allowed>>,
    timeout: Duration,
    max_bytes: u64,
    tenant: String,
    plugin: String,
    /// Largest chunk of a body the plugin writes that the host takes at once.
    chunk: usize,
}

impl Policy {
    /// Entries are `host` or `host:port` (`[v6]:port` for IPv6).
    pub fn new(entries: &[String], timeout: Duration, max_bytes: usize, tenant: &str, plugin: &str) -> anyhow::Result<Policy> {
        let allowed = entries
            .iter()
            .map(|e| {
                let a: http::uri::Authority =
                    e.parse().map_err(|err| anyhow::anyhow!("plugin {plugin}: outbound host {e:?} is not host or host:port: {err}"))?;
                Ok(Allowed { host: a.host().trim_matches(['[', ']']).to_ascii_lowercase(), port: a.port_u16() })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let chunk = wasmtime_wasi_http::p2::DEFAULT_OUTGOING_BODY_CHUNK_SIZE;
        Ok(Policy { allowed: Arc::new(allowed), timeout, max_bytes: max_bytes as u64, tenant: tenant.into(), plugin: plugin.into(), chunk })
    }

    /// Hold at most `bytes` of a body the plugin writes (a streamed
    /// response, an outbound request): two chunks of half as many, after
    /// which its writes wait.
    pub fn with_body_buffer(self, bytes: usize) -> Policy {
        Policy { chunk: (bytes / 2).max(512), ..self }
    }

    fn permits(&self, host: &str, port: u16) -> bool {
        self.allowed.iter().any(|a| a.host == host && a.port.is_none_or(|p| p == port))
    }
}

/// Loopback, private, link-local and other addresses that are not the public internet.
fn internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback() || v4.is_private() || v4.is_link_local() || v4.is_unspecified() || v4.is_broadcast() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal(IpAddr::V4(v4)),
            None => v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xfe00) == 0xfc00 || (v6.segments()[0] & 0xffc0) == 0xfe80,
        },
    }
}

impl Policy {
    /// Whether the destination is allowed; `Err` says why not.
    async fn check(&self, host: &str, port: u16) -> Result<(), String> {
        if !self.permits(host, port) {
            return Err(format!("{host}:{port} is not in the plugin's outbound_hosts"));
        }
        // A listed address, or `localhost`, is allowed as it stands; a listed name must
        // resolve to public addresses, so a name cannot lead into the private network.
        if host.parse::<IpAddr>().is_ok() || host == "localhost" {
            return Ok(());
        }
        let addrs = tokio::net::lookup_host((host, port)).await.map_err(|e| format!("{host} does not resolve: {e}"))?;
        match addrs.map(|a| a.ip()).find(|ip| internal(*ip)) {
            Some(ip) => Err(format!("{host} resolves to the internal address {ip}; list the address itself to allow it")),
            None => Ok(()),
        }
    }
}

impl WasiHttpHooks for Policy {
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        self.chunk
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _body_sent: BoxFuture<Result<(), HttpError>>,
    ) -> BoxFuture<Result<(http::Response<WasiBody>, BoxFuture<Result<(), HttpError>>), HttpError>> {
        let policy = self.clone();
        let uri = request.uri().clone();
        Box::new(async move {
            let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
            let host = uri.host().unwrap_or_default().trim_matches(['[', ']']).to_ascii_lowercase();
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            if let Err(why) = policy.check(&host, port).await {
                tracing::warn!(tenant = policy.tenant, plugin = policy.plugin, %uri, why, "outbound request denied");
                return Err(HttpError::HttpRequestDenied);
            }
            let t = policy.timeout;
            let clamp = |d: Option<Duration>| Some(d.map_or(t, |d| d.min(t)));
            let options = RequestOptions {
                connect_timeout: clamp(options.and_then(|o| o.connect_timeout)),
                first_byte_timeout: clamp(options.and_then(|o| o.first_byte_timeout)),
                between_bytes_timeout: clamp(options.and_then(|o| o.between_bytes_timeout)),
            };
            let sent = tokio::time::timeout(t, wasmtime_wasi_http::default_send_request(request, Some(options))).await;
            let (response, io) = sent.map_err(|_| HttpError::ConnectionTimeout)??;
            let max = policy.max_bytes;
            if let Some(len) = Body::size_hint(response.body()).exact().filter(|len| *len > max) {
                tracing::warn!(tenant = policy.tenant, plugin = policy.plugin, %uri, len, max, "outbound response too large");
                return Err(HttpError::HttpResponseBodySize(Some(len)));
            }
            let response = response.map(|b| Capped { inner: b.boxed_unsync(), seen: 0, max }.boxed_unsync());
            Ok((response, Box::new(io) as BoxFuture<Result<(), HttpError>>))
        })
    }
}

/// A response body that fails once it passes `max` bytes.
struct Capped {
    inner: WasiBody,
    seen: u64,
    max: u64,
}

impl Body for Capped {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.seen += frame.data_ref().map_or(0, |d| d.len() as u64);
                if this.seen > this.max {
                    return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(Some(this.seen)))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> Policy {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        Policy::new(&entries, Duration::from_secs(1), 1000, "t", "p").unwrap()
    }

    #[test]
    fn hosts_match_exactly_with_optional_ports() {
        let p = policy(&["api.example.com", "hooks.example.com:8443", "[::1]:9000"]);
        assert!(p.permits("api.example.com", 443) && p.permits("api.example.com", 80));
        assert!(p.permits("hooks.example.com", 8443) && !p.permits("hooks.example.com", 443));
        assert!(p.permits("::1", 9000) && !p.permits("::1", 9001));
        assert!(!p.permits("evil.api.example.com", 443) && !p.permits("example.com", 443));
        assert!(Policy::new(&["not a host/".into()], Duration::ZERO, 0, "t", "p").is_err());
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for ip in
            ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "fd00::1", "fe80::1", "::ffff:10.0.0.1"]
        {
            assert!(internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert!(!internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn a_listed_name_that_resolves_inside_is_refused() {
        let p = policy(&["localhost.", "127.0.0.1"]);
        assert!(p.check("127.0.0.1", 80).await.is_ok(), "a listed address is allowed");
        let why = p.check("localhost.", 80).await.unwrap_err();
        assert!(why.contains("internal address") || why.contains("does not resolve"), "{why}");
    }
}
