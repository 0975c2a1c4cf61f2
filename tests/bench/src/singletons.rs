//! `map-bench cluster`, singleton part: the UAP hub (`uap`, `mode =
//! "singleton"`) on a three-node cluster of its own (nodes a, b and c, a
//! fresh PostgreSQL database, `cluster.singleton_lease_ms` from the
//! settings). One node owns the hub through its lease; the others forward
//! its calls to the owner over NATS.
//!
//! - latency: `uap/agents` (read-only; with no agents connected it answers
//!   an empty list) sent to the owner and to a node that does not own the
//!   hub, one call at a time and from several sockets at once, in
//!   alternating rounds;
//! - failover: kill -9 of the owner, then the time until a surviving node
//!   answers `uap/agents` with a result, and until every survivor does; the
//!   killed node is started again before the next kill.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::MissedTickBehavior;

use crate::client::{self, CallError, Conn};
use crate::cluster::{self, Settings};
use crate::report;
use crate::scenarios::{self, Load, Outcome};
use crate::servers::{Paths, Server, Target};

pub const PLUGIN: &str = "uap";
/// Read-only, and with no agents the hub's cheapest answer: an empty list.
pub const METHOD: &str = "uap/agents";
const TENANT: &str = "default";
const NODES: [&str; 3] = ["a", "b", "c"];
/// Sockets of the concurrent rows, one call in flight on each.
pub const CONCURRENT: usize = 10;
/// How often a surviving node is asked during a failover.
pub const POLL: Duration = Duration::from_millis(20);
/// Sockets one node may hold waiting for answers while it is polled.
const MAX_WAITING: usize = 500;
/// How long, outside a failover, the hub may take to have one owner or to answer.
const SETTLE: Duration = Duration::from_secs(30);
/// How long `GET /admin/plugins` may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One gateway of the cluster, which may be killed and started again.
struct Node {
    name: &'static str,
    paths: Paths,
    config: String,
    server: Option<Server>,
    starts: usize,
}

impl Node {
    fn start(&mut self) -> Result<(), String> {
        self.starts += 1;
        // Each start logs to a file of its own: a killed node's log stays.
        let tag = if self.starts == 1 { format!("node-{}", self.name) } else { format!("node-{}-start-{}", self.name, self.starts) };
        let server = Server::start_with(Target::Gateway, &self.paths, &tag, "", &self.config).map_err(|e| format!("node {}: {e}", self.name))?;
        self.server = Some(server);
        Ok(())
    }

    fn up(&self) -> Result<&Server, String> {
        self.server.as_ref().ok_or_else(|| format!("node {} is not running", self.name))
    }
}

fn tails(nodes: &[Node]) -> String {
    let shown: Vec<String> =
        nodes.iter().filter_map(|n| n.server.as_ref().map(|s| format!("node {} log ({}): {}", n.name, s.log.display(), s.log_tail(5)))).collect();
    shown.join("; ")
}

/// The singleton tables (markdown): start the nodes, measure, stop them,
/// delete the cluster's streams and its database.
pub async fn run(p: &Paths, s: &Settings) -> Result<String, String> {
    let plugin_dir = p.scratch.join("singleton-plugins");
    copy_plugin(&s.singleton_plugins, &plugin_dir)?;
    let name = cluster::cluster_name("-singletons");
    let db = name.replace('-', "_");
    let (db_url, db_made) = match cluster::create_database(&s.postgres, &db).await {
        Ok(()) => (cluster::with_database(&s.postgres, &db), true),
        Err(e) => {
            eprintln!("# WARNING: no fresh database ({e}); the singleton part uses {}", s.postgres);
            (s.postgres.clone(), false)
        }
    };
    let mut nodes: Vec<Node> = NODES
        .iter()
        .map(|&n| Node {
            name: n,
            paths: Paths { scratch: p.scratch.join(format!("singleton-node-{n}")), plugin_dir: plugin_dir.clone(), ..p.clone() },
            config: format!(
                "[storage]\nurl = {db_url:?}\n\n[cluster]\nnats = {:?}\nnode = {n:?}\nname = {name:?}\npresence_timeout_ms = 3000\nsingleton_lease_ms = {}\n",
                s.nats, s.lease_ms
            ),
            server: None,
            starts: 0,
        })
        .collect();
    eprintln!("# starting cluster {name} (nodes {}) with the {PLUGIN} plugin, singleton_lease_ms = {}", NODES.join(", "), s.lease_ms);
    let measured = measure(&mut nodes, s, &name, &db_url).await;
    for n in nodes {
        if let Some(server) = n.server {
            server.stop();
        }
    }
    cluster::cleanup_streams(&s.nats, &name).await;
    if db_made {
        cluster::drop_database(&s.postgres, &db).await;
    }
    measured
}

/// `uap.wasm` and `uap.toml` alone in `to`: the nodes load the hub and nothing else.
fn copy_plugin(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for file in [format!("{PLUGIN}.wasm"), format!("{PLUGIN}.toml")] {
        let src = from.join(&file);
        if !src.exists() {
            return Err(format!("{} is missing: the singleton part needs the UAP hub (scripts/build-plugins.sh builds it into plugins/dist)", src.display()));
        }
        std::fs::copy(&src, to.join(&file)).map_err(|e| format!("copying {}: {e}", src.display()))?;
    }
    let toml = std::fs::read_to_string(to.join(format!("{PLUGIN}.toml"))).unwrap_or_default();
    if !toml.lines().any(|l| l.split('#').next().unwrap_or("").replace(' ', "") == "mode=\"singleton\"") {
        return Err(format!("{} does not say mode = \"singleton\"", from.join(format!("{PLUGIN}.toml")).display()));
    }
    Ok(())
}

async fn measure(nodes: &mut [Node], s: &Settings, name: &str, db_url: &str) -> Result<String, String> {
    for n in nodes.iter_mut() {
        n.start()?;
    }
    // The first answer: one node has taken the hub, every node reaches it.
    for n in nodes.iter() {
        let server = n.up()?;
        poll_until_answered(server, Vec::new(), Instant::now(), SETTLE).await.map_err(|e| format!("node {}: {e} [{}]", n.name, tails(nodes)))?;
    }
    let mut out = String::new();
    if !s.skips("singleton") {
        out.push_str(&latency(nodes, s, name, db_url).await?);
    }
    if !s.skips("failover") {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&failover(nodes, s).await?);
    }
    Ok(out)
}

// ---------------------------------------------------------------- the lease, as the admin API shows it

/// `GET path` on a loopback gateway (no admin token is configured, so
/// loopback peers may): status and body.
async fn http_get(port: u16, path: &str) -> Result<(u16, Vec<u8>), String> {
    let exchange = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = match tokio::time::timeout(ADMIN_TIMEOUT, exchange).await {
        Ok(Ok(raw)) => raw,
        Ok(Err(e)) => return Err(format!("GET {path}: {e}")),
        Err(_) => return Err(format!("GET {path}: no answer in {ADMIN_TIMEOUT:?}")),
    };
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| format!("GET {path}: no HTTP head in {:?}", String::from_utf8_lossy(&raw)))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| format!("GET {path}: bad status line in {head:?}"))?;
    let body = &raw[split + 4..];
    let chunked = head.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    Ok((status, if chunked { dechunk(body) } else { body.to_vec() }))
}

/// The body of a chunked transfer (extensions and trailers ignored).
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&b[..eol]);
        let Ok(n) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16) else { break };
        if n == 0 || b.len() < eol + 2 + n {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[(eol + 4 + n).min(b.len())..];
    }
    out
}

/// The hub's lease as `server`'s `GET /admin/plugins` shows it: (held, token);
/// None while the entry has no lease.
async fn lease(server: &Server) -> Result<Option<(bool, u64)>, String> {
    let (status, body) = http_get(server.port, "/admin/plugins").await?;
    if status != 200 {
        return Err(format!("GET /admin/plugins answered {status}: {}", String::from_utf8_lossy(&body)));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("GET /admin/plugins: {e}"))?;
    let entry = v["tenants"].as_array().and_then(|ts| ts.iter().find(|t| t["tenant"] == TENANT && t["plugin"] == PLUGIN));
    Ok(entry.and_then(|e| Some((e["lease"]["held"].as_bool()?, e["lease"]["token"].as_u64().unwrap_or(0)))))
}

/// Ask the running nodes in `among` until exactly one says it holds the
/// hub's lease: that node and its token.
async fn holder(nodes: &[Node], among: &[usize], within: Duration) -> Result<(usize, u64), String> {
    let deadline = Instant::now() + within;
    loop {
        let mut held = Vec::new();
        let mut seen = Vec::new();
        for &i in among {
            let l = lease(nodes[i].up()?).await.map_err(|e| format!("node {}: {e}", nodes[i].name))?;
            if let Some((true, token)) = l {
                held.push((i, token));
            }
            seen.push(format!("{}: {}", nodes[i].name, l.map_or("no lease listed".into(), |(h, t)| format!("held {h}, token {t}"))));
        }
        if held.len() == 1 {
            return Ok(held[0]);
        }
        if Instant::now() >= deadline {
            return Err(format!("not exactly one holder of the {PLUGIN} lease within {within:?} ({}) [{}]", seen.join("; "), tails(nodes)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------- polling for the first answer

/// How polling a node for its first result went.
struct Answered {
    /// From `since` to the arrival of the first result.
    after: Duration,
    /// Error answers meanwhile (4000 while the lease moves), and the first.
    errors: u64,
    first_error: Option<String>,
}

async fn call_once(mut c: Conn) -> (Conn, Result<Value, CallError>, Instant) {
    let r = c.call(METHOD, json!({})).await;
    (c, r, Instant::now())
}

async fn open_client(url: &str) -> Result<Conn, String> {
    let mut c = client::open(url, false).await?;
    c.connect("client").await?;
    Ok(c)
}

/// Send `METHOD` to `server` every `POLL` until one call is answered with a
/// result; `idle`: sockets to use first. A call the node holds (forwarded
/// to an owner that is gone) keeps its socket, and the next call goes out
/// on another, so the first answer is seen within `POLL` of the node being
/// able to give it. Fails once `within` has passed since `since`.
async fn poll_until_answered(server: &Server, mut idle: Vec<Conn>, since: Instant, within: Duration) -> Result<Answered, String> {
    let url = server.client_url();
    let deadline = since + within;
    let mut waiting = FuturesUnordered::new();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let (mut errors, mut first_error, mut last) = (0u64, None, String::from("no answer yet"));
    loop {
        tokio::select! {
            Some(done) = waiting.next() => {
                let (c, r, at): (Conn, Result<Value, CallError>, Instant) = done;
                match r {
                    Ok(_) => return Ok(Answered { after: at.saturating_duration_since(since), errors, first_error }),
                    Err(CallError::Rpc { code, message }) => {
                        errors += 1;
                        last = format!("error {code}: {message}");
                        first_error.get_or_insert_with(|| last.clone());
                        idle.push(c);
                    }
                    Err(CallError::Transport(e)) => last = e,
                }
            }
            _ = tick.tick() => {
                let c = match idle.pop() {
                    Some(c) => c,
                    None if waiting.len() >= MAX_WAITING => continue,
                    None => match open_client(&url).await {
                        Ok(c) => c,
                        Err(e) => {
                            last = e;
                            continue;
                        }
                    },
                };
                waiting.push(call_once(c));
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                return Err(format!("{METHOD} got no result within {within:?} ({errors} error answers; last: {last}; log: {})", server.log_tail(5)));
            }
        }
    }
}

// ---------------------------------------------------------------- latency

#[derive(Clone, Copy, PartialEq)]
enum Via {
    Owner,
    NonOwner,
}

/// (sockets, where the calls go), in the order of the rows.
const LOADS: [(usize, Via); 4] = [(1, Via::Owner), (1, Via::NonOwner), (CONCURRENT, Via::Owner), (CONCURRENT, Via::NonOwner)];

fn load_name(sockets: usize, via: Via, owner: &str, other: &str) -> String {
    let how = if sockets == 1 { "sequential".to_string() } else { format!("{sockets} concurrent") };
    match via {
        Via::Owner => format!("{how}, on the owner ({owner})"),
        Via::NonOwner => format!("{how}, through a non-owner ({other} → {owner})"),
    }
}

async fn latency(nodes: &[Node], s: &Settings, name: &str, db_url: &str) -> Result<String, String> {
    let all: Vec<usize> = (0..nodes.len()).collect();
    let (owner, token) = holder(nodes, &all, SETTLE).await?;
    let other = all.iter().copied().find(|&i| i != owner).expect("three nodes");
    let servers: Vec<&Server> = nodes.iter().map(Node::up).collect::<Result<_, _>>()?;
    let (on, via) = (nodes[owner].name, nodes[other].name);
    eprintln!("# {METHOD}: the hub's owner is node {on} (lease token {token}); calls through node {via}");
    let mut results: Vec<Vec<Load>> = LOADS.iter().map(|_| Vec::new()).collect();
    for round in 0..s.rounds {
        for (i, &(sockets, to)) in LOADS.iter().enumerate() {
            let target = if to == Via::Owner { servers[owner] } else { servers[other] };
            let label = load_name(sockets, to, on, via);
            match scenarios::calls(target, &servers, METHOD, "{}", sockets, 1, s.timing).await {
                Outcome::Load(l) => {
                    eprintln!(
                        "#   round {} {:<44} {:.0}/s p50 {} p99 {} errors {}",
                        round + 1,
                        label,
                        l.rate,
                        report::us(l.lat.p50_us),
                        report::us(l.lat.p99_us),
                        l.errors
                    );
                    results[i].push(l);
                }
                Outcome::Failed(why) => return Err(format!("{label}: {why} [{}]", tails(nodes))),
                other => return Err(format!("{label}: {other:?}")),
            }
        }
    }
    let (after, after_token) = holder(nodes, &all, SETTLE).await?;
    let medians: Vec<Load> = results.into_iter().map(|r| Load::median(r).expect("rounds >= 1")).collect();

    let mut t = format!(
        "### Singleton plugin: {METHOD} on its owner and through another node\n\n\
         `{METHOD}` of the UAP hub (`{PLUGIN}`, mode = \"singleton\"; read-only, no agents: an empty list) on cluster {name}: \
         nodes {} on {} with storage {db_url}, `singleton_lease_ms = {}`; the hub's owner is node {on} (lease token {token}), \
         calls through a non-owner go to node {via}. One call in flight per socket; median of {} alternating rounds per setup.\n\n",
        NODES.join(", "),
        s.nats,
        s.lease_ms,
        s.rounds
    );
    if (after, after_token) != (owner, token) {
        let _ = writeln!(t, "WARNING: the lease moved during the measurement: node {} holds it with token {after_token} now.\n", nodes[after].name);
    }
    t.push_str("| setup | rate | p50 | p99 | max | errors | server CPU (all three nodes) | generator CPU | notes |\n");
    t.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (&(sockets, to), l) in LOADS.iter().zip(&medians) {
        let _ = writeln!(
            t,
            "| {} | {} | {}; {} calls{} |",
            load_name(sockets, to, on, via),
            report::load_cells(l),
            l.note,
            l.lat.count,
            l.first_error.as_ref().map(|e| format!("; first error: {}", e.chars().take(120).collect::<String>())).unwrap_or_default()
        );
    }
    t.push_str(&report::ratio_table(
        "call",
        &[("sequential: non-owner / owner", &medians[1], &medians[0]), ("concurrent: non-owner / owner", &medians[3], &medians[2])],
    ));
    t.push_str(
        "\nRates count answers per second; latency is request to answer. The three nodes, the generator and the NATS \
         server share this machine's cores; the NATS server's and PostgreSQL's CPU are in no column.\n",
    );
    Ok(t)
}

// ---------------------------------------------------------------- failover

/// One kill -9 of the hub's owner.
struct Kill {
    owner: &'static str,
    token: u64,
    next: &'static str,
    next_token: u64,
    /// Until the first surviving node answered with a result, and which.
    first: Duration,
    first_on: &'static str,
    /// Until every surviving node had answered with a result.
    every: Duration,
    errors: u64,
    first_error: Option<String>,
    /// The restarted node: spawn to its first result.
    rejoin: Duration,
}

async fn failover(nodes: &mut [Node], s: &Settings) -> Result<String, String> {
    let all: Vec<usize> = (0..nodes.len()).collect();
    // Far beyond the 1.25 leases a takeover is due within: this only ends a run that hangs.
    let within = Duration::from_millis(s.lease_ms * 10) + Duration::from_secs(10);
    let mut kills: Vec<Kill> = Vec::with_capacity(s.kills);
    for k in 0..s.kills {
        let (o, token) = holder(nodes, &all, SETTLE).await?;
        let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != o).collect();
        // A connected socket on each survivor before the kill: the time is the takeover's, not a handshake's.
        let mut ready = Vec::new();
        for &i in &survivors {
            ready.push(open_client(&nodes[i].up()?.client_url()).await.map_err(|e| format!("node {}: {e}", nodes[i].name))?);
        }
        let killed = Instant::now();
        nodes[o].server.take().expect("the holder runs").kill9();
        let polls = survivors.iter().zip(ready).map(|(&i, c)| poll_until_answered(nodes[i].server.as_ref().expect("a survivor runs"), vec![c], killed, within));
        let answered = futures_util::future::join_all(polls).await;
        let mut kill = Kill {
            owner: nodes[o].name,
            token,
            next: "",
            next_token: 0,
            first: Duration::MAX,
            first_on: "",
            every: Duration::ZERO,
            errors: 0,
            first_error: None,
            rejoin: Duration::ZERO,
        };
        for (&i, a) in survivors.iter().zip(answered) {
            let a = a.map_err(|e| format!("kill {} of node {}: node {}: {e}", k + 1, nodes[o].name, nodes[i].name))?;
            if a.after < kill.first {
                (kill.first, kill.first_on) = (a.after, nodes[i].name);
            }
            kill.every = kill.every.max(a.after);
            kill.errors += a.errors;
            if kill.first_error.is_none() {
                kill.first_error = a.first_error;
            }
        }
        let (n, next_token) = holder(nodes, &survivors, SETTLE).await?;
        (kill.next, kill.next_token) = (nodes[n].name, next_token);

        let spawned = Instant::now();
        nodes[o].start()?;
        let back =
            poll_until_answered(nodes[o].up()?, Vec::new(), spawned, SETTLE).await.map_err(|e| format!("node {} after its restart: {e}", nodes[o].name))?;
        kill.rejoin = back.after;
        eprintln!(
            "#   kill {}/{}: owner {} (token {}) → {} (token {}); first result after {} (node {}), on every survivor after {}; {} error answers; restarted node answers {} after spawn",
            k + 1,
            s.kills,
            kill.owner,
            kill.token,
            kill.next,
            kill.next_token,
            secs(kill.first),
            kill.first_on,
            secs(kill.every),
            kill.errors,
            secs(kill.rejoin)
        );
        kills.push(kill);
    }
    Ok(failover_table(s, &kills))
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Min, median (the mean of the middle two for an even count) and max.
fn spread(mut xs: Vec<Duration>) -> (Duration, Duration, Duration) {
    xs.sort_unstable();
    let n = xs.len();
    let median = if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2 };
    (xs[0], median, xs[n - 1])
}

fn failover_table(s: &Settings, kills: &[Kill]) -> String {
    let bound = Duration::from_millis(s.lease_ms * 5 / 4);
    let mut t = format!(
        "### Singleton failover: kill -9 of the owner\n\n\
         {} kills of the UAP hub's owner among {} nodes, `singleton_lease_ms = {}` (a takeover is due within 1.25 leases, {}); \
         from the kill, `{METHOD}` is sent to each surviving node every {} ms (on another socket while a call is held) until \
         it answers with a result; the killed node is started again, and answers, before the next kill.\n\n",
        kills.len(),
        NODES.len(),
        s.lease_ms,
        secs(bound),
        POLL.as_millis()
    );
    if kills.is_empty() {
        t.push_str("No kills (--kills 0).\n");
        return t;
    }
    t.push_str("| from the kill -9 of the owner to | min | median | max | notes |\n");
    t.push_str("|---|---:|---:|---:|---|\n");
    let over = kills.iter().filter(|k| k.first > bound).count();
    let rows = [
        ("a result from a surviving node", kills.iter().map(|k| k.first).collect::<Vec<_>>(), format!("{over} of {} above 1.25 leases", kills.len())),
        ("a result from every surviving node", kills.iter().map(|k| k.every).collect(), String::from("the other survivor forwards to the new owner")),
    ];
    for (label, xs, note) in rows {
        let (lo, mid, hi) = spread(xs);
        let _ = writeln!(t, "| {label} | {} | {} | {} | {note} |", secs(lo), secs(mid), secs(hi));
    }
    let (lo, mid, hi) = spread(kills.iter().map(|k| k.rejoin).collect());
    let _ = writeln!(t, "| (restarted node: spawn to its first result) | {} | {} | {} | warm plugin cache |", secs(lo), secs(mid), secs(hi));
    let errors: u64 = kills.iter().map(|k| k.errors).sum();
    let first_error = kills.iter().find_map(|k| k.first_error.as_deref());
    let _ = write!(t, "\nError answers while the lease moved: {errors}");
    if let Some(e) = first_error {
        let _ = write!(t, " (first: {})", e.chars().take(120).collect::<String>());
    }
    t.push_str(". Per kill (owner → new owner, lease tokens, first result): ");
    let per: Vec<String> = kills.iter().map(|k| format!("{} → {} ({} → {}) {}", k.owner, k.next, k.token, k.next_token, secs(k.first))).collect();
    t.push_str(&per.join(", "));
    t.push_str(".\n");
    let stale: Vec<usize> = kills.iter().enumerate().filter(|(_, k)| k.next_token <= k.token).map(|(i, _)| i + 1).collect();
    if !stale.is_empty() {
        let _ = writeln!(t, "\nWARNING: the lease token did not grow at kill(s) {stale:?}.");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies() {
        assert_eq!(dechunk(b"5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\n\r\n"), b"hello, world");
        assert_eq!(dechunk(b"0\r\n\r\n"), b"");
    }

    #[test]
    fn spreads() {
        let ms = |v: &[u64]| v.iter().map(|&x| Duration::from_millis(x)).collect::<Vec<_>>();
        assert_eq!(spread(ms(&[3, 1, 2])), (Duration::from_millis(1), Duration::from_millis(2), Duration::from_millis(3)));
        assert_eq!(spread(ms(&[4, 1, 2, 3])).1, Duration::from_micros(2500));
    }
}
