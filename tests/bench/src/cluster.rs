//! `map-bench cluster`: what cluster mode costs. One run starts a two-node
//! cluster (nodes `a` and `b` on one NATS server with JetStream and one
//! PostgreSQL database) and, for reference, a single gateway with the
//! embedded default (no `[cluster]`, SQLite), then measures `map/send` in
//! alternating rounds:
//!
//! - embedded: sender and receiver on the single gateway;
//! - same-node: sender and receiver both on node `a`;
//! - cross-node: sender on node `a`, receiver on node `b`.
//!
//! The load is the 1:1 `map/send` scenario of `scenarios::send`. The CPU
//! columns of the cluster rows count both nodes (node `b` reads back the
//! event log of a same-node run too); the NATS server's CPU is not counted.
//!
//! Then aggregate `map/send` on clusters of 1, 2 and 3 nodes with the pairs
//! spread over the nodes, and cross-node server CPU per message against
//! same-node (`scaling`).
//!
//! Then, on a three-node cluster of its own, a singleton plugin: its calls
//! on the owner and through another node, and its failover after a kill -9
//! of the owner (`singletons`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::backends::{check_nats, check_postgres};
pub use crate::backends::{cleanup_streams, create_database, drop_database, with_database};
use crate::report;
use crate::scenarios::{self, Load, Outcome, Timing};
use crate::servers::{Paths, Server, Target};
use crate::{scaling, singletons};

pub const DEFAULT_POSTGRES: &str = "postgres://root@127.0.0.1:5432/test";
pub const DEFAULT_NATS: &str = "nats://127.0.0.1:4222";

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
    /// Where the singleton part finds `uap.wasm` and `uap.toml`.
    pub singleton_plugins: PathBuf,
    /// `cluster.singleton_lease_ms` of the singleton part's nodes.
    pub lease_ms: u64,
    /// Kills of the singleton's owner in the failover part.
    pub kills: usize,
    /// Parts left out: `send`, `scaling`, `singleton`, `failover`.
    pub skip: Vec<String>,
}

impl Settings {
    pub fn skips(&self, part: &str) -> bool {
        self.skip.iter().any(|s| s == part)
    }
}

/// A cluster name of this run's own: its JetStream streams are `<name>_…`.
pub fn cluster_name(suffix: &str) -> String {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("bench-{}-{millis}{suffix}", std::process::id())
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

/// Check NATS and PostgreSQL, then run the parts not skipped: `map/send`
/// across nodes, on 1, 2 and 3 nodes, then the singleton plugin. Returns the
/// tables (markdown).
pub async fn run(p: &Paths, s: &Settings) -> Result<String, String> {
    check_nats(&s.nats).await?;
    check_postgres(&s.postgres).await?;
    let mut parts = Vec::new();
    if !s.skips("send") {
        parts.push(send(p, s).await?);
    }
    if !s.skips("scaling") {
        parts.push(scaling::run(p, s).await?);
    }
    if !s.skips("singleton") || !s.skips("failover") {
        parts.push(singletons::run(p, s).await?);
    }
    if parts.is_empty() {
        return Err("--skip left no part of the cluster benchmark (send, scaling, singleton, failover)".into());
    }
    Ok(parts.join("\n"))
}

/// `server.plugin_dir` of the `map/send` parts: `--plugin-dir`, else an empty folder.
pub fn send_plugin_dir(p: &Paths, s: &Settings) -> Result<PathBuf, String> {
    if let Some(d) = &s.plugin_dir {
        return Ok(d.clone());
    }
    let d = p.scratch.join("no-plugins");
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    Ok(d)
}

/// The config sections of node `node` of cluster `name` on `storage`.
pub fn node_config(storage: &str, nats: &str, name: &str, node: &str) -> String {
    format!("[storage]\nurl = {storage:?}\n\n[cluster]\nnats = {nats:?}\nnode = {node:?}\nname = {name:?}\npresence_timeout_ms = 3000\n")
}

/// Start the gateways, run every `map/send` setup `rounds` times in
/// alternation, stop the gateways and delete the cluster's JetStream streams.
async fn send(p: &Paths, s: &Settings) -> Result<String, String> {
    let plugin_dir = send_plugin_dir(p, s)?;
    let name = cluster_name("");
    // Each gateway gets a scratch folder of its own: config, data_dir, log.
    let paths_for = |sub: &str| Paths { scratch: p.scratch.join(sub), plugin_dir: plugin_dir.clone(), ..p.clone() };
    let node = |n: &str| node_config(&s.postgres, &s.nats, &name, n);

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
            "| {} | {} | {}{} |",
            setup.name(),
            report::load_cells(l),
            l.note,
            l.first_error.as_ref().map(|e| format!("; first error: {}", e.chars().take(120).collect::<String>())).unwrap_or_default()
        );
    }
    let get = |w: Setup| &medians[SETUPS.iter().position(|&x| x == w).expect("setup")];
    let (emb, same, cross) = (get(Setup::Embedded), get(Setup::SameNode), get(Setup::CrossNode));
    t.push_str(&report::ratio_table(
        "message",
        &[("cross-node / same-node", cross, same), ("same-node / embedded", same, emb), ("cross-node / embedded", cross, emb)],
    ));
    t.push_str(
        "\nRates count deliveries received per second; latency is send to delivery. All three gateways run during \
         the whole benchmark (the idle ones barely use CPU); the generator, both nodes and the NATS server share \
         this machine's cores, and the NATS server's CPU is in no column.\n",
    );
    t
}
