//! `map-bench`: a MAP load generator and a side-by-side benchmark of the
//! reference server, the gateway and a minimal router (the ceiling).
//!
//! ```text
//! cargo run --release -p map-bench -- all
//! cargo run --release -p map-bench -- send --target gateway --inflight 100 --secs 10
//! ```
//! See README.md beside Cargo.toml.

mod backends;
mod client;
mod cluster;
mod overhead;
mod paced;
mod plot;
mod report;
mod scale;
mod scaling;
mod scenarios;
mod servers;
mod singletons;
mod soak;
mod soak_report;
mod stats;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use report::{Report, Row};
use scenarios::{Outcome, Timing};
use servers::{Paths, Server, Target};

const USAGE: &str = "\
usage:
  map-bench all [options]                  every scenario against reference, gateway and ceiling, then the tables
  map-bench SCENARIO --target T [options]  one scenario against one target (for profiling)
  map-bench overhead [options]             map/send on the gateway with metrics off, metrics on, and
                                           metrics + OTLP traces (all and 1% sampled), in alternating rounds
  map-bench cluster [options]              map/send in cluster mode, sender on node a and receiver on node b
                                           (cross-node) vs both on node a (same-node), and the single-node
                                           embedded default (SQLite) for reference, in alternating rounds;
                                           then aggregate map/send on clusters of 1, 2 and 3 nodes with the
                                           pairs spread over the nodes, and cross-node server CPU per message
                                           vs same-node (target <= 1.3x); then a singleton plugin (the UAP
                                           hub) on three nodes: uap/agents on its owner vs through another
                                           node, and the failover time after kill -9 of the owner; needs NATS
                                           with JetStream (--nats) and PostgreSQL (--postgres)
  map-bench scale [--target T] [options]   --sessions concurrent sessions (default 100000) on one server, each
                                           with a registered agent: time to open them all, server VmRSS per
                                           session, then a broadcast to a scope of --members (default 1000) and
                                           map/send 1:1 paced at --rate (default 1000/s) for --secs (default 10)
  map-bench soak [--target T] [options]    a steady mix for --secs (default 1800): map/send paced at --rate
                                           (default half of a 5 s capacity measurement), 4 mail/turn writers,
                                           a subscriber to every event, 10 sessions/s connecting and leaving;
                                           samples every 10 s, a CSV and an SVG plot in --out

scenarios: send, fanout, watch, mail, idle, startup
targets:   reference, gateway, ceiling

options:
  --secs N            measured seconds per load scenario (default 5; scale 10, soak 1800)
  --warmup N          warm-up seconds before measuring (default 1)
  --inflight N        messages in flight in total for send/watch/mail (default 100)
  --pairs N           sender/receiver pairs (default min(10, inflight)); in flight per pair = inflight / pairs
  --members N         scope members for fanout (default 10; scale 1000)
  --sessions N        idle sessions (default 10000); scale: sessions (default 100000)
  --idle N            mail: idle sessions held open beside the load (default 0)
  --rate N            scale, soak: map/send per second, paced (scale default 1000)
  --out DIR           soak: where soak.csv and soak.svg go (default target/bench/soak of the workspace)
  --targets a,b       all: only these targets (default reference,gateway,ceiling)
  --skip a,b          all: leave out these scenario keys (send1,send100,fanout10,fanout100,watch,mail,idle);
                      cluster: leave out these parts (send,scaling,singleton,failover)
  --url ws://…        single scenario: use this running server instead of starting one
  --pid PID           with --url: the server's pid (VmRSS, CPU)
  --gateway-bin P     gateway binary (default target/release/map-gateway, built by cargo first)
  --plugin-dir P      gateway plugin_dir (default plugins/dist of the workspace; cluster: an empty folder
                      for map/send, and uap.wasm + uap.toml copied from here for the singleton part)
  --reference-dir P   reference server folder (default tests/bench/reference of the workspace)
  --rounds N          overhead, cluster: rounds per variant (default 3; the median is reported)
  --postgres URL      cluster: storage.url of both nodes (default postgres://root@127.0.0.1:5432/test;
                      the database must exist, map/send writes nothing to it); the scaling and singleton
                      parts create databases of their own next to it and drop them after (fall back to
                      this one when they cannot: trust or cleartext-password authentication only)
  --nats URL          cluster: NATS server with JetStream (default nats://127.0.0.1:4222); each run uses
                      a cluster name of its own and deletes its streams <name>_events and <name>_dir after
  --lease-ms N        cluster: singleton_lease_ms of the singleton part's nodes (default 2000, at least 400)
  --kills N           cluster: kill -9s of the singleton's owner in the failover part (default 10)
  --no-build          do not run `cargo build --release -p map-gateway` (and map-ceiling) first
";

struct Opts {
    command: String,
    target: Option<Target>,
    targets: Vec<Target>,
    skip: Vec<String>,
    secs: f64,
    warmup: f64,
    inflight: u64,
    pairs: Option<usize>,
    members: usize,
    sessions: usize,
    idle: usize,
    url: Option<String>,
    pid: Option<u32>,
    gateway_bin: Option<PathBuf>,
    plugin_dir: Option<PathBuf>,
    reference_dir: Option<PathBuf>,
    no_build: bool,
    rounds: usize,
    postgres: String,
    nats: String,
    lease_ms: u64,
    kills: usize,
    rate: Option<f64>,
    out: Option<PathBuf>,
}

fn parse() -> Result<Opts, String> {
    let mut args = std::env::args();
    args.next(); // the program name
    let command = args.next().ok_or("no command")?;
    let mut o = Opts {
        command,
        target: None,
        targets: Target::ALL.to_vec(),
        skip: Vec::new(),
        secs: 5.0,
        warmup: 1.0,
        inflight: 100,
        pairs: None,
        members: 10,
        sessions: 10_000,
        idle: 0,
        url: None,
        pid: None,
        gateway_bin: None,
        plugin_dir: None,
        reference_dir: None,
        no_build: false,
        rounds: 3,
        postgres: cluster::DEFAULT_POSTGRES.into(),
        nats: cluster::DEFAULT_NATS.into(),
        lease_ms: 2000,
        kills: 10,
        rate: None,
        out: None,
    };
    // Defaults that depend on the command.
    let (mut secs, mut members, mut sessions) = (None, None, None);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        let num = |v: String| v.parse::<f64>().map_err(|_| format!("{a}: not a number: {v}"));
        match a.as_str() {
            "--target" => o.target = Some(Target::parse(&val()?).ok_or("unknown target")?),
            "--targets" => o.targets = val()?.split(',').map(|t| Target::parse(t).ok_or(format!("unknown target {t}"))).collect::<Result<_, _>>()?,
            "--skip" => o.skip = val()?.split(',').map(str::to_string).collect(),
            "--secs" => secs = Some(num(val()?)?),
            "--warmup" => o.warmup = num(val()?)?,
            "--inflight" => o.inflight = num(val()?)? as u64,
            "--pairs" => o.pairs = Some(num(val()?)? as usize),
            "--members" => members = Some(num(val()?)? as usize),
            "--sessions" => sessions = Some(num(val()?)? as usize),
            "--idle" => o.idle = num(val()?)? as usize,
            "--rate" => o.rate = Some(num(val()?)?),
            "--out" => o.out = Some(val()?.into()),
            "--url" => o.url = Some(val()?),
            "--pid" => o.pid = Some(num(val()?)? as u32),
            "--gateway-bin" => o.gateway_bin = Some(val()?.into()),
            "--plugin-dir" => o.plugin_dir = Some(val()?.into()),
            "--reference-dir" => o.reference_dir = Some(val()?.into()),
            "--no-build" => o.no_build = true,
            "--rounds" => o.rounds = (num(val()?)? as usize).max(1),
            "--postgres" => o.postgres = val()?,
            "--nats" => o.nats = val()?,
            "--lease-ms" => o.lease_ms = num(val()?)? as u64,
            "--kills" => o.kills = num(val()?)? as usize,
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown option {a}")),
        }
    }
    let scale = o.command == "scale";
    o.secs = secs.unwrap_or(match o.command.as_str() {
        "scale" => 10.0,
        "soak" => 1800.0,
        _ => 5.0,
    });
    o.members = members.unwrap_or(if scale { 1000 } else { 10 });
    o.sessions = sessions.unwrap_or(if scale { 100_000 } else { 10_000 });
    if o.url.is_some() && (o.command == "scale" || o.command == "soak") {
        return Err(format!("{} starts its own server (it sets the server's limits): no --url", o.command));
    }
    if o.rate.is_some_and(|r| r <= 0.0 || !r.is_finite()) {
        return Err("--rate must be positive".into());
    }
    if o.inflight == 0 || o.secs <= 0.0 || o.members == 0 {
        return Err("--inflight, --secs and --members must be positive".into());
    }
    if o.lease_ms < 400 {
        return Err("--lease-ms must be at least 400 (the gateway's minimum)".into());
    }
    Ok(o)
}

fn paths(o: &Opts) -> Paths {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    let exe_dir = std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf)).unwrap_or_else(|| workspace.join("target/release"));
    // The gateway is always the release build, whatever profile this binary has.
    let release_dir = if exe_dir.ends_with("release") { exe_dir.clone() } else { exe_dir.join("../release") };
    let scratch = std::env::temp_dir().join(format!("map-bench-{}", std::process::id()));
    Paths {
        gateway_bin: o.gateway_bin.clone().unwrap_or_else(|| release_dir.join("map-gateway")),
        ceiling_bin: exe_dir.join("map-ceiling"),
        plugin_dir: o.plugin_dir.clone().unwrap_or_else(|| workspace.join("plugins/dist")),
        reference_dir: o
            .reference_dir
            .clone()
            .or_else(|| std::env::var_os("MAP_BENCH_REFERENCE").map(PathBuf::from))
            .unwrap_or_else(|| workspace.join("tests/bench/reference")),
        workspace,
        scratch,
    }
}

/// `cargo build --release -p map-gateway`, then `-p map-bench --bin map-ceiling`
/// (two invocations, so that neither changes the other's feature resolution and
/// nothing is rebuilt twice). A failure with existing binaries is a warning (the
/// note ends up under the tables).
fn build(p: &Paths, notes: &mut Vec<String>) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    for (args, bin) in [
        (&["build", "--release", "-p", "map-gateway"][..], &p.gateway_bin),
        (&["build", "--release", "-p", "map-bench", "--bin", "map-ceiling"][..], &p.ceiling_bin),
    ] {
        eprintln!("# cargo {}", args.join(" "));
        let status = Command::new(&cargo).args(args).current_dir(&p.workspace).status().map_err(|e| format!("cargo: {e}"))?;
        if !status.success() {
            if bin.exists() {
                let msg = format!("WARNING: `cargo {}` failed ({status}); benchmarked the existing {}", args.join(" "), bin.display());
                eprintln!("# {msg}");
                notes.push(msg);
            } else {
                return Err(format!("`cargo {}` failed ({status})", args.join(" ")));
            }
        }
    }
    Ok(())
}

fn timing(o: &Opts) -> Timing {
    Timing { warmup: Duration::from_secs_f64(o.warmup), secs: Duration::from_secs_f64(o.secs) }
}

/// `--inflight` split over `--pairs` sockets: (pairs, in flight per pair).
fn split(inflight: u64, pairs: Option<usize>) -> (usize, u64) {
    let pairs = pairs.unwrap_or(inflight.min(10) as usize).max(1);
    (pairs, inflight.div_ceil(pairs as u64).max(1))
}

fn progress(row: &Row) {
    let what = match &row.outcome {
        Outcome::Load(l) => {
            format!("{:.0}/s p50 {} p99 {} max {} errors {}", l.rate, report::us(l.lat.p50_us), report::us(l.lat.p99_us), report::us(l.lat.max_us), l.errors)
        }
        Outcome::Idle { per_session_kib, sessions, .. } => format!("{per_session_kib:.1} KiB/session over {sessions}"),
        Outcome::Startup { ms, .. } => format!("{ms:.0} ms"),
        Outcome::NotApplicable(w) => format!("n/a: {w}"),
        Outcome::Failed(w) => format!("FAILED: {w}"),
    };
    eprintln!("#   {:<28} {:<9} {what}", row.label, row.target.name());
}

fn startup_note(target: Target, p: &Paths) -> String {
    match target {
        Target::Gateway => {
            let plugins: Vec<String> = std::fs::read_dir(&p.plugin_dir)
                .map(|d| {
                    d.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "wasm")).map(|e| e.file_name().to_string_lossy().into_owned()).collect()
                })
                .unwrap_or_default();
            if plugins.is_empty() {
                format!("no plugins in {}", p.plugin_dir.display())
            } else {
                format!("plugins: {}", plugins.join(", "))
            }
        }
        Target::Reference => "node serve.mjs mapserver (mail + trajectory built in)".into(),
        Target::Ceiling => "minimal router".into(),
    }
}

async fn all(o: &Opts, p: &Paths, notes: &mut Vec<String>) -> Vec<Row> {
    let t = timing(o);
    let mut rows = Vec::new();
    let skip = |k: &str| o.skip.iter().any(|s| s == k);
    let push = |rows: &mut Vec<Row>, key: &'static str, label: String, target: Target, outcome: Outcome| {
        let outcome = match outcome {
            Outcome::Failed(why) => Outcome::Failed(format!("{why} [server log: {}]", scratch_log(p, target))),
            o => o,
        };
        let row = Row { key, label, target, outcome };
        progress(&row);
        rows.push(row);
    };
    for &target in &o.targets {
        eprintln!("# {}", target.name());
        // 1. A fresh process: start-up time, then idle sessions on a clean heap.
        let label = if target == Target::Gateway { "start-up to ready (cold plugin cache)" } else { "start-up to ready" };
        let server = match Server::start(target, p, "idle") {
            Ok(s) => s,
            Err(e) => {
                push(&mut rows, "startup", label.into(), target, Outcome::Failed(e));
                continue;
            }
        };
        push(&mut rows, "startup", label.into(), target, Outcome::Startup { ms: server.ready_after.as_secs_f64() * 1000.0, note: startup_note(target, p) });
        if !skip("idle") {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let out = scenarios::idle(&server, o.sessions).await;
            push(&mut rows, "idle", format!("{} idle sessions", o.sessions), target, out);
        }
        server.stop();

        // 2. A second process for the load scenarios.
        let server = match Server::start(target, p, "load") {
            Ok(s) => s,
            Err(e) => {
                push(&mut rows, "send1", "send 1:1".into(), target, Outcome::Failed(e));
                continue;
            }
        };
        if target == Target::Gateway {
            let ext = scenarios::extensions(&server).await;
            let note = if ext.is_empty() { "no extensions advertised".to_string() } else { format!("extensions: {}", ext.join(", ")) };
            push(
                &mut rows,
                "startup-warm",
                "start-up to ready (warm plugin cache)".into(),
                target,
                Outcome::Startup { ms: server.ready_after.as_secs_f64() * 1000.0, note },
            );
        }
        let (pairs, per) = split(o.inflight, o.pairs);
        if !skip("send1") {
            let out = scenarios::send(&server, 1, 1, t, false).await;
            push(&mut rows, "send1", "map/send 1:1, 1 in flight".into(), target, out);
        }
        if !skip("send100") {
            let out = scenarios::send(&server, pairs, per, t, false).await;
            push(&mut rows, "send100", format!("map/send 1:1, {} in flight", pairs as u64 * per), target, out);
        }
        for (key, members) in [("fanout10", 10usize), ("fanout100", 100)] {
            if !skip(key) {
                let out = scenarios::fanout(&server, members, 10, t).await;
                push(&mut rows, key, format!("scope fan-out to {members}"), target, out);
            }
        }
        if !skip("watch") {
            let out = if target == Target::Ceiling { Outcome::NotApplicable("no events".into()) } else { scenarios::send(&server, pairs, per, t, true).await };
            push(&mut rows, "watch", format!("map/send {} in flight + 1 subscriber", pairs as u64 * per), target, out);
        }
        if !skip("mail") {
            let out = if target == Target::Ceiling { Outcome::NotApplicable("no mail".into()) } else { scenarios::mail(&server, pairs, per, t, 0).await };
            push(&mut rows, "mail", format!("mail/turn, {} in flight", pairs as u64 * per), target, out);
        }
        server.stop();
    }
    let _ = notes;
    rows
}

/// The tail of the newest log of `target` in this run's scratch folder.
fn scratch_log(p: &Paths, target: Target) -> String {
    let newest = ["load", "idle"].iter().map(|tag| p.scratch.join(format!("{}-{tag}.log", target.name()))).find(|f| f.exists());
    let text = newest.and_then(|f| std::fs::read_to_string(f).ok()).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

async fn single(o: &Opts, p: &Paths) -> Result<Vec<Row>, String> {
    let target = o.target.ok_or("--target is required for a single scenario")?;
    let t = timing(o);
    let server = match &o.url {
        Some(url) => Server::external(target, url, o.pid)?,
        None => Server::start(target, p, &o.command)?,
    };
    let (pairs, per) = split(o.inflight, o.pairs);
    let (key, label, outcome) = match o.command.as_str() {
        "send" => ("send", format!("map/send 1:1, {} in flight", pairs as u64 * per), scenarios::send(&server, pairs, per, t, false).await),
        "watch" => ("watch", format!("map/send {} in flight + 1 subscriber", pairs as u64 * per), scenarios::send(&server, pairs, per, t, true).await),
        "fanout" => ("fanout", format!("scope fan-out to {}", o.members), scenarios::fanout(&server, o.members, o.inflight, t).await),
        "mail" => {
            let idle = if o.idle > 0 { format!(", {} idle sessions", o.idle) } else { String::new() };
            ("mail", format!("mail/turn, {} in flight{idle}", pairs as u64 * per), scenarios::mail(&server, pairs, per, t, o.idle).await)
        }
        "idle" => ("idle", format!("{} idle sessions", o.sessions), scenarios::idle(&server, o.sessions).await),
        "startup" => ("startup", "start-up to ready".into(), Outcome::Startup { ms: server.ready_after.as_secs_f64() * 1000.0, note: startup_note(target, p) }),
        other => return Err(format!("unknown scenario {other}")),
    };
    let outcome = match outcome {
        Outcome::Failed(why) => Outcome::Failed(format!("{why} [server log: {}]", server.log_tail(5))),
        o => o,
    };
    server.stop();
    let row = Row { key, label, target, outcome };
    progress(&row);
    Ok(vec![row])
}

/// A command's table under its heading, then the notes; or its error, and exit 1.
fn print_table(result: Result<String, String>, p: &Paths, notes: &[String], heading: impl FnOnce(String) -> String) {
    match result {
        Ok(table) => {
            let _ = std::fs::remove_dir_all(&p.scratch);
            println!("{}", heading(table));
            for n in notes {
                println!("\n{n}");
            }
        }
        Err(e) => {
            eprintln!("map-bench: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    if std::env::args().any(|a| matches!(a.as_str(), "--help" | "-h" | "help")) {
        print!("{USAGE}");
        return;
    }
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("map-bench: {e}\n");
            }
            eprint!("{USAGE}");
            std::process::exit(2);
        }
    };
    let p = paths(&o);
    let mut notes = Vec::new();
    if cfg!(debug_assertions) {
        let msg = "WARNING: map-bench is a debug build; the load generator is much slower than with --release".to_string();
        eprintln!("# {msg}");
        notes.push(msg);
    }
    let nofile = servers::raise_nofile();
    let needs_servers = o.url.is_none();
    let targets: Vec<Target> = match o.command.as_str() {
        "all" => o.targets.clone(),
        "overhead" | "cluster" => vec![Target::Gateway],
        "scale" | "soak" => vec![o.target.unwrap_or(Target::Gateway)],
        _ => o.target.into_iter().collect(),
    };
    if needs_servers && !o.no_build && o.gateway_bin.is_none() {
        if let Err(e) = build(&p, &mut notes) {
            eprintln!("map-bench: {e}");
            std::process::exit(1);
        }
    }
    if needs_servers && targets.contains(&Target::Reference) {
        if let Err(e) = servers::ensure_reference(&p.reference_dir) {
            eprintln!("map-bench: {e}");
            std::process::exit(1);
        }
    }
    if (nofile < o.sessions as u64 + 1000 && (o.command == "all" || o.command == "idle")) || nofile < o.idle as u64 + 1000 {
        notes.push(format!("open-file limit is {nofile}: fewer idle sessions may open than asked"));
    }

    // The load generator runs on one thread: it then never takes more than one
    // of the machine's cores away from the server under test.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let started = Instant::now();
    let load_before = loadavg();
    if o.command == "scale" || o.command == "soak" {
        let result = rt.block_on(long_run(&o, &p, nofile));
        return print_table(result, &p, &notes, |table| {
            format!(
                "## map-bench {} ({} s, {} cores, load average {load_before} before / {} after)\n\n{table}",
                o.command,
                started.elapsed().as_secs(),
                cores(),
                loadavg()
            )
        });
    }
    if o.command == "overhead" || o.command == "cluster" {
        let (pairs, per) = split(o.inflight, o.pairs);
        let result = if o.command == "overhead" {
            rt.block_on(overhead::run(&p, pairs, per, timing(&o), o.rounds))
        } else {
            let settings = cluster::Settings {
                postgres: o.postgres.clone(),
                nats: o.nats.clone(),
                plugin_dir: o.plugin_dir.clone(),
                pairs,
                per,
                timing: timing(&o),
                rounds: o.rounds,
                singleton_plugins: p.plugin_dir.clone(),
                lease_ms: o.lease_ms,
                kills: o.kills,
                skip: o.skip.clone(),
            };
            rt.block_on(cluster::run(&p, &settings))
        };
        return print_table(result, &p, &notes, |table| {
            format!(
                "## map-bench {} ({} s, {} cores, load average {load_before} before / {} after, {} s warm-up + {} s per round)\n\n{table}",
                o.command,
                started.elapsed().as_secs(),
                cores(),
                loadavg(),
                o.warmup,
                o.secs
            )
        });
    }
    let rows = rt.block_on(async {
        if o.command == "all" {
            Ok(all(&o, &p, &mut notes).await)
        } else {
            single(&o, &p).await
        }
    });
    let rows = match rows {
        Ok(r) => r,
        Err(e) => {
            eprintln!("map-bench: {e}");
            std::process::exit(1);
        }
    };
    let _ = std::fs::remove_dir_all(&p.scratch);

    let report = Report { rows: &rows };
    println!(
        "## map-bench {} ({} s, {} cores, load average {} before / {} after, {} s warm-up + {} s per load scenario)\n",
        o.command,
        started.elapsed().as_secs(),
        cores(),
        load_before,
        loadavg(),
        o.warmup,
        o.secs
    );
    println!("{}", report.absolute());
    if o.command == "all" {
        println!("### Ratios\n\n{}", report.ratios());
        println!("### Goals\n\n{}", report.goals());
    }
    println!(
        "Rates count deliveries received per second (answers, for mail/turn); latency is send to delivery \
         (request to answer for mail/turn). CPU columns: share of one core used during the measured window, \
         and CPU time per counted message (less sensitive to other load on the machine than the rates). \
         The generator runs on one thread; the servers run one at a time."
    );
    for n in notes {
        println!("\n{n}");
    }
}

/// `scale` or `soak` with the options given: its tables.
async fn long_run(o: &Opts, p: &Paths, nofile: u64) -> Result<String, String> {
    let target = o.target.unwrap_or(Target::Gateway);
    if o.command == "scale" {
        let s = scale::Settings {
            target,
            sessions: o.sessions,
            members: o.members,
            rate: o.rate.unwrap_or(1000.0),
            warmup: Duration::from_secs_f64(o.warmup),
            secs: Duration::from_secs_f64(o.secs),
            nofile,
        };
        scale::run(p, &s).await
    } else {
        let out = o.out.clone().unwrap_or_else(|| p.workspace.join("target/bench/soak"));
        soak::run(p, &soak::Settings { target, secs: o.secs, rate: o.rate, out, sample_every: Duration::from_secs(10) }).await
    }
}

/// The 1-minute load average: other jobs on the machine make every number noisier.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| s.split_whitespace().next().map(str::to_string)).unwrap_or_else(|| "?".into())
}

fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
