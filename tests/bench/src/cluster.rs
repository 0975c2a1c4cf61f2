//! `map-bench cluster`: what cluster mode costs `map/send`. One run starts a
//! two-node cluster (nodes `a` and `b` on one NATS server with JetStream and
//! one PostgreSQL database) and, for reference, a single gateway with the
//! embedded default (no `[cluster]`, SQLite), then measures in alternating
//! rounds:
//!
//! - embedded: sender and receiver on the single gateway;
//! - same-node: sender and receiver both on node `a`;
//! - cross-node: sender on node `a`, receiver on node `b`.
//!
//! The load is the 1:1 `map/send` scenario of `scenarios::send`. The CPU
//! columns of the cluster rows count both nodes (node `b` reads back the
//! event log of a same-node run too); the NATS server's CPU is not counted.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::report;
use crate::scenarios::{self, Load, Outcome, Timing};
use crate::servers::{Paths, Server, Target};

pub const DEFAULT_POSTGRES: &str = "postgres://root@127.0.0.1:5432/test";
pub const DEFAULT_NATS: &str = "nats://127.0.0.1:4222";

/// How long the reachability checks and the stream clean-up wait for an answer.
const NET_TIMEOUT: Duration = Duration::from_secs(3);

pub struct Settings {
    /// `storage.url` of both nodes.
    pub postgres: String,
    /// `cluster.nats` of both nodes.
    pub nats: String,
    /// `server.plugin_dir` of every gateway; None: an empty folder (map/send needs no plugin).
    pub plugin_dir: Option<PathBuf>,
    pub pairs: usize,
    /// In flight per pair.
    pub per: u64,
    pub timing: Timing,
    pub rounds: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Setup {
    Embedded,
    SameNode,
    CrossNode,
}

const SETUPS: [Setup; 3] = [Setup::Embedded, Setup::SameNode, Setup::CrossNode];

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Setup::Embedded => "embedded (single node, SQLite)",
            Setup::SameNode => "cluster, same node (a → a)",
            Setup::CrossNode => "cluster, cross-node (a → b)",
        }
    }
}

/// The three gateways of a run.
struct Gateways {
    embedded: Server,
    a: Server,
    b: Server,
}

impl Gateways {
    /// (sender's server, receiver's server, servers whose CPU counts).
    fn roles(&self, s: Setup) -> (&Server, &Server, Vec<&Server>) {
        match s {
            Setup::Embedded => (&self.embedded, &self.embedded, vec![&self.embedded]),
            Setup::SameNode => (&self.a, &self.a, vec![&self.a, &self.b]),
            Setup::CrossNode => (&self.a, &self.b, vec![&self.a, &self.b]),
        }
    }

    fn log_tails(&self, s: Setup) -> String {
        let (from, to, _) = self.roles(s);
        let mut out = format!("sender's server log ({}): {}", from.log.display(), from.log_tail(5));
        if !std::ptr::eq(from, to) {
            let _ = write!(out, "; receiver's server log ({}): {}", to.log.display(), to.log_tail(5));
        }
        out
    }

    fn stop(self) {
        self.b.stop();
        self.a.stop();
        self.embedded.stop();
    }
}

/// Start the gateways, run every setup `rounds` times in alternation, stop
/// the gateways and delete the cluster's JetStream streams. Returns the
/// tables (markdown).
pub async fn run(p: &Paths, s: &Settings) -> Result<String, String> {
    check_nats(&s.nats).await?;
    check_postgres(&s.postgres).await?;

    let plugin_dir = match &s.plugin_dir {
        Some(d) => d.clone(),
        None => {
            let d = p.scratch.join("no-plugins");
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            d
        }
    };
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let name = format!("bench-{}-{millis}", std::process::id());
    // Each gateway gets a scratch folder of its own: config, data_dir, log.
    let paths_for = |sub: &str| Paths { scratch: p.scratch.join(sub), plugin_dir: plugin_dir.clone(), ..p.clone() };
    let node = |n: &str| {
        format!(
            "[storage]\nurl = {:?}\n\n[cluster]\nnats = {:?}\nnode = {n:?}\nname = {name:?}\npresence_timeout_ms = 3000\n",
            s.postgres, s.nats
        )
    };

    eprintln!("# starting the embedded gateway, then cluster {name} node a, then node b");
    let embedded = Server::start_with(Target::Gateway, &paths_for("embedded"), "embedded", "", "")?;
    let a = Server::start_with(Target::Gateway, &paths_for("node-a"), "node-a", "", &node("a"));
    let a = match a {
        Ok(a) => a,
        Err(e) => {
            embedded.stop();
            cleanup_streams(&s.nats, &name).await;
            return Err(format!("node a: {e}"));
        }
    };
    let b = match Server::start_with(Target::Gateway, &paths_for("node-b"), "node-b", "", &node("b")) {
        Ok(b) => b,
        Err(e) => {
            a.stop();
            embedded.stop();
            cleanup_streams(&s.nats, &name).await;
            return Err(format!("node b: {e}"));
        }
    };
    let gw = Gateways { embedded, a, b };
    let measured = measure(&gw, s).await;
    gw.stop();
    cleanup_streams(&s.nats, &name).await;
    let medians = measured?;
    Ok(table(s, &name, &medians))
}

/// Every setup `rounds` times in alternation; the median round of each.
async fn measure(gw: &Gateways, s: &Settings) -> Result<Vec<Load>, String> {
    let mut results: Vec<Vec<Load>> = SETUPS.iter().map(|_| Vec::new()).collect();
    for round in 0..s.rounds {
        for (i, &setup) in SETUPS.iter().enumerate() {
            let (from, to, cpu_of) = gw.roles(setup);
            match scenarios::send_between(from, to, &cpu_of, s.pairs, s.per, s.timing, false).await {
                Outcome::Load(l) => {
                    eprintln!(
                        "#   round {} {:<32} {:.0}/s p50 {} p99 {} errors {}",
                        round + 1,
                        setup.name(),
                        l.rate,
                        report::us(l.lat.p50_us),
                        report::us(l.lat.p99_us),
                        l.errors
                    );
                    results[i].push(l);
                }
                Outcome::Failed(why) => return Err(format!("{}: {why} [{}]", setup.name(), gw.log_tails(setup))),
                other => return Err(format!("{}: {other:?}", setup.name())),
            }
        }
    }
    Ok(results.into_iter().map(|r| Load::median(r).expect("rounds >= 1")).collect())
}

fn table(s: &Settings, name: &str, medians: &[Load]) -> String {
    let mut t = format!(
        "map/send 1:1, {} in flight ({} pair(s) x {}); median of {} alternating rounds per setup; cluster {name} on {} with storage {}\n\n",
        s.pairs as u64 * s.per,
        s.pairs,
        s.per,
        s.rounds,
        s.nats,
        s.postgres
    );
    t.push_str("| setup | rate | p50 | p99 | max | errors | server CPU (cluster: both nodes) | generator CPU | notes |\n");
    t.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (setup, l) in SETUPS.iter().zip(medians) {
        let _ = writeln!(
            t,
            "| {} | {}/s | {} | {} | {} | {} | {} | {} | {}{} |",
            setup.name(),
            report::rate(l.rate),
            report::us(l.lat.p50_us),
            report::us(l.lat.p99_us),
            report::us(l.lat.max_us),
            l.errors,
            report::cores(l.server_cores, l.rate),
            report::cores(l.generator_cores, l.rate),
            l.note,
            l.first_error.as_ref().map(|e| format!("; first error: {}", e.chars().take(120).collect::<String>())).unwrap_or_default()
        );
    }
    let get = |w: Setup| &medians[SETUPS.iter().position(|&x| x == w).expect("setup")];
    let (emb, same, cross) = (get(Setup::Embedded), get(Setup::SameNode), get(Setup::CrossNode));
    t.push_str("\n| ratio | rate (higher is better) | p50 (lower is better) | p99 (lower is better) | server CPU per message (lower is better) |\n");
    t.push_str("|---|---:|---:|---:|---:|\n");
    for (label, x, y) in [("cross-node / same-node", cross, same), ("same-node / embedded", same, emb), ("cross-node / embedded", cross, emb)] {
        let _ = writeln!(
            t,
            "| {label} | {} | {} | {} | {} |",
            report::ratio(Some(x.rate), Some(y.rate)),
            report::ratio(Some(x.lat.p50_us), Some(y.lat.p50_us)),
            report::ratio(Some(x.lat.p99_us), Some(y.lat.p99_us)),
            report::ratio(x.cpu_per_msg_us(), y.cpu_per_msg_us())
        );
    }
    t.push_str(
        "\nRates count deliveries received per second; latency is send to delivery. All three gateways run during \
         the whole benchmark (the idle ones barely use CPU); the generator, both nodes and the NATS server share \
         this machine's cores, and the NATS server's CPU is in no column.\n",
    );
    t
}

// ---------------------------------------------------------------- NATS and PostgreSQL

/// `scheme://[user[:password]@]host[:port][/…]` → `host:port` (the first
/// server of a comma-separated NATS list).
fn authority(url: &str, default_port: u16) -> Result<String, String> {
    let (_, rest) = url.split_once("://").ok_or_else(|| format!("{url}: not a URL"))?;
    let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    let host = hosts.split(',').next().unwrap_or(hosts);
    if host.is_empty() {
        return Err(format!("{url}: no host (map-bench checks TCP servers only)"));
    }
    let has_port = host.rsplit_once(':').is_some_and(|(h, port)| !h.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && (!h.contains(':') || h.ends_with(']')));
    Ok(if has_port { host.to_string() } else { format!("{host}:{default_port}") })
}

async fn tcp(what: &str, url: &str, default_port: u16) -> Result<TcpStream, String> {
    let addr = authority(url, default_port)?;
    match tokio::time::timeout(NET_TIMEOUT, TcpStream::connect(&addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("{what} at {url} is unreachable ({addr}: {e})")),
        Err(_) => Err(format!("{what} at {url} is unreachable ({addr}: no connection in {NET_TIMEOUT:?})")),
    }
}

/// A NATS connection after the server's `INFO` line (returned too).
async fn nats_open(url: &str) -> Result<(BufReader<TcpStream>, String), String> {
    let mut r = BufReader::new(tcp("NATS", url, 4222).await?);
    let mut info = String::new();
    match tokio::time::timeout(NET_TIMEOUT, r.read_line(&mut info)).await {
        Ok(Ok(_)) if info.starts_with("INFO ") => Ok((r, info)),
        Ok(Ok(_)) => Err(format!("{url} does not answer like a NATS server (first line {:?})", info.trim_end())),
        Ok(Err(e)) => Err(format!("NATS at {url}: {e}")),
        Err(_) => Err(format!("NATS at {url}: no INFO line in {NET_TIMEOUT:?}")),
    }
}

async fn check_nats(url: &str) -> Result<(), String> {
    let (_, info) = nats_open(url).await?;
    if !info.contains("\"jetstream\":true") {
        return Err(format!("the NATS server at {url} has no JetStream (start it with nats-server -js)"));
    }
    Ok(())
}

/// A TCP connection and an SSLRequest, which every PostgreSQL server answers
/// with one byte (`S` or `N`) before any authentication.
async fn check_postgres(url: &str) -> Result<(), String> {
    let mut s = tcp("PostgreSQL", url, 5432).await?;
    let answer = async {
        s.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        Ok::<u8, std::io::Error>(b[0])
    };
    match tokio::time::timeout(NET_TIMEOUT, answer).await {
        Ok(Ok(b'S' | b'N')) => Ok(()),
        Ok(Ok(b)) => Err(format!("{url} does not answer like a PostgreSQL server (byte {b:#04x})")),
        Ok(Err(e)) => Err(format!("PostgreSQL at {url}: {e}")),
        Err(_) => Err(format!("PostgreSQL at {url}: no answer in {NET_TIMEOUT:?}")),
    }
}

/// Delete the cluster's streams (`<name>_events`, `<name>_dir`); a failure is only reported.
async fn cleanup_streams(nats: &str, name: &str) {
    let streams = [format!("{name}_events"), format!("{name}_dir")];
    match tokio::time::timeout(NET_TIMEOUT, delete_streams(nats, &streams)).await {
        Ok(Ok(())) => eprintln!("# deleted the JetStream streams {}", streams.join(", ")),
        Ok(Err(e)) => eprintln!("# WARNING: could not delete the JetStream streams {}: {e}", streams.join(", ")),
        Err(_) => eprintln!("# WARNING: could not delete the JetStream streams {}: no answer in {NET_TIMEOUT:?}", streams.join(", ")),
    }
}

/// `$JS.API.STREAM.DELETE.<stream>` for each stream over the plain NATS
/// protocol, each with a reply subject of its own. A stream that is not
/// there (a node failed before making it) counts as deleted.
async fn delete_streams(url: &str, streams: &[String]) -> Result<(), String> {
    let (mut r, _) = nats_open(url).await?;
    let inbox = format!("_INBOX.map_bench_{}", std::process::id());
    let mut out = format!("CONNECT {{\"verbose\":false,\"pedantic\":false,\"name\":\"map-bench\"}}\r\nSUB {inbox}.* 1\r\n");
    for (i, s) in streams.iter().enumerate() {
        let _ = write!(out, "PUB $JS.API.STREAM.DELETE.{s} {inbox}.{i} 0\r\n\r\n");
    }
    let io = |e: std::io::Error| format!("NATS at {url}: {e}");
    r.get_mut().write_all(out.as_bytes()).await.map_err(io)?;
    let mut pending: Vec<bool> = vec![true; streams.len()];
    let mut failures = Vec::new();
    let mut line = String::new();
    while pending.iter().any(|&p| p) {
        line.clear();
        if r.read_line(&mut line).await.map_err(io)? == 0 {
            return Err(format!("NATS at {url} closed the connection"));
        }
        let l = line.trim_end();
        if l == "PING" {
            r.get_mut().write_all(b"PONG\r\n").await.map_err(io)?;
        } else if l.starts_with("-ERR") {
            return Err(format!("NATS at {url}: {l}"));
        } else if let Some(rest) = l.strip_prefix("MSG ") {
            // MSG <subject> <sid> [reply-to] <#bytes>
            let f: Vec<&str> = rest.split_whitespace().collect();
            let len: usize = f.last().and_then(|n| n.parse().ok()).ok_or_else(|| format!("NATS at {url}: bad line {l:?}"))?;
            let i: Option<usize> = f.first().and_then(|s| s.rsplit('.').next()).and_then(|i| i.parse().ok());
            let mut payload = vec![0u8; len + 2];
            r.read_exact(&mut payload).await.map_err(io)?;
            let Some(i) = i.filter(|&i| i < streams.len()) else { continue };
            pending[i] = false;
            let v: serde_json::Value = serde_json::from_slice(&payload[..len]).unwrap_or_default();
            let ok = v.get("success").and_then(serde_json::Value::as_bool) == Some(true);
            let missing = v.pointer("/error/code").and_then(serde_json::Value::as_u64) == Some(404);
            if !ok && !missing {
                failures.push(format!("{}: {}", streams[i], String::from_utf8_lossy(&payload[..len])));
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn authorities() {
        assert_eq!(authority("nats://127.0.0.1:4222", 4222).unwrap(), "127.0.0.1:4222");
        assert_eq!(authority("nats://localhost", 4222).unwrap(), "localhost:4222");
        assert_eq!(authority("nats://u:p@h:1,h2:2", 4222).unwrap(), "h:1");
        assert_eq!(authority("postgres://root@127.0.0.1:5432/test", 5432).unwrap(), "127.0.0.1:5432");
        assert_eq!(authority("postgres://root:secret@db/test?sslmode=disable", 5432).unwrap(), "db:5432");
        assert_eq!(authority("postgres://[::1]:6543/x", 5432).unwrap(), "[::1]:6543");
        assert!(authority("postgres:///test?host=/run/postgresql", 5432).is_err());
    }
}
