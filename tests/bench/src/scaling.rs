//! `map-bench cluster`, scaling part: aggregate `map/send` on clusters of 1,
//! 2 and 3 nodes, each with a cluster name, JetStream streams and a
//! PostgreSQL database of its own, and what a cross-node message costs
//! against a same-node one.
//!
//! The load is the 1:1 `map/send` scenario (`scenarios::send_placed`) with
//! its pairs assigned round-robin to the nodes of a cluster of N nodes:
//!
//! - same-node: pair i's sender and receiver both on node i mod N, so the
//!   aggregate rate shows what extra nodes add;
//! - cross-node (N ≥ 2): pair i's receiver on the next node, (i + 1) mod N.
//!
//! The three clusters run for the whole part and every setup is measured
//! once per round, in alternation, so a change in the machine's load hits
//! every setup alike. The CPU columns sum every node of the setup's cluster.
//! After each run the part waits until those nodes are idle again: what they
//! do after the window (reading back the event log, working off a backlog)
//! belongs to the run and is counted in "until idle", not in the next setup.
//! The nodes, the generator, NATS and PostgreSQL share this machine's cores:
//! on one machine the aggregate rate shows what more nodes cost, not real
//! scale-out.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster::{self, Settings};
use crate::report;
use crate::scenarios::{self, Load, Outcome};
use crate::servers::{Paths, Server, Target};

/// Cluster sizes measured; the first is the baseline of the rate ratios.
const SIZES: [usize; 3] = [1, 2, 3];
const NODES: [&str; 3] = ["a", "b", "c"];
/// The goal for cross-node server CPU per message over same-node.
const CPU_TARGET: f64 = 1.3;
/// Nodes count as idle below this share of one core, summed.
const IDLE_CORES: f64 = 0.1;
/// Each idle check looks at the nodes' CPU over this long.
const IDLE_SAMPLE: Duration = Duration::from_millis(250);
/// How long nodes may go on working after a run before the next setup runs anyway.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq)]
struct Setup {
    nodes: usize,
    cross: bool,
}

impl Setup {
    fn name(self) -> String {
        let size = if self.nodes == 1 { "1 node".to_string() } else { format!("{} nodes", self.nodes) };
        format!("{size}, {}", if self.cross { "cross-node" } else { "same-node" })
    }
}

/// A round's setups: every size same-node, and cross-node where there is another node.
fn setups() -> Vec<Setup> {
    SIZES.iter().flat_map(|&nodes| [Setup { nodes, cross: false }, Setup { nodes, cross: true }]).filter(|s| !s.cross || s.nodes > 1).collect()
}

/// (sender's node, receiver's node) of each pair: round-robin over `nodes`;
/// cross: the receiver on the next node.
fn placement(pairs: usize, nodes: usize, cross: bool) -> Vec<(usize, usize)> {
    (0..pairs)
        .map(|i| {
            let n = i % nodes;
            (n, if cross { (n + 1) % nodes } else { n })
        })
        .collect()
}

/// Pairs per placement: `a: 4, b: 3` or `a→b: 2, b→a: 2`.
fn spread(placed: &[(usize, usize)]) -> String {
    let mut count: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for &p in placed {
        *count.entry(p).or_default() += 1;
    }
    let cells: Vec<String> = count
        .into_iter()
        .map(|((from, to), k)| if from == to { format!("{}: {k}", NODES[from]) } else { format!("{}→{}: {k}", NODES[from], NODES[to]) })
        .collect();
    cells.join(", ")
}

/// One cluster of the part: its name, its database (when one was made) and its running nodes.
struct Cluster {
    name: String,
    db: Option<String>,
    nodes: Vec<Server>,
}

impl Cluster {
    fn tails(&self) -> String {
        let shown: Vec<String> = self.nodes.iter().zip(NODES).map(|(s, n)| format!("node {n} log ({}): {}", s.log.display(), s.log_tail(5))).collect();
        shown.join("; ")
    }
}

/// Start the three clusters, measure every setup `rounds` times in
/// alternation, stop the nodes, delete the streams and the databases.
/// Returns the tables (markdown).
pub async fn run(p: &Paths, s: &Settings) -> Result<String, String> {
    let plugin_dir = cluster::send_plugin_dir(p, s)?;
    let mut clusters = Vec::new();
    let measured = match start(p, s, &plugin_dir, &mut clusters).await {
        Ok(()) => measure(&clusters, s).await,
        Err(e) => Err(e),
    };
    let names: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
    let storage = if clusters.iter().all(|c| c.db.is_some()) {
        format!("a database of its own next to {}", s.postgres)
    } else {
        format!("storage {} (no database of its own)", s.postgres)
    };
    for c in clusters {
        for n in c.nodes.into_iter().rev() {
            n.stop();
        }
        cluster::cleanup_streams(&s.nats, &c.name).await;
        if let Some(db) = &c.db {
            cluster::drop_database(&s.postgres, db).await;
        }
    }
    let medians = measured?;
    let head = format!(
        "map/send 1:1 on clusters of 1, 2 and 3 nodes, {} in flight ({} pair(s) x {}) spread round-robin over the nodes; median of {} alternating rounds per setup; clusters {} on {}, each with {storage}\n\n",
        s.pairs as u64 * s.per,
        s.pairs,
        s.per,
        s.rounds,
        names.join(", "),
        s.nats
    );
    Ok(head + &table(s.pairs, &setups(), &medians))
}

/// Each cluster's database (falling back to `--postgres`), then its nodes;
/// what has started is in `clusters`, for the caller to stop.
async fn start(p: &Paths, s: &Settings, plugin_dir: &Path, clusters: &mut Vec<Cluster>) -> Result<(), String> {
    for size in SIZES {
        let name = cluster::cluster_name(&format!("-scaling{size}"));
        let db = name.replace('-', "_");
        let (url, db) = match cluster::create_database(&s.postgres, &db).await {
            Ok(()) => (cluster::with_database(&s.postgres, &db), Some(db)),
            Err(e) => {
                eprintln!("# WARNING: no fresh database ({e}); cluster {name} uses {}", s.postgres);
                (s.postgres.clone(), None)
            }
        };
        eprintln!("# starting cluster {name} (nodes {})", NODES[..size].join(", "));
        clusters.push(Cluster { name: name.clone(), db, nodes: Vec::new() });
        let c = clusters.last_mut().expect("just pushed");
        for node in &NODES[..size] {
            // Each node gets a scratch folder of its own: config, data_dir, log.
            let tag = format!("scaling{size}-node-{node}");
            let paths = Paths { scratch: p.scratch.join(&tag), plugin_dir: plugin_dir.to_path_buf(), ..p.clone() };
            let config = cluster::node_config(&url, &s.nats, &name, node);
            let server = Server::start_with(Target::Gateway, &paths, &tag, "", &config).map_err(|e| format!("cluster {name} node {node}: {e}"))?;
            c.nodes.push(server);
        }
    }
    Ok(())
}

/// What a setup's nodes did after its run, until they were idle again.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct CatchUp {
    /// From the end of the run until the nodes were idle, or until the timeout.
    after: Duration,
    /// False: still busy at the timeout.
    idle: bool,
    /// The run's messages, rate × (warm-up + window), over warm-up + window + `after`.
    rate: f64,
    /// Server CPU (all nodes) from the setup's start until idle, over the run's messages.
    cpu_per_msg_us: Option<f64>,
}

/// Every setup `rounds` times in alternation; the median round (by rate) of
/// each, in the order of `setups()`.
async fn measure(clusters: &[Cluster], s: &Settings) -> Result<Vec<(Load, CatchUp)>, String> {
    let setups = setups();
    let mut results: Vec<Vec<(Load, CatchUp)>> = setups.iter().map(|_| Vec::new()).collect();
    let every: Vec<&Server> = clusters.iter().flat_map(|c| &c.nodes).collect();
    for round in 0..s.rounds {
        for (i, &setup) in setups.iter().enumerate() {
            // Normally at once: every setup waits for its own nodes after its run.
            if let Err(waited) = settle(&every).await {
                eprintln!("# WARNING: the nodes were still busy {} s after the previous setup", waited.as_secs());
            }
            let c = &clusters[SIZES.iter().position(|&n| n == setup.nodes).expect("a measured size")];
            let (l, after) = one(c, setup, s).await?;
            eprintln!(
                "#   round {} {:<22} {:.0}/s p50 {} p99 {} errors {}, nodes idle {} ms after the run",
                round + 1,
                setup.name(),
                l.rate,
                report::us(l.lat.p50_us),
                report::us(l.lat.p99_us),
                l.errors,
                after.after.as_millis()
            );
            results[i].push((l, after));
        }
    }
    Ok(results
        .into_iter()
        .map(|mut r| {
            r.sort_by(|a, b| a.0.rate.total_cmp(&b.0.rate));
            r.swap_remove(r.len() / 2)
        })
        .collect())
}

/// One run of `setup` on `c`, then the wait until its nodes are idle again.
async fn one(c: &Cluster, setup: Setup, s: &Settings) -> Result<(Load, CatchUp), String> {
    let placed: Vec<(&Server, &Server)> = placement(s.pairs, setup.nodes, setup.cross).into_iter().map(|(a, b)| (&c.nodes[a], &c.nodes[b])).collect();
    let cpu_of: Vec<&Server> = c.nodes.iter().collect();
    let before = cpu_sum(&cpu_of);
    let l = match scenarios::send_placed(&placed, &cpu_of, s.per, s.timing, None).await {
        Outcome::Load(l) => l,
        Outcome::Failed(why) => return Err(format!("{}: {why} [{}]", setup.name(), c.tails())),
        other => return Err(format!("{}: {other:?}", setup.name())),
    };
    let settled = settle(&cpu_of).await;
    let run = (s.timing.warmup + s.timing.secs).as_secs_f64();
    let msgs = l.rate * run;
    let used = before.zip(cpu_sum(&cpu_of)).map(|(a, b)| (b - a).as_secs_f64());
    let cpu_per_msg_us = used.filter(|_| msgs > 0.0).map(|u| u * 1e6 / msgs);
    let (after, idle) = match settled {
        Ok(d) => (d, true),
        Err(d) => (d, false),
    };
    Ok((l, CatchUp { after, idle, rate: msgs / (run + after.as_secs_f64()), cpu_per_msg_us }))
}

/// The CPU time of `nodes` together (None if any is unknown).
fn cpu_sum(nodes: &[&Server]) -> Option<Duration> {
    nodes.iter().map(|n| n.cpu()).sum()
}

/// Wait until `nodes` together use less than `IDLE_CORES`. Nodes go on
/// working after a run (reading back the cluster's event log, catching up
/// with a backlog): that work belongs to the run, and would otherwise land
/// in the next one's window. Ok: how long that took; Err: still busy after
/// `IDLE_TIMEOUT`. The time is until the start of the first idle sample.
async fn settle(nodes: &[&Server]) -> Result<Duration, Duration> {
    let started = Instant::now();
    loop {
        let (before, at) = (cpu_sum(nodes), Instant::now());
        tokio::time::sleep(IDLE_SAMPLE).await;
        let used = match (before, cpu_sum(nodes)) {
            (Some(a), Some(b)) => (b - a).as_secs_f64() / at.elapsed().as_secs_f64(),
            _ => return Ok(Duration::ZERO),
        };
        if used < IDLE_CORES {
            return Ok(at - started);
        }
        if started.elapsed() >= IDLE_TIMEOUT {
            return Err(started.elapsed());
        }
    }
}

/// The ratios to print, as (label, index of x, index of y) into `setups`:
/// the rate of each larger cluster against the first size (same-node), and
/// cross-node against same-node at each size.
fn ratio_rows(setups: &[Setup]) -> Vec<(String, usize, usize)> {
    let at = |nodes: usize, cross: bool| setups.iter().position(|&s| s == Setup { nodes, cross });
    let mut rows = Vec::new();
    let base = SIZES[0];
    for &n in &SIZES[1..] {
        if let (Some(x), Some(y)) = (at(n, false), at(base, false)) {
            rows.push((format!("{n} nodes / {base} node, same-node"), x, y));
        }
    }
    for &n in &SIZES {
        if let (Some(x), Some(y)) = (at(n, true), at(n, false)) {
            rows.push((format!("{n} nodes: cross-node / same-node"), x, y));
        }
    }
    rows
}

/// `0.3 s · 12.5k/s · 9.1 µs/msg`: how long the nodes worked on after the
/// run, and rate and server CPU per message until then (`≥`/`≤`: still busy).
fn catch_up_cell(c: &CatchUp) -> String {
    let (at_least, at_most) = if c.idle { ("", "") } else { ("≥ ", "≤ ") };
    let cpu = c.cpu_per_msg_us.map_or("?".into(), |v| format!("{at_least}{v:.1} µs/msg"));
    format!("{at_least}{:.1} s · {at_most}{}/s · {cpu}", c.after.as_secs_f64(), report::rate(c.rate))
}

/// The ratios of `ratio_rows` until idle (rate and server CPU per message),
/// and for cross-node against same-node whether it meets `CPU_TARGET`.
fn until_idle_table(setups: &[Setup], medians: &[(Load, CatchUp)]) -> String {
    let mut t = format!("\n| ratio, until idle | rate (higher is better) | server CPU per message (lower is better) | cross-node target ≤ {CPU_TARGET}× |\n");
    t.push_str("|---|---:|---:|---|\n");
    for (label, x, y) in ratio_rows(setups) {
        let (a, b) = (&medians[x].1, &medians[y].1);
        let cpu = a.cpu_per_msg_us.zip(b.cpu_per_msg_us).map(|(a, b)| a / b);
        let target = if setups[x].cross { verdict(cpu, b.idle, a.idle) } else { "" };
        let _ = writeln!(t, "| {label} | {} | {} | {target} |", report::ratio(Some(a.rate), Some(b.rate)), report::ratio(a.cpu_per_msg_us, b.cpu_per_msg_us));
    }
    t
}

/// Cross / same server CPU per message against `CPU_TARGET`. A setup still
/// busy at the timeout gives a lower bound: for cross-node, a ratio over the
/// target is still missed.
fn verdict(ratio: Option<f64>, same_idle: bool, cross_idle: bool) -> &'static str {
    match ratio.filter(|r| r.is_finite()) {
        None => "n/a",
        Some(r) if r > CPU_TARGET && same_idle => "missed",
        Some(_) if !(same_idle && cross_idle) => "uncertain (still busy at the timeout)",
        Some(r) if r <= CPU_TARGET => "met",
        Some(_) => "missed",
    }
}

/// The rows of every setup, the ratios and the CPU verdicts (markdown).
fn table(pairs: usize, setups: &[Setup], medians: &[(Load, CatchUp)]) -> String {
    let mut t = String::from("| setup | pairs per node | rate (all pairs) | p50 | p99 | max | errors | server CPU (all nodes) | generator CPU | busy after the run · rate and server CPU until idle | notes |\n");
    t.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (setup, (l, after)) in setups.iter().zip(medians) {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {}{} |",
            setup.name(),
            spread(&placement(pairs, setup.nodes, setup.cross)),
            report::load_cells(l),
            catch_up_cell(after),
            l.note,
            l.first_error.as_ref().map(|e| format!("; first error: {}", e.chars().take(120).collect::<String>())).unwrap_or_default()
        );
    }
    let rows = ratio_rows(setups);
    let rows: Vec<(&str, &Load, &Load)> = rows.iter().map(|(label, x, y)| (label.as_str(), &medians[*x].0, &medians[*y].0)).collect();
    t.push_str(&report::ratio_table("message (in the window)", &rows));
    t.push_str(&until_idle_table(setups, medians));
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let _ = write!(
        t,
        "\nRates count deliveries received per second over all pairs; latency is send to delivery; server CPU sums \
         every node of the setup's cluster (the NATS server and PostgreSQL are in no column). Nodes may go on \
         working after a run (reading back the event log, catching up with a backlog): the next setup waits until \
         the nodes use less than {IDLE_CORES} of a core together (at most {} s). \"Until idle\" counts the run's \
         messages as rate × (warm-up + window), over warm-up + window + the time busy after the run for the rate, \
         and divides all server CPU from the setup's start until then by them. All three clusters run during the whole \
         part (the idle ones barely use CPU). Every node, the generator (one thread), NATS and PostgreSQL share this \
         machine's {cores} cores, so the aggregate rate of more nodes on one machine shows their overhead, not real \
         scale-out: on machines of their own, each node would bring cores of its own.\n",
        IDLE_TIMEOUT.as_secs()
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_placed_round_robin() {
        assert_eq!(placement(4, 1, false), [(0, 0); 4]);
        assert_eq!(placement(5, 2, false), [(0, 0), (1, 1), (0, 0), (1, 1), (0, 0)]);
        assert_eq!(placement(4, 3, true), [(0, 1), (1, 2), (2, 0), (0, 1)]);
        assert_eq!(placement(2, 2, true), [(0, 1), (1, 0)]);
        assert_eq!(spread(&placement(10, 3, false)), "a: 4, b: 3, c: 3");
        assert_eq!(spread(&placement(4, 2, true)), "a→b: 2, b→a: 2");
        // Fewer pairs than nodes: the extra nodes carry none.
        assert_eq!(spread(&placement(1, 3, false)), "a: 1");
    }

    #[test]
    fn setups_and_ratios() {
        let s = setups();
        let names: Vec<String> = s.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["1 node, same-node", "2 nodes, same-node", "2 nodes, cross-node", "3 nodes, same-node", "3 nodes, cross-node"]);
        let labels: Vec<(String, usize, usize)> = ratio_rows(&s);
        assert_eq!(
            labels,
            [
                ("2 nodes / 1 node, same-node".to_string(), 1, 0),
                ("3 nodes / 1 node, same-node".to_string(), 3, 0),
                ("2 nodes: cross-node / same-node".to_string(), 2, 1),
                ("3 nodes: cross-node / same-node".to_string(), 4, 3),
            ]
        );
    }

    #[test]
    fn cpu_target_verdicts() {
        assert_eq!(verdict(Some(1.2), true, true), "met");
        assert_eq!(verdict(Some(1.4), true, true), "missed");
        // Cross-node still busy: its CPU is a lower bound, so over the target is missed, under it uncertain.
        assert_eq!(verdict(Some(1.4), true, false), "missed");
        assert_eq!(verdict(Some(1.2), true, false), "uncertain (still busy at the timeout)");
        assert_eq!(verdict(Some(1.4), false, true), "uncertain (still busy at the timeout)");
        assert_eq!(verdict(None, true, true), "n/a");
        assert_eq!(verdict(Some(f64::INFINITY), true, true), "n/a");

        // In the window, CPU per message = server_cores * 1e6 / rate.
        let run = |rate: f64, cores: f64, after_ms: u64, idle_rate: f64, until_idle: f64, idle: bool| {
            let after = CatchUp { after: Duration::from_millis(after_ms), idle, rate: idle_rate, cpu_per_msg_us: Some(until_idle) };
            (Load { rate, server_cores: Some(cores), ..Load::default() }, after)
        };
        let medians = [
            run(1000.0, 0.01, 0, 1000.0, 11.0, true),
            run(2000.0, 0.02, 4000, 1000.0, 11.0, true),
            run(2000.0, 0.024, 0, 1500.0, 13.2, true),
            run(3000.0, 0.03, 0, 3000.0, 10.0, true),
            run(1000.0, 0.014, 60_000, 60.0, 30.0, false),
        ];
        let t = until_idle_table(&setups(), &medians);
        assert!(t.contains("| 2 nodes / 1 node, same-node | 1.00× | 1.00× |  |"), "{t}");
        assert!(t.contains("| 2 nodes: cross-node / same-node | 1.50× | 1.20× | met |"), "{t}");
        assert!(t.contains("| 3 nodes: cross-node / same-node | 0.02× | 3.00× | missed |"), "{t}");
        let full = table(10, &setups(), &medians);
        assert!(full.contains("| 3 nodes, cross-node | a→b: 4, b→c: 3, c→a: 3 | 1000/s |"), "{full}");
        assert!(full.contains("| ≥ 60.0 s · ≤ 60/s · ≥ 30.0 µs/msg |"), "{full}");
        assert!(full.contains("| 4.0 s · 1000/s · 11.0 µs/msg |"), "{full}");
        assert!(full.contains("| 2 nodes / 1 node, same-node | 2.00× |"), "{full}");
        assert!(full.contains("| 3 nodes: cross-node / same-node | 0.33× |"), "{full}");
    }
}
