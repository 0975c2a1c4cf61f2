//! `map-bench soak`: a steady mix against one server for a long time, to
//! see memory or latency creep. Paced `map/send` (open loop), mail writers
//! doing `mail/turn`, one subscriber to every event, and sessions that
//! connect, register and leave; every 10 s the server's RSS, the p99 of
//! `map/send`, what was done and the errors are sampled. The samples go to
//! a CSV and an SVG plot.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{self, CallError, Conn, Ws};
use crate::paced::{self, Meter, Pair, Schedule};
use crate::scenarios::{self, Outcome, Timing};
use crate::servers::{self, Paths, Server, Target};
use crate::soak_report;
use crate::stats::Samples;

/// Pairs of the paced `map/send`.
pub(crate) const PAIRS: usize = 10;
pub(crate) const WRITERS: usize = 4;
/// `mail/turn` per second of each writer (one in flight at a time).
pub(crate) const TURNS_PER_SEC: f64 = 25.0;
/// New sessions per second; each leaves once `CHURN_ALIVE` newer ones are open.
pub(crate) const CHURN_PER_SEC: f64 = 10.0;
pub(crate) const CHURN_ALIVE: usize = 10;
/// The gateway keeps a closed session resumable this long (default 300 s):
/// short, so that the parked sessions of the churn level off in the first
/// minute instead of growing for five.
pub(crate) const RESUME_WINDOW_SECS: u64 = 10;
/// The minute the first and last figures are taken over.
pub(crate) const MINUTE: f64 = 60.0;

pub struct Settings {
    pub target: Target,
    pub secs: f64,
    /// `map/send` per second; None: half of a 5 s capacity measurement.
    pub rate: Option<f64>,
    pub out: PathBuf,
    /// 10 s (shorter in tests).
    pub sample_every: Duration,
}

/// What the side tasks count (the paced sends count in their `Meter`,
/// which also takes every error).
#[derive(Default)]
pub(crate) struct Counters {
    pub turns: AtomicU64,
    pub events: AtomicU64,
    pub overflows: AtomicU64,
    pub churned: AtomicU64,
}

/// One sample: `t` is its end, in seconds since the start.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub t: f64,
    pub rss_mib: Option<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub sends: u64,
    pub turns: u64,
    pub events: u64,
    pub churned: u64,
    pub errors: u64,
    pub server_cores: Option<f64>,
    pub generator_cores: Option<f64>,
}

/// Half of what `send` (10 pairs x 10 in flight) delivers in 5 s.
async fn capacity(server: &Server) -> Result<f64, String> {
    let t = Timing { warmup: Duration::from_secs(1), secs: Duration::from_secs(5) };
    match scenarios::send(server, 10, 10, t, false).await {
        Outcome::Load(l) if l.rate > 0.0 => Ok(l.rate),
        Outcome::Load(l) => Err(format!("the capacity measurement delivered nothing (first error: {})", l.first_error.unwrap_or_default())),
        Outcome::Failed(e) => Err(format!("capacity measurement: {e}")),
        _ => Err("capacity measurement: no load".into()),
    }
}

async fn pairs(url: &str) -> Result<Vec<Pair>, String> {
    let mut pairs = Vec::with_capacity(PAIRS);
    for i in 0..PAIRS {
        let (sender, _) = Conn::agent(url, &format!("soak-sender-{i}")).await?;
        let (receiver, rid) = Conn::agent(url, &format!("soak-receiver-{i}")).await?;
        pairs.push(Pair { sender, receiver: receiver.ws, to: json!({ "agent": rid }).to_string() });
    }
    Ok(pairs)
}

/// The writers, each with a conversation of its own; Err(why) inside when
/// the target has no mail plugin.
async fn writers(url: &str) -> Result<Result<Vec<(Conn, String)>, String>, String> {
    let mut out = Vec::with_capacity(WRITERS);
    for i in 0..WRITERS {
        let (mut c, _) = Conn::agent(url, &format!("soak-mailer-{i}")).await?;
        let r = match c.call("mail/create", json!({"subject": format!("soak {i}")})).await {
            Ok(r) => r,
            Err(CallError::Rpc { code: -32601, message }) => return Ok(Err(format!("no mail plugin (mail/create: {message})"))),
            Err(e) => return Err(format!("mail/create: {e}")),
        };
        let conv = r.pointer("/conversation/id").and_then(Value::as_str).ok_or_else(|| format!("mail/create: no conversation id in {r}"))?;
        out.push((c, conv.to_string()));
    }
    Ok(Ok(out))
}

/// A client subscribed to every event; Err(why) inside when the target has no subscriptions.
async fn subscriber(url: &str) -> Result<Result<Ws, String>, String> {
    let mut c = client::open(url, false).await?;
    c.connect("client").await?;
    match c.call("map/subscribe", json!({"filter": {}})).await {
        Ok(_) => Ok(Ok(c.ws)),
        Err(CallError::Rpc { code: -32601, message }) => Ok(Err(format!("no subscriptions (map/subscribe: {message})"))),
        Err(e) => Err(format!("map/subscribe: {e}")),
    }
}

/// `mail/turn` every 1/`TURNS_PER_SEC` s, one at a time, until `end`.
async fn write_mail(mut c: Conn, conv: String, end: Instant, m: Arc<Meter>, n: Arc<Counters>) {
    let period = Duration::from_secs_f64(1.0 / TURNS_PER_SEC);
    let mut next = Instant::now();
    let mut k = 0u64;
    while next < end {
        tokio::time::sleep_until(next.into()).await;
        k += 1;
        match c.call("mail/turn", json!({"conversationId": conv, "contentType": "text", "content": format!("soak turn {k}")})).await {
            Ok(_) => {
                n.turns.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => m.error(format!("mail/turn: {e}")),
        }
        // Late: start again from now rather than catch up in a burst.
        next = (next + period).max(Instant::now());
    }
}

/// Count events (and overflow notices) until `end`.
async fn watch(mut ws: Ws, end: Instant, m: Arc<Meter>, n: Arc<Counters>) {
    let deadline = tokio::time::sleep_until(end.into());
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            f = ws.next() => match f {
                Some(Ok(Message::Text(t))) => {
                    if t.as_str().contains("\"map/event\"") {
                        n.events.fetch_add(1, Ordering::Relaxed);
                        if t.as_str().contains("overflow") {
                            n.overflows.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => { m.error(format!("subscriber: {e}")); break; }
                None => { m.error("subscriber closed"); break; }
            },
            () = &mut deadline => break,
        }
    }
}

/// Open a session (connect + register) `CHURN_PER_SEC` times a second;
/// close the oldest once more than `CHURN_ALIVE` are open.
async fn churn(url: String, end: Instant, m: Arc<Meter>, n: Arc<Counters>) {
    let mut alive: VecDeque<Conn> = VecDeque::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / CHURN_PER_SEC));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut i = 0u64;
    loop {
        tick.tick().await;
        if Instant::now() >= end {
            break;
        }
        i += 1;
        match Conn::agent(&url, &format!("soak-churn-{i}")).await {
            Ok((c, _)) => {
                n.churned.fetch_add(1, Ordering::Relaxed);
                alive.push_back(c);
            }
            Err(e) => m.error(format!("churn: {e}")),
        }
        while alive.len() > CHURN_ALIVE {
            leave(alive.pop_front().expect("not empty")).await;
        }
    }
    for c in alive {
        leave(c).await;
    }
}

async fn leave(mut c: Conn) {
    let _ = tokio::time::timeout(Duration::from_secs(1), c.ws.close(None)).await;
}

/// Totals so far: (sends delivered, turns, events, churned, errors).
fn totals(m: &Meter, n: &Counters) -> [u64; 5] {
    [Meter::get(&m.delivered), Meter::get(&n.turns), Meter::get(&n.events), Meter::get(&n.churned), Meter::get(&m.errors)]
}

/// The samples, and the latencies of the first and of the last minute.
pub struct Recording {
    pub samples: Vec<Sample>,
    pub first: Samples,
    pub last: Samples,
}

/// Sample every `every` from `start` until `end`.
async fn record(server: &Server, (start, end, every): (Instant, Instant, Duration), m: &Meter, n: &Counters) -> Recording {
    let total = (end - start).as_secs_f64();
    let mut rec = Recording { samples: Vec::new(), first: Samples::default(), last: Samples::default() };
    let (mut prev, mut cpu) = (totals(m, n), servers::Cpu::start(server));
    for k in 1.. {
        let at = (start + every * k).min(end);
        tokio::time::sleep_until(at.into()).await;
        let mut lat = m.take();
        let sum = lat.summary();
        let now = totals(m, n);
        let (server_cores, generator_cores) = cpu.cores(server);
        cpu = servers::Cpu::start(server);
        let d = |i: usize| now[i] - prev[i];
        let t = (at - start).as_secs_f64();
        let s = Sample {
            t,
            rss_mib: server.rss_kib().map(|k| k as f64 / 1024.0),
            p50_ms: sum.p50_us / 1000.0,
            p99_ms: sum.p99_us / 1000.0,
            sends: d(0),
            turns: d(1),
            events: d(2),
            churned: d(3),
            errors: d(4),
            server_cores,
            generator_cores,
        };
        eprintln!("#   {}", progress(&s));
        rec.samples.push(s);
        if t <= MINUTE + 0.5 {
            rec.first.merge(lat.clone());
        }
        if t > total - MINUTE + 0.5 {
            rec.last.merge(lat);
        }
        prev = now;
        if at >= end {
            break;
        }
    }
    rec
}

fn progress(s: &Sample) -> String {
    format!(
        "{:>5.0} s  RSS {}  p99 {:.2} ms  sends {}  turns {}  events {}  churned {}  errors {}  CPU server {} generator {}",
        s.t,
        s.rss_mib.map(|r| format!("{r:.1} MiB")).unwrap_or_else(|| "?".into()),
        s.p99_ms,
        s.sends,
        s.turns,
        s.events,
        s.churned,
        s.errors,
        pct(s.server_cores),
        pct(s.generator_cores)
    )
}

pub(crate) fn pct(x: Option<f64>) -> String {
    x.map(|c| format!("{:.0}%", c * 100.0)).unwrap_or_else(|| "?".into())
}

/// The side tasks that ran, and why the others did not.
struct Mix {
    tasks: Vec<JoinHandle<()>>,
    notes: Vec<String>,
}

async fn start_mix(server: &Server, sched: Schedule, m: &Arc<Meter>, n: &Arc<Counters>) -> Result<Mix, String> {
    let url = server.agent_url();
    let pairs = pairs(&url).await?;
    let writers = writers(&url).await?;
    let sub = subscriber(&server.client_url()).await?;
    let mut mix = Mix { tasks: vec![tokio::spawn(paced::run(pairs, sched, m.clone()))], notes: Vec::new() };
    match writers {
        Ok(ws) => mix.tasks.extend(ws.into_iter().map(|(c, conv)| tokio::spawn(write_mail(c, conv, sched.end, m.clone(), n.clone())))),
        Err(why) => mix.notes.push(why),
    }
    match sub {
        Ok(ws) => mix.tasks.push(tokio::spawn(watch(ws, sched.end, m.clone(), n.clone()))),
        Err(why) => mix.notes.push(why),
    }
    mix.tasks.push(tokio::spawn(churn(url, sched.end, m.clone(), n.clone())));
    Ok(mix)
}

/// Start the target, measure its capacity unless a rate is given, run the
/// mix, write the CSV and the SVG: the markdown tables.
pub async fn run(p: &Paths, s: &Settings) -> Result<String, String> {
    let server = Server::start_with(s.target, p, "soak", &format!("resume_window_secs = {RESUME_WINDOW_SECS}"), "")?;
    let result = soak(&server, s).await;
    let tail = server.log_tail(5);
    server.stop();
    let (rate, capacity, rec, m, n, notes) = result.map_err(|e| format!("{e} [server log: {tail}]"))?;
    let (csv, svg) = soak_report::write_files(&s.out, s.target, &rec.samples).map_err(|e| format!("{}: {e}", s.out.display()))?;
    let mut t = soak_report::summary(s, &rec, Meter::get(&m.errors), m.first_error());
    t.push_str(&soak_report::totals_table(s, rate, capacity, &rec, &n));
    for note in notes {
        let _ = writeln!(t, "\n{note}");
    }
    let _ = write!(t, "\nSamples: {}\nPlot: {}\n", csv.display(), svg.display());
    Ok(t)
}

type Soaked = (f64, Option<f64>, Recording, Arc<Meter>, Arc<Counters>, Vec<String>);

async fn soak(server: &Server, s: &Settings) -> Result<Soaked, String> {
    let (rate, capacity) = match s.rate {
        Some(r) => (r, None),
        None => {
            eprintln!("# capacity: map/send, 10 pairs x 10 in flight, 5 s");
            let c = capacity(server).await?;
            (c / 2.0, Some(c))
        }
    };
    eprintln!("# soak: {} s, map/send at {rate:.0}/s, {WRITERS} mail writers, 1 subscriber, {CHURN_PER_SEC} sessions/s", s.secs);
    let (m, n) = (Arc::new(Meter::default()), Arc::new(Counters::default()));
    let start = Instant::now() + Duration::from_millis(100);
    let sched = Schedule { rate, start, measure_from: start, end: start + Duration::from_secs_f64(s.secs) };
    let mix = start_mix(server, sched, &m, &n).await?;
    let rec = record(server, (start, sched.end, s.sample_every), &m, &n).await;
    for t in mix.tasks {
        if let Err(e) = t.await {
            m.error(format!("task: {e}"));
        }
    }
    Ok((rate, capacity, rec, m, n, mix.notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few seconds of the whole mix against the real gateway with the mail plugin.
    #[test]
    fn short_soak_against_the_gateway() {
        servers::raise_nofile();
        let p = servers::test_paths("soak", &["mail.wasm", "mail.toml"]);
        let out = p.scratch.join("out");
        let s = Settings { target: Target::Gateway, secs: 3.0, rate: Some(200.0), out: out.clone(), sample_every: Duration::from_secs(1) };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let table = rt.block_on(run(&p, &s)).expect("soak ran");
        let csv = std::fs::read_to_string(out.join("soak.csv")).expect("soak.csv");
        let svg = std::fs::read_to_string(out.join("soak.svg")).expect("soak.svg");
        let _ = std::fs::remove_dir_all(&p.scratch);
        let mut lines = csv.lines();
        assert!(lines.next().is_some_and(|h| h.starts_with("t_s,rss_mib,")), "a header row first: {csv}");
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 3, "{csv}");
        let col = |i: usize| rows.iter().map(|r| r[i].parse::<f64>().expect(r[i])).sum::<f64>();
        // Paced at 200/s for 3 s; the last sample may miss what is still in flight.
        assert!(col(4) >= 500.0, "sends: {csv}");
        assert!(col(5) > 10.0, "mail turns: {csv}");
        assert!(col(6) > 0.0, "events: {csv}");
        assert!(col(7) >= 20.0, "sessions churned: {csv}");
        assert_eq!(col(8), 0.0, "errors: {table}");
        assert!(rows.iter().all(|r| r[1].parse::<f64>().is_ok_and(|x| x > 1.0)), "RSS: {csv}");
        assert!(table.contains("| errors | | 0 |") && table.contains("| server RSS |"), "{table}");
        assert_eq!(svg.matches("<polyline points=\"").count(), 4, "two charts, each with axes and a line");
    }
}
