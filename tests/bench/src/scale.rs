//! `map-bench scale`: N concurrent WebSocket sessions on one server, each
//! with a registered agent. Measures the time to open them all, the server's
//! resident memory per session, and, while they are all connected, a
//! broadcast to a scope of M members and paced 1:1 `map/send` latency.
//!
//! Loopback offers about 28k ephemeral ports per (source, destination)
//! pair, so the client sockets are bound to source addresses 127.0.0.1,
//! 127.0.0.2, … before they connect.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{self, FuturesUnordered};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::net::TcpSocket;
use tokio::task::AbortHandle;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{self, CallError, Conn, Ws};
use crate::paced::{self, Meter, Pair, Schedule};
use crate::report;
use crate::scenarios;
use crate::servers::{self, Paths, Server, Target};

/// Sessions being opened at once.
const CONCURRENCY: usize = 500;
/// Sessions per source address (well below the ~28k ephemeral ports).
const PER_ADDRESS: usize = 10_000;
/// Sender/receiver pairs of the paced 1:1 part.
const PAIRS: usize = 5;
/// Broadcasts to the scope, one after the other.
const BROADCASTS: usize = 5;
/// Descriptors this process needs beyond its sessions.
const RESERVE_FILES: u64 = 200;
/// How long one session may take to open, connect and register.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the members of a scope may take to receive one broadcast.
const BROADCAST_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Settings {
    pub target: Target,
    pub sessions: usize,
    pub members: usize,
    /// Paced 1:1 `map/send` per second, over all pairs.
    pub rate: f64,
    pub warmup: Duration,
    pub secs: Duration,
    /// This process's open-file limit (the server it starts inherits it).
    pub nofile: u64,
}

/// The sessions that fit the open-file limit, and a note when fewer than asked.
pub fn fit(asked: usize, nofile: u64) -> (usize, Option<String>) {
    let room = nofile.saturating_sub(RESERVE_FILES).min(usize::MAX as u64) as usize;
    if asked <= room {
        return (asked, None);
    }
    let note = format!(
        "asked for {asked} sessions, but the open-file limit (hard) is {nofile} for this process and for the server it starts, \
         so {room} ran; raising the hard limit needs privileges (limits.conf, systemd LimitNOFILE, or ulimit -Hn as root)"
    );
    (room, Some(note))
}

/// The source address of session `i` of `n`: round robin over as many of
/// 127.0.0.1, .2, … as `n` needs at `PER_ADDRESS` each.
pub fn source(i: usize, n: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 1 + (i % addresses(n)) as u8)
}

fn addresses(n: usize) -> usize {
    n.div_ceil(PER_ADDRESS).clamp(1, 254)
}

/// Small buffers: the generator holds every session.
fn tiny() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(512).write_buffer_size(0)
}

/// Open one session from `from`: bind, connect, handshake, `map/connect`, register.
async fn session(url: &str, server: SocketAddr, from: Ipv4Addr, i: usize) -> Result<(Conn, String), String> {
    let open = async {
        let sock = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
        // Let connect() pick the port for the whole 4-tuple, not bind().
        let one: libc::c_int = 1;
        // SAFETY: setsockopt on a socket we own, with a c_int option value.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        sock.bind(SocketAddr::from((from, 0))).map_err(|e| format!("bind {from}: {e}"))?;
        let tcp = sock.connect(server).await.map_err(|e| format!("connect from {from}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let mut c = client::handshake(url, tcp, tiny()).await?;
        c.connect("agent").await?;
        let id = c.register(&format!("scale-{i}")).await?;
        Ok((c, id))
    };
    tokio::time::timeout(OPEN_TIMEOUT, open).await.map_err(|_| format!("session not open after {OPEN_TIMEOUT:?}"))?
}

/// Keep reading an idle session (tungstenite answers the server's pings
/// while it reads); count it when the server closes it.
async fn hold(mut ws: Ws, closed: Arc<AtomicU64>) {
    while let Some(Ok(_)) = ws.next().await {}
    closed.fetch_add(1, Ordering::Relaxed);
}

/// Every session of the run: the last `specials` are kept for the
/// measurements, the others read on in tasks of their own.
struct Connected {
    specials: Vec<(Conn, String)>,
    holders: Vec<AbortHandle>,
    closed: Arc<AtomicU64>,
    failed: usize,
    first_error: Option<String>,
    secs: f64,
    cores: (Option<f64>, Option<f64>),
}

async fn connect_all(server: &Server, n: usize, specials: usize) -> Connected {
    let owned_url = server.agent_url();
    let url = owned_url.as_str();
    let addr = SocketAddr::from(([127, 0, 0, 1], server.port));
    let first_special = n - specials;
    let closed = Arc::new(AtomicU64::new(0));
    let mut kept = Vec::with_capacity(specials);
    let (mut holders, mut failed, mut first_error) = (Vec::with_capacity(n), 0, None);
    let cpu = servers::Cpu::start(server);
    // Boxed: a finished session's socket keeps a waker of the task that opened
    // it, and that task's allocation would otherwise hold the whole future.
    let mut opened = stream::iter(0..n).map(|i| Box::pin(async move { (i, session(url, addr, source(i, n), i).await) })).buffer_unordered(CONCURRENCY);
    let mut done = 0;
    while let Some((i, r)) = opened.next().await {
        match r {
            Ok(s) if i >= first_special => kept.push((i, s)),
            Ok((c, _)) => holders.push(tokio::spawn(hold(c.ws, closed.clone())).abort_handle()),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
        }
        done += 1;
        if done % (n / 10).max(1) == 0 {
            eprintln!("#   {done}/{n} sessions ({failed} failed) after {:.1} s", cpu.at.elapsed().as_secs_f64());
        }
    }
    drop(opened);
    let secs = cpu.at.elapsed().as_secs_f64();
    let cores = cpu.cores(server);
    kept.sort_by_key(|(i, _)| *i);
    Connected { specials: kept.into_iter().map(|(_, s)| s).collect(), holders, closed, failed, first_error, secs, cores }
}

/// One broadcast's times from the send: to the first and to the last delivery.
struct Round {
    first: Duration,
    all: Option<Duration>,
    missing: usize,
}

/// Wait on one member for the delivery of broadcast `round`.
async fn arrival(ws: &mut Ws, round: usize) -> Option<Instant> {
    let mark = format!("\"round\":{round}");
    let wait = async {
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Text(t) = m {
                if t.as_str().contains(&mark) {
                    return Some(Instant::now());
                }
            }
        }
        None
    };
    tokio::time::timeout(BROADCAST_TIMEOUT, wait).await.ok().flatten()
}

/// Create a scope, let every member join it, then `BROADCASTS` times one
/// `map/send` to the scope. None when the target has no scopes.
async fn broadcast(sender: &mut Conn, members: &mut [(Conn, String)]) -> Result<Option<Vec<Round>>, String> {
    let scope = match sender.call("map/scopes/create", json!({"name": "scale"})).await {
        Ok(r) => r,
        Err(CallError::Rpc { code: -32601, .. }) => return Ok(None),
        Err(e) => return Err(format!("map/scopes/create: {e}")),
    };
    let scope_id = scope.pointer("/scope/id").or_else(|| scope.get("scopeId")).or_else(|| scope.get("id")).and_then(Value::as_str);
    let scope_id = scope_id.ok_or_else(|| format!("map/scopes/create: no scope id in {scope}"))?.to_string();
    let joins: Vec<Result<Value, CallError>> = stream::iter(members.iter_mut())
        .map(|(c, id)| c.call("map/scopes/join", json!({"scopeId": scope_id, "agentId": id})))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    if let Some(Err(e)) = joins.into_iter().find(Result::is_err) {
        return Err(format!("map/scopes/join: {e}"));
    }
    let mut rounds = Vec::new();
    for round in 0..BROADCASTS {
        let t0 = Instant::now();
        let payload = json!({"bt": scenarios::ns_at(t0), "round": round, "text": "map-bench broadcast"});
        let waits: FuturesUnordered<_> = members.iter_mut().map(|(c, _)| arrival(&mut c.ws, round)).collect();
        let (answer, got) = tokio::join!(sender.call("map/send", json!({"to": {"scope": scope_id}, "payload": payload})), waits.collect::<Vec<_>>());
        answer.map_err(|e| format!("map/send to the scope: {e}"))?;
        let times: Vec<Duration> = got.iter().flatten().map(|t| *t - t0).collect();
        let missing = members.len() - times.len();
        let first = times.iter().min().copied().unwrap_or_default();
        let all = (missing == 0).then(|| times.iter().max().copied().unwrap_or_default());
        rounds.push(Round { first, all, missing });
    }
    Ok(Some(rounds))
}

/// The paced part's outcome.
struct Paced {
    lat: crate::stats::Summary,
    errors: u64,
    first_error: Option<String>,
    cores: (Option<f64>, Option<f64>),
}

async fn paced_sends(server: &Server, pairs: Vec<Pair>, s: &Settings) -> Paced {
    let start = Instant::now() + Duration::from_millis(10);
    let sched = Schedule { rate: s.rate, start, measure_from: start + s.warmup, end: start + s.warmup + s.secs };
    let meter = Arc::new(Meter::default());
    let task = tokio::spawn(paced::run(pairs, sched, meter.clone()));
    tokio::time::sleep_until(sched.measure_from.into()).await;
    let cpu = servers::Cpu::start(server);
    tokio::time::sleep_until(sched.end.into()).await;
    let cores = cpu.cores(server);
    if let Err(e) = task.await {
        meter.error(format!("task: {e}"));
    }
    Paced { lat: meter.take().summary(), errors: Meter::get(&meter.errors), first_error: meter.first_error(), cores }
}

/// Memory before and after, in KiB: (server before, server after, generator before, generator after).
type Rss = (Option<u64>, Option<u64>, Option<u64>, Option<u64>);

/// Everything one run measured.
struct Scaled {
    n: usize,
    members: usize,
    c: Connected,
    rss: Rss,
    bcast: Option<Vec<Round>>,
    paced: Paced,
    /// Idle sessions the server closed while the run held them.
    closed: u64,
    limit_note: Option<String>,
}

/// Start the target, run every part: the markdown table.
pub async fn run(p: &Paths, s: &Settings) -> Result<String, String> {
    let r = scale(p, s).await?;
    let mut t = table(s, &r);
    if let Some(note) = &r.limit_note {
        let _ = write!(t, "\n{note}\n");
    }
    Ok(t)
}

async fn scale(p: &Paths, s: &Settings) -> Result<Scaled, String> {
    let (n, limit_note) = fit(s.sessions, s.nofile);
    if n < 2 * PAIRS + 2 {
        return Err(format!("scale needs at least {} sessions", 2 * PAIRS + 2));
    }
    let members = s.members.min(n - 1 - 2 * PAIRS);
    let specials = 1 + 2 * PAIRS + members;
    if let Some(note) = &limit_note {
        eprintln!("# {note}");
    }
    let server = Server::start_with(s.target, p, "scale", &format!("max_connections = {}", n + 100), "")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss0, me0) = (server.rss_kib(), servers::self_rss_kib());
    eprintln!("# opening {n} sessions on {} ({CONCURRENCY} at a time)", s.target.name());
    let mut c = connect_all(&server, n, specials).await;
    // Let the server settle (allocations behind the last answers).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss: Rss = (rss0, server.rss_kib(), me0, servers::self_rss_kib());
    let result = measure(&server, &mut c, members, s).await;
    let closed = Meter::get(&c.closed);
    for h in &c.holders {
        h.abort();
    }
    server.stop();
    let (bcast, paced) = result.map_err(|e| format!("{e} [server log: {}]", server_log(p, s.target)))?;
    Ok(Scaled { n, members, c, rss, bcast, paced, closed, limit_note })
}

fn server_log(p: &Paths, target: Target) -> String {
    let text = std::fs::read_to_string(p.scratch.join(format!("{}-scale.log", target.name()))).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// The broadcast, then the paced sends; the specials are held by tasks after.
async fn measure(server: &Server, c: &mut Connected, members: usize, s: &Settings) -> Result<(Option<Vec<Round>>, Paced), String> {
    let specials = std::mem::take(&mut c.specials);
    if specials.len() < 1 + 2 * PAIRS + 1 {
        return Err(format!("only {} of the sessions to measure with opened (first error: {})", specials.len(), c.first_error.clone().unwrap_or_default()));
    }
    let mut specials = specials.into_iter();
    let (mut sender, _) = specials.next().expect("checked above");
    let pairs: Vec<Pair> = (0..PAIRS)
        .map(|_| {
            let (sender, _) = specials.next().expect("checked above");
            let (receiver, rid) = specials.next().expect("checked above");
            Pair { sender, receiver: receiver.ws, to: json!({ "agent": rid }).to_string() }
        })
        .collect();
    let mut group: Vec<(Conn, String)> = specials.take(members).collect();
    eprintln!("# broadcast to {} members", group.len());
    let bcast = broadcast(&mut sender, &mut group).await?;
    for (conn, _) in group.into_iter().chain(std::iter::once((sender, String::new()))) {
        c.holders.push(tokio::spawn(hold(conn.ws, c.closed.clone())).abort_handle());
    }
    eprintln!("# map/send 1:1 at {}/s", s.rate);
    let paced = paced_sends(server, pairs, s).await;
    Ok((bcast, paced))
}

fn pct(x: Option<f64>) -> String {
    x.map(|c| format!("{:.0}%", c * 100.0)).unwrap_or_else(|| "?".into())
}

fn kib_per(before: Option<u64>, after: Option<u64>, n: usize) -> (String, String) {
    match (before, after) {
        (Some(b), Some(a)) => (
            format!("{:.1} KiB/session", a.saturating_sub(b) as f64 / n.max(1) as f64),
            format!("VmRSS {:.1} → {:.1} MiB", b as f64 / 1024.0, a as f64 / 1024.0),
        ),
        _ => ("?".into(), "VmRSS not readable".into()),
    }
}

fn table(s: &Settings, r: &Scaled) -> String {
    let (n, c, rss, paced, closed) = (r.n, &r.c, r.rss, &r.paced, r.closed);
    let held = n - c.failed;
    let mut t = format!("| {held} sessions on {} | result | errors | server CPU | generator CPU | notes |\n", s.target.name());
    t.push_str("|---|---:|---:|---:|---:|---|\n");
    let last = Ipv4Addr::new(127, 0, 0, addresses(n) as u8);
    let per_session_ms = c.cores.0.map(|x| format!(" · {:.2} ms/session", x * c.secs * 1000.0 / held.max(1) as f64)).unwrap_or_default();
    let first_error = c.first_error.as_ref().map(|e| format!("; first error: {}", e.chars().take(160).collect::<String>())).unwrap_or_default();
    let _ = writeln!(
        t,
        "| connect + register | {:.1} s ({}/s) | {} | {}{per_session_ms} | {} | {CONCURRENCY} at a time from 127.0.0.1–{last}{first_error} |",
        c.secs,
        report::rate(held as f64 / c.secs.max(1e-9)),
        c.failed,
        pct(c.cores.0),
        pct(c.cores.1),
    );
    let (server_kib, server_note) = kib_per(rss.0, rss.1, held);
    let _ = writeln!(t, "| server memory | {server_kib} | | | | {server_note} |");
    let (me_kib, me_note) = kib_per(rss.2, rss.3, held);
    let _ = writeln!(t, "| generator memory | {me_kib} | | | | {me_note} |");
    let _ = writeln!(t, "{}", broadcast_row(r.members, &r.bcast));
    let l = &paced.lat;
    let paced_error = paced.first_error.as_ref().map(|e| format!("; first error: {}", e.chars().take(160).collect::<String>())).unwrap_or_default();
    let _ = writeln!(
        t,
        "| map/send 1:1 at {}/s | p50 {} · p99 {} · max {} | {} | {} | {} | {PAIRS} pairs, open loop, {} s after {} s warm-up, {} deliveries measured{paced_error} |",
        report::rate(s.rate),
        report::us(l.p50_us),
        report::us(l.p99_us),
        report::us(l.max_us),
        paced.errors,
        report::cores(paced.cores.0, s.rate),
        report::cores(paced.cores.1, s.rate),
        s.secs.as_secs_f64(),
        s.warmup.as_secs_f64(),
        l.count
    );
    let _ = writeln!(t, "| sessions closed by the server | {closed} | {closed} | | | of the idle ones, while the run held them |");
    t
}

fn broadcast_row(members: usize, bcast: &Option<Vec<Round>>) -> String {
    let Some(rounds) = bcast else { return format!("| broadcast to {members} members | n/a | | | | no scopes |") };
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let mut all: Vec<Duration> = rounds.iter().filter_map(|r| r.all).collect();
    all.sort();
    let mut first: Vec<Duration> = rounds.iter().map(|r| r.first).collect();
    first.sort();
    let missing: usize = rounds.iter().map(|r| r.missing).sum();
    let median = |v: &[Duration]| v.get(v.len() / 2).copied().map(ms).unwrap_or_else(|| "n/a".into());
    format!(
        "| broadcast to {members} members | {} | {missing} | | | until every member has it, median of {} (min {}, max {}); first member after {} (median); one map/send to the scope at a time |",
        median(&all),
        all.len(),
        all.first().copied().map(ms).unwrap_or_else(|| "n/a".into()),
        all.last().copied().map(ms).unwrap_or_else(|| "n/a".into()),
        median(&first)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_and_limits() {
        assert_eq!(source(7, 50), Ipv4Addr::new(127, 0, 0, 1));
        assert_eq!((0..4).map(|i| source(i, 25_000)).collect::<Vec<_>>(), [1, 2, 3, 1].map(|d| Ipv4Addr::new(127, 0, 0, d)));
        assert_eq!(addresses(100_000), 10);
        assert_eq!(fit(1000, 20_000), (1000, None));
        let (n, note) = fit(100_000, 20_000);
        assert_eq!(n, 19_800);
        assert!(note.is_some_and(|t| t.contains("100000") && t.contains("19800")));
    }

    /// A tiny run against the real gateway (no plugins): every part measured, nothing failed.
    #[test]
    fn tiny_scale_against_the_gateway() {
        servers::raise_nofile();
        let p = servers::test_paths("scale", &[]);
        let s = Settings {
            target: Target::Gateway,
            sessions: 60,
            members: 20,
            rate: 400.0,
            warmup: Duration::from_millis(300),
            secs: Duration::from_secs(1),
            nofile: 20_000,
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let r = rt.block_on(scale(&p, &s)).expect("scale ran");
        let t = table(&s, &r);
        let _ = std::fs::remove_dir_all(&p.scratch);
        assert_eq!((r.n, r.c.failed, r.closed), (60, 0, 0), "{t}");
        assert_eq!(r.c.holders.len(), 60 - 2 * PAIRS, "every session but the pairs' is read by a task: {t}");
        assert!(r.rss.0.is_some() && r.rss.1 > r.rss.0, "{t}");
        let rounds = r.bcast.as_ref().expect("the gateway has scopes");
        assert_eq!(rounds.len(), BROADCASTS);
        assert!(rounds.iter().all(|x| x.missing == 0 && x.all.is_some_and(|a| a >= x.first)), "{t}");
        assert_eq!(r.paced.errors, 0, "{t}");
        // 400/s over 1 s measured; a scheduled message may straddle the edges.
        assert!((390..=410).contains(&r.paced.lat.count), "{t}");
        assert!(r.paced.lat.p99_us > 0.0 && r.paced.lat.p50_us <= r.paced.lat.p99_us);
        assert!(t.contains("| connect + register |") && t.contains("| broadcast to 20 members |"), "{t}");
    }
}
