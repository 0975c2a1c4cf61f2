//! Cluster-wide singleton plugins, black-box: three nodes (a, b, c) on one
//! fresh PostgreSQL database and NATS, each with the singleton plugins
//! enabled; one node owns each (tenant, plugin) through a lease in
//! PostgreSQL (`/admin/plugins` says which), the others forward its calls.
//! The owner is killed with kill -9 while it has work in flight: UAP jobs
//! run by execution agents (Python grpcio) connected through the other
//! nodes, a MAMP delivery waiting for a retry, a durable timer. Each must
//! end exactly once, on the node that takes over within the lease's bound.
//! The MAMP bridge ships pooled (its retry timers are stored and swept up by
//! another node when theirs dies); it is tested that way and as a singleton.
//!
//! Needs PostgreSQL and NATS with JetStream (see `common::cluster`), the
//! standard plugins and fixtures (`scripts/build-plugins.sh --fixtures`) and
//! grpcio (`scripts/setup.sh --tests`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::*;
use common::{fixture, python, wait, TempDir};
use serde_json::{json, Value};

/// A short lease keeps the takeovers (and the suite) quick.
const LEASE_MS: u64 = 1500;
const NODES: [&str; 3] = ["a", "b", "c"];
const TENANT: &str = "default";
const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

/// A new owner serves within 1.25 × the lease, plus slack for a busy runner.
fn takeover_bound() -> Duration {
    Duration::from_millis(LEASE_MS * 5 / 4) + Duration::from_secs(4)
}

/// How long to wait for what should follow a takeover (the bound is asserted separately).
fn after_takeover() -> Duration {
    takeover_bound() + Duration::from_secs(10)
}

fn options(extra: &str) -> ClusterOptions {
    ClusterOptions { extra: format!("singleton_lease_ms = {LEASE_MS}\n{extra}"), ..ClusterOptions::default() }
}

/// The two nodes other than `owner`, in name order.
fn others(owner: &str) -> (&'static str, &'static str) {
    let rest: Vec<&'static str> = NODES.iter().copied().filter(|n| *n != owner).collect();
    assert_eq!(rest.len(), 2, "{owner} is not one of {NODES:?}");
    (rest[0], rest[1])
}

/// The default tenant with the MAMP bridge's settings: agents at
/// `agent://gw.example/…`, `agent://peer.example/…` delivered to
/// 127.0.0.1:`peer_port`, quick retries.
fn mamp_tenant(peer_port: u16) -> String {
    format!(
        r#"[[tenants]]
id = "{TENANT}"
bearer_tokens = ["default-token"]
outbound_hosts = {{ mamp = ["127.0.0.1"] }}
[tenants.plugin_config.mamp]
domain = "gw.example"
maxAttempts = 12
retryBaseMs = 300
peers = {{ "peer.example" = {{ url = "http://127.0.0.1:{peer_port}", key = "peer-key" }} }}
"#
    )
}

/// The standard plugins with the MAMP bridge as a singleton (it ships
/// pooled): a `[plugins]` table replaces `plugin_dir`, so mail (which the
/// bridge records in) and the UAP hub are listed too.
fn singleton_bridge() -> String {
    let dist = standard_plugins();
    format!(
        r#"[plugins.mail]
path = {mail:?}
[plugins.uap]
path = {uap:?}
mode = "singleton"
deadline_ms = 5000
[plugins.mamp]
path = {mamp:?}
mode = "singleton"
http_prefix = "/mamp"
deadline_ms = 5000
outbound_timeout_ms = 4000
"#,
        mail = dist.join("mail.wasm"),
        uap = dist.join("uap.wasm"),
        mamp = dist.join("mamp.wasm"),
    )
}

// ---------------------------------------------------------------------------
// A Python script run beside the test

/// A script under the repository: its stdout lines with the time each was
/// read, and commands written to its stdin. Killed on drop.
struct Script {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    rx: tokio::sync::mpsc::UnboundedReceiver<(Instant, String)>,
    lines: Vec<(Instant, String)>,
    stderr: PathBuf,
    _dir: TempDir,
}

impl Script {
    fn spawn(path: &str, args: &[String]) -> Script {
        let dir = TempDir::new("script");
        let stderr = dir.path().join("stderr.txt");
        let file = std::fs::File::create(&stderr).expect("a file for the script's stderr");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
        let mut child = Command::new(python())
            .arg(&script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        Script { name: path.to_string(), stdin: child.stdin.take(), child, rx, lines: Vec::new(), stderr, _dir: dir }
    }

    fn pump(&mut self) {
        while let Ok(l) = self.rx.try_recv() {
            self.lines.push(l);
        }
    }

    /// Everything it printed so far, and its stderr.
    fn transcript(&mut self) -> String {
        self.pump();
        let out: Vec<&str> = self.lines.iter().map(|(_, l)| l.as_str()).collect();
        format!("--- stdout of {} ---\n{}\n--- stderr ---\n{}", self.name, out.join("\n"), std::fs::read_to_string(&self.stderr).unwrap_or_default())
    }

    /// Wait (at most `within`) until `done` holds for the lines printed so far.
    async fn until(&mut self, what: &str, within: Duration, done: impl Fn(&[(Instant, String)]) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        self.pump();
        while !done(&self.lines) {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(line)) => self.lines.push(line),
                // Its stdout closed: it has ended.
                Ok(None) => panic!("{} ended ({:?}) before {what} (its output follows)", self.name, self.child.wait()),
                Err(_) => panic!("{}: not {what} within {within:?} (its output follows)", self.name),
            }
        }
    }

    /// The first line (of all printed so far) matching `pred`, waiting up to `within`.
    async fn line(&mut self, what: &str, within: Duration, pred: impl Fn(&str) -> bool) -> (Instant, String) {
        self.until(what, within, |lines| lines.iter().any(|(_, l)| pred(l))).await;
        self.lines.iter().find(|(_, l)| pred(l)).cloned().expect("found above")
    }

    /// Every line printed so far that matches `pred`.
    fn matching(&mut self, pred: impl Fn(&str) -> bool) -> Vec<(Instant, String)> {
        self.pump();
        self.lines.iter().filter(|(_, l)| pred(l)).cloned().collect()
    }

    fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().expect("the script's stdin is open");
        writeln!(stdin, "{command}").and_then(|_| stdin.flush()).unwrap_or_else(|e| panic!("{}: writing {command:?}: {e}", self.name));
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.transcript());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Calls around a takeover

/// From `since`, call `method` on `node` until it answers with a result (on a
/// fresh connection after a call left unanswered for a second): the time
/// since `since`, and the result. Fails once `within` has passed.
async fn first_result(node: &Node, method: &str, params: Value, since: Instant, within: Duration) -> (Duration, Value) {
    let mut client: Option<Client> = None;
    let probe = async || {
        let c = match &mut client {
            Some(c) => c,
            None => client.insert(node.connect("client").await),
        };
        match c.ws.try_call_within(method, params.clone(), Duration::from_secs(1)).await {
            Ok(r) if r.get("result").is_some() && r.get("error").is_none() => Ok((since.elapsed(), r["result"].clone())),
            Ok(r) => Err(r.to_string()),
            Err(e) => {
                client = None;
                Err(e)
            }
        }
    };
    match wait::until(within.saturating_sub(since.elapsed()), probe).await {
        Ok(found) => found,
        Err(last) => panic!("node {}: {method} got no result within {within:?}; last: {last}\n{}", node.name, node.log_tail()),
    }
}

// ---------------------------------------------------------------------------
// UAP

async fn submit(c: &mut Client, job_type: &str, index: u64) -> String {
    let r = c.ok("uap/submit", json!({"kind": "test", "type": job_type, "payloads": [{"type": "case", "metadata": {"index": index}}]})).await;
    match r["job"]["id"].as_str() {
        Some(id) => id.to_string(),
        None => c.fail(&format!("uap/submit answered {r}")),
    }
}

/// Every job of the tenant by id (all pages of `uap/list`).
async fn all_jobs(c: &mut Client) -> BTreeMap<String, Value> {
    let mut jobs = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = json!({"limit": 500});
        if let Some(cur) = &cursor {
            params["cursor"] = json!(cur);
        }
        let page = c.ok("uap/list", params).await;
        for j in page["jobs"].as_array().cloned().unwrap_or_default() {
            jobs.insert(j["id"].as_str().unwrap_or_default().to_string(), j);
        }
        match (page["hasMore"].as_bool(), page["nextCursor"].as_str()) {
            (Some(true), Some(next)) => cursor = Some(next.to_string()),
            _ => return jobs,
        }
    }
}

async fn until_jobs(c: &mut Client, what: &str, within: Duration, done: impl Fn(&BTreeMap<String, Value>) -> bool) -> BTreeMap<String, Value> {
    let probe = async || {
        let jobs = all_jobs(c).await;
        if done(&jobs) {
            Ok(jobs)
        } else {
            Err(jobs)
        }
    };
    match wait::until(within, probe).await {
        Ok(jobs) => jobs,
        Err(jobs) => {
            let seen: Vec<String> = jobs.values().map(|j| format!("{} {} {}", j["id"], j["type"], j["status"])).collect();
            c.fail(&format!("{what}: not so within {within:?}; jobs: {}", seen.join(", ")))
        }
    }
}

fn status_of<'a>(jobs: &'a BTreeMap<String, Value>, id: &str) -> &'a str {
    jobs.get(id).and_then(|j| j["status"].as_str()).unwrap_or("missing")
}

fn agent_available(r: &Value, client_id: &str) -> bool {
    r["result"]["agents"].as_array().is_some_and(|a| a.iter().any(|x| x["clientId"] == client_id && x["available"] == true))
}

/// The client id an agent of the failover script announced.
async fn listening(agents: &mut Script, name: &str) -> String {
    let prefix = format!("listening {name} ");
    let (_, line) = agents.line(&format!("{name} listening"), Duration::from_secs(60), |l| l.starts_with(&prefix)).await;
    line[prefix.len()..].trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uap_jobs_end_once_each_when_the_hubs_owner_is_killed() {
    let mut cluster = Cluster::start(&NODES, options("")).await;
    // The first call makes one node take the hub.
    let mut first = cluster.node("a").connect("client").await;
    first.wait_for("the UAP hub answering on node a", "uap/list", json!({}), |r| r.get("result").is_some()).await;
    drop(first);
    let (owner, token) = lease_holder(&cluster, &NODES, TENANT, "uap", REPLICATION).await;
    let (n1, n2) = others(&owner);

    // holder runs fo-hold jobs through n1 and never finishes them; runner
    // completes fo-quick jobs through n2. Jobs are submitted on n1.
    let mut agents = Script::spawn("tests/grpc/uap_failover.py", &[cluster.node(n1).gw.addr(), cluster.node(n2).gw.addr()]);
    let holder = listening(&mut agents, "holder").await;
    let runner = listening(&mut agents, "runner").await;
    let mut m = cluster.node(n1).connect("client").await;
    m.wait_for("both agents listening (through the nodes that do not own the hub)", "uap/agents", json!({}), |r| {
        agent_available(r, &holder) && agent_available(r, &runner)
    })
    .await;

    let mut ids = vec![submit(&mut m, "fo-quick", 0).await];
    m.wait_for("job 0 completed before the kill", "uap/get", json!({"jobId": ids[0]}), |r| r["result"]["job"]["status"] == "completed").await;
    ids.push(submit(&mut m, "fo-hold", 1).await);
    agents.line("the holder executing job 1", REPLICATION, |l| l.starts_with("executing holder 1 ")).await;
    m.wait_for("job 1 running", "uap/get", json!({"jobId": ids[1]}), |r| r["result"]["job"]["status"] == "running").await;
    // The runner leaves its next proposal unanswered: one job proposed, the others queued.
    agents.send("stall");
    agents.line("the runner stalling", REPLICATION, |l| l == "stalling runner").await;
    for i in 2..5 {
        ids.push(submit(&mut m, "fo-quick", i).await);
    }
    agents.line("a proposal left unanswered", REPLICATION, |l| l.starts_with("stalled runner ")).await;
    let waiting = until_jobs(&mut m, "one of jobs 2-4 proposed, two queued", REPLICATION, |jobs| {
        let mut s: Vec<&str> = ids[2..].iter().map(|id| status_of(jobs, id)).collect();
        s.sort_unstable();
        s == ["proposed", "queued", "queued"]
    })
    .await;
    let proposed = ids.iter().position(|id| status_of(&waiting, id) == "proposed").expect("a proposed job");

    let killed = Instant::now();
    cluster.kill9(&owner);
    let (took, _) = first_result(cluster.node(n1), "uap/list", json!({}), killed, after_takeover()).await;
    eprintln!(
        "uap: first uap/list answered through node {n1} {:.2} s after the kill -9 of the hub's owner {owner} (lease {LEASE_MS} ms, bound {:.2} s)",
        took.as_secs_f64(),
        takeover_bound().as_secs_f64()
    );
    assert!(took <= takeover_bound(), "the hub served again only {took:?} after its owner's kill -9 (bound {:?})", takeover_bound());

    // The streams relayed to the dead owner end with UNAVAILABLE.
    for (what, prefix) in [
        ("the holder's Listen ending", "ended listen holder "),
        ("the Execute of job 1 ending", "ended execute holder 1 "),
        ("the runner's Listen ending", "ended listen runner "),
    ] {
        let (at, line) = agents.line(what, after_takeover(), |l| l.starts_with(prefix)).await;
        assert!(at > killed, "{what} before the kill: {line}");
        assert!(line.ends_with(" UNAVAILABLE"), "{what}: {line} (a relayed stream of a dead owner ends with UNAVAILABLE)");
        assert!(at - killed <= takeover_bound(), "{what} only {:?} after the kill: {line}", at - killed);
    }
    let (new_owner, new_token) = lease_holder(&cluster, &[n1, n2], TENANT, "uap", REPLICATION).await;
    assert!(new_token > token, "the takeover by {new_owner} kept token {new_token} (was {token} on {owner})");

    // Every job ends, from every surviving node's view: the running one failed, the others completed after the runner listened again.
    let mut watcher = cluster.node(n2).connect("client").await;
    let jobs =
        until_jobs(&mut watcher, "all five jobs ended", Duration::from_secs(30), |jobs| ids.iter().all(|id| TERMINAL.contains(&status_of(jobs, id)))).await;
    for (i, id) in ids.iter().enumerate() {
        let job = &jobs[id];
        if i == 1 {
            assert_eq!(job["status"], "failed", "job 1 ran on the dead owner: {job}");
            let reason = job["error"].as_str().unwrap_or_default();
            assert!(reason.contains("restarted"), "job 1 failed without saying why: {job}");
        } else {
            assert_eq!(job["status"], "completed", "job {i}: {job}");
        }
        for (node, c) in [(n1, &mut m), (n2, &mut watcher)] {
            let got = c.ok("uap/get", json!({"jobId": id})).await;
            assert_eq!(got["job"]["status"], job["status"], "job {i} on node {node}: {got}");
            let history: Vec<&str> = got["history"].as_array().map(|h| h.iter().filter_map(|e| e["status"].as_str()).collect()).unwrap_or_default();
            let ends = history.iter().filter(|s| TERMINAL.contains(s)).count();
            assert_eq!(ends, 1, "job {i} must end exactly once; history on node {node}: {history:?}");
            assert_eq!(history.last(), job["status"].as_str().as_ref(), "job {i}: its end is the last entry on node {node}: {history:?}");
            if i == proposed {
                let at = history.iter().position(|s| *s == "proposed").unwrap_or_else(|| panic!("job {i} was proposed: {history:?}"));
                assert!(history[at..].contains(&"queued"), "job {i}, proposed when the owner died, went back to the queue: {history:?}");
            }
        }
    }
    // One end event per job in the shared log.
    let ends = watcher.replay_all(Some(json!({"eventTypes": ["uap.job.completed", "uap.job.failed", "uap.job.cancelled"]}))).await;
    for (i, id) in ids.iter().enumerate() {
        let mine: Vec<&str> = ends.iter().filter(|e| event_of(e)["data"]["jobId"] == id.as_str()).map(event_type).collect();
        assert_eq!(mine.len(), 1, "job {i} ({id}): end events in the log: {mine:?}");
    }

    // Each job was executed by one agent, once; the failed one was not run again.
    agents.send("quit");
    agents.line("the agents quitting", REPLICATION, |l| l == "quit").await;
    let mut executed: BTreeMap<u64, Vec<(String, String, Instant)>> = BTreeMap::new();
    for (at, line) in agents.matching(|l| l.starts_with("executing ")) {
        let parts: Vec<&str> = line.split(' ').collect();
        let index: u64 = parts[2].parse().unwrap_or_else(|_| panic!("bad line {line:?}"));
        executed.entry(index).or_default().push((parts[1].to_string(), parts[3].to_string(), at));
    }
    assert_eq!(executed.keys().copied().collect::<BTreeSet<u64>>(), (0..5).collect::<BTreeSet<u64>>(), "every job executed: {executed:?}");
    let (runner_ended, _) = agents.line("the runner's Listen ending", REPLICATION, |l| l.starts_with("ended listen runner ")).await;
    for (index, runs) in &executed {
        assert_eq!(runs.len(), 1, "job {index} executed more than once: {runs:?}");
        let (agent, session, at) = &runs[0];
        let expected = if *index == 1 { "holder" } else { "runner" };
        assert_eq!(agent, expected, "job {index}");
        let job = &jobs[&ids[*index as usize]];
        assert_eq!(job["sessionId"], session.as_str(), "job {index}: the session that ran it: {job}");
        if *index >= 2 {
            assert!(*at > runner_ended, "job {index} ran before the runner listened again");
        }
    }
    for i in [0, 2, 3, 4] {
        let done = agents.matching(|l| l == format!("completed runner {i}"));
        assert_eq!(done.len(), 1, "job {i}: the runner's result went through once");
    }
}

// ---------------------------------------------------------------------------
// MAMP

/// A line of the switch peer about `message_id` with this status.
fn peer_saw(line: &str, message_id: &str, status: u64) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["message_id"] == message_id && v["status"] == status)
}

fn peer_about(line: &str, message_id: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["message_id"] == message_id)
}

async fn peer_port(peer: &mut Script) -> u16 {
    let (_, line) = peer.line("the peer's port", Duration::from_secs(10), |l| l.starts_with("listening ")).await;
    line["listening ".len()..].trim().parse().unwrap_or_else(|_| panic!("bad line {line:?}"))
}

/// Where the pending delivery of a MAMP test waits: on the bridge's owner
/// (the bridge configured as a singleton) or on the node that ran `mamp/send`
/// (the bridge as shipped, pooled).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Bridge {
    Singleton,
    Pooled,
}

/// The peer refuses (503) until the node holding the delivery's retry timer
/// is killed with kill -9, then accepts: the message must arrive exactly
/// once, after the kill, without anybody calling the bridge.
async fn a_delivery_waiting_for_a_retry_survives_the_kill_of_its_node(bridge: Bridge) {
    let mut peer = Script::spawn("tests/mamp/switch_peer.py", &[]);
    let port = peer_port(&mut peer).await;
    let plugins = if bridge == Bridge::Singleton { singleton_bridge() } else { String::new() };
    let mut cluster = Cluster::start(&NODES, options(&format!("{}{plugins}", mamp_tenant(port)))).await;
    let mut first = cluster.node("a").connect("client").await;
    first.wait_for("the MAMP bridge answering on node a", "mamp/conversation", json!({"conversationId": "none"}), |r| r["error"]["code"] == 92000).await;
    drop(first);
    let entry = cluster.node("a").plugin_entry(TENANT, "mamp").await.expect("mamp listed in /admin/plugins");
    let (doomed, token, sender) = match bridge {
        Bridge::Singleton => {
            let (owner, token) = lease_holder(&cluster, &NODES, TENANT, "mamp", REPLICATION).await;
            let (n1, _) = others(&owner);
            (owner, Some(token), n1.to_string())
        }
        Bridge::Pooled => {
            assert_eq!(entry["mode"], "pooled", "the bridge as shipped: {entry}");
            ("b".to_string(), None, "b".to_string())
        }
    };
    let (n1, n2) = others(&doomed);

    // The peer is down: the first attempt fails, a retry timer tries again.
    let mut alice = cluster.node(&sender).agent("alice", json!({})).await;
    // Known everywhere first: this test is about the kill, not about a call
    // racing the registration (every_node_answers_… covers that).
    for n in NODES {
        cluster.node(n).connect("client").await.wait_for_agent("alice").await;
    }
    let sent = alice.ok("mamp/send", json!({"to": "agent://peer.example/bob", "content": "across the kill"})).await;
    assert_eq!(sent["status"], "queued", "{sent}");
    let id = sent["messageId"].as_str().unwrap_or_else(|| panic!("mamp/send without messageId: {sent}")).to_string();
    peer.until("a retry refused before the kill", REPLICATION, |lines| lines.iter().filter(|(_, l)| peer_saw(l, &id, 503)).count() >= 2).await;

    drop(alice);
    let killed = Instant::now();
    cluster.kill9(&doomed);
    peer.send("up");
    peer.line("the peer up", REPLICATION, |l| l == r#"{"switched": "up"}"#).await;
    // Nobody calls the bridge: a stored retry timer delivers it by itself.
    let (at, _) = peer.line("the delivery after the kill", after_takeover(), |l| peer_saw(l, &id, 200)).await;
    let took = at - killed;
    eprintln!("mamp ({bridge:?}): delivered {:.2} s after the kill -9 of node {doomed} (lease {LEASE_MS} ms)", took.as_secs_f64());
    // The next retry is due within 300 ms × 2^attempts; a dead node's timer
    // goes to the new owner (its takeover) or, pooled, to another node's sweep
    // (every 5 s, of timers 2 s overdue).
    let bound = match bridge {
        Bridge::Singleton => takeover_bound() + Duration::from_secs(2),
        Bridge::Pooled => Duration::from_secs(2 + 2 + 5 + 3),
    };
    assert!(took <= bound, "delivered only {took:?} after the kill (bound {bound:?})");
    if let Some(token) = token {
        let (new_owner, new_token) = lease_holder(&cluster, &[n1, n2], TENANT, "mamp", REPLICATION).await;
        assert!(new_token > token, "the takeover by {new_owner} kept token {new_token} (was {token} on {doomed})");
    }
    // The delivery was recorded: the mail conversation now maps to the peer's.
    let mut other = cluster.node(n2).connect("client").await;
    let conv = sent["conversationId"].clone();
    let peer_conv = format!("switch-conv-{id}");
    other
        .wait_for("the conversation named by the peer", "mamp/conversation", json!({"conversationId": conv}), |r| {
            r["result"]["conversation"]["conversationId"] == peer_conv.as_str()
        })
        .await;

    // No second POST over several retry periods (the pending delivery is gone):
    // an absence over time, so the time is what is checked.
    let again = async || peer.matching(|l| peer_about(l, &id)).into_iter().skip_while(|(_, l)| !peer_saw(l, &id, 200)).nth(1).map(|(_, l)| l);
    wait::never(Duration::from_secs(3), &format!("a POST about {id} after its delivery"), again).await;
    let about = peer.matching(|l| peer_about(l, &id));
    let accepted: Vec<&(Instant, String)> = about.iter().filter(|(_, l)| peer_saw(l, &id, 200)).collect();
    assert_eq!(accepted.len(), 1, "delivered exactly once: {about:?}");
    assert!(about.last().is_some_and(|(_, l)| peer_saw(l, &id, 200)), "nothing after the delivery: {about:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mamp_delivery_waiting_for_a_retry_survives_the_kill_of_the_bridges_owner() {
    a_delivery_waiting_for_a_retry_survives_the_kill_of_its_node(Bridge::Singleton).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mamp_delivery_waiting_for_a_retry_survives_the_kill_of_the_node_that_sent_it() {
    a_delivery_waiting_for_a_retry_survives_the_kill_of_its_node(Bridge::Pooled).await;
}

// ---------------------------------------------------------------------------
// Durable timers

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_durable_timer_fires_once_on_the_node_that_takes_over() {
    let extra = format!("[plugins.state]\npath = {:?}\nmode = \"singleton\"\ndeadline_ms = 1000\n", fixture("stateful.wasm"));
    let mut cluster = Cluster::start(&NODES, options(&extra)).await;
    let mut first = cluster.node("a").connect("client").await;
    first.wait_for("the state plugin answering on node a", "state/count", json!({}), |r| r.get("result").is_some()).await;
    drop(first);
    let (owner, token) = lease_holder(&cluster, &NODES, TENANT, "state", REPLICATION).await;
    let (n1, n2) = others(&owner);
    let mut watcher = cluster.node(n1).connect("client").await;
    let sub = watcher.subscribe(json!({"eventTypes": ["state.timer"]})).await;

    let delay = Duration::from_secs(3);
    let tag = "across-the-failover";
    let mut arming = cluster.node(&owner).connect("client").await;
    let armed = Instant::now();
    let timer = arming.ok("state/timer", json!({"delayMs": delay.as_millis() as u64, "tag": tag})).await;
    drop(arming);
    cluster.kill9(&owner);
    assert!(armed.elapsed() < delay, "the owner was killed only after the timer was due: nothing was checked");

    let is_mine = |n: &Value| is_event_of(n, &sub) && event_of(n)["data"]["tag"] == tag;
    let fired = watcher.expect_note("the timer's state.timer event, seen on a surviving node", delay + after_takeover(), is_mine).await;
    let when = armed.elapsed();
    eprintln!("timer: due {:.2} s after arming, fired {:.2} s after (owner {owner} killed)", delay.as_secs_f64(), when.as_secs_f64());
    assert!(when >= delay, "fired {when:?} after arming, before it was due ({delay:?})");
    assert!(
        when <= delay.max(takeover_bound()) + Duration::from_secs(2),
        "fired only {when:?} after arming (due at {delay:?}, takeover bound {:?})",
        takeover_bound()
    );
    assert_eq!(event_of(&fired)["data"]["timer"], timer["timer"], "{fired}");
    let (new_owner, new_token) = lease_holder(&cluster, &[n1, n2], TENANT, "state", REPLICATION).await;
    assert!(new_token > token, "the takeover by {new_owner} kept token {new_token} (was {token} on {owner})");

    let mut other = cluster.node(n2).connect("client").await;
    assert_eq!(other.ok("state/fired", json!({})).await, json!({"fired": [tag]}), "asked on node {n2}");
    // Not again: no second event, the store still holds one firing.
    if let Some(again) = watcher.note(Duration::from_secs(2), is_mine).await {
        panic!("the timer fired a second time: {again}");
    }
    assert_eq!(other.ok("state/fired", json!({})).await, json!({"fired": [tag]}), "asked on node {n2} later");
    // init ran on the first owner and once more on the new one, nowhere else.
    let count = other.ok("state/count", json!({})).await;
    assert_eq!(count["boots"], 2, "boots after one takeover: {count}");
}

// ---------------------------------------------------------------------------
// Calls from a node that does not own the plugin

fn mamp_message(id: &str, from: &str, to: &str, content: &str) -> Vec<u8> {
    json!({"protocol": "mamp/1.0", "message_id": id, "from": from, "to": to, "content": content, "metadata": {"timestamp": "2026-11-23T10:00:00Z"}})
        .to_string()
        .into_bytes()
}

/// `(status, body as JSON)` of one request to a node.
async fn mamp_http(node: &Node, method: &str, path: &str, token: &str, body: &[u8]) -> (u16, Value) {
    let auth = format!("Bearer {token}");
    let headers = [("content-type", "application/json"), ("authorization", auth.as_str())];
    let r = common::http(&node.gw.addr(), method, path, &headers, body).await;
    let body = serde_json::from_slice(&r.body).unwrap_or_else(|_| json!({"text": r.text()}));
    (r.status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_answers_a_singletons_calls_as_its_owner_does() {
    // No peer listens on port 9: nothing here sends out.
    let cluster = Cluster::start(&NODES, options(&format!("{}{}", mamp_tenant(9), singleton_bridge()))).await;
    let mut clients = BTreeMap::new();
    for n in NODES {
        clients.insert(n, cluster.node(n).connect("client").await);
    }
    let a = clients.get_mut("a").expect("node a");
    a.wait_for("the UAP hub answering on node a", "uap/list", json!({}), |r| r.get("result").is_some()).await;
    a.wait_for("the MAMP bridge answering on node a", "mamp/conversation", json!({"conversationId": "none"}), |r| r["error"]["code"] == 92000).await;
    let (uap_owner, _) = lease_holder(&cluster, &NODES, TENANT, "uap", REPLICATION).await;
    let (mamp_owner, _) = lease_holder(&cluster, &NODES, TENANT, "mamp", REPLICATION).await;

    // The hub's errors, word for word.
    for (method, params) in
        [("uap/get", json!({"jobId": "job-missing"})), ("uap/submit", json!({"kind": "test", "type": ""})), ("uap/cancel", json!({"jobId": "job-missing"}))]
    {
        let reference = clients.get_mut(uap_owner.as_str()).expect("owner").call(method, params.clone()).await;
        assert!(reference["error"]["code"].is_i64() && reference["error"]["message"].is_string(), "{method} {params} on the owner {uap_owner}: {reference}");
        for n in NODES {
            let got = clients.get_mut(n).expect("node").call(method, params.clone()).await;
            assert_eq!(got["error"], reference["error"], "{method} {params}: node {n} answers otherwise than the owner {uap_owner}");
        }
    }
    let missing = clients.get_mut(uap_owner.as_str()).expect("owner").call("uap/get", json!({"jobId": "job-missing"})).await;
    assert_eq!(missing["error"]["code"], 91000, "{missing}");
    // A job submitted through a non-owner is the same job on every node.
    let (u1, _) = others(&uap_owner);
    let id = submit(clients.get_mut(u1).expect("node"), "nobody-runs-this", 0).await;
    let reference = clients.get_mut(uap_owner.as_str()).expect("owner").ok("uap/get", json!({"jobId": id})).await;
    assert_eq!(reference["job"]["status"], "queued", "{reference}");
    for n in NODES {
        let got = clients.get_mut(n).expect("node").ok("uap/get", json!({"jobId": id})).await;
        assert_eq!(got, reference, "uap/get {id} on node {n}");
    }

    // MAMP over HTTP: alice is on a node that does not own the bridge.
    let (m1, m2) = others(&mamp_owner);
    let mut alice = cluster.node(m1).agent("alice", json!({})).await;
    for c in clients.values_mut() {
        c.wait_for_agent("alice").await;
    }
    let owner_node = cluster.node(&mamp_owner);
    let to_alice = mamp_message("x-1", "agent://peer.example/bob", "agent://gw.example/alice", "hello from outside");
    let to_nobody = mamp_message("x-2", "agent://peer.example/bob", "agent://gw.example/nobody", "anyone?");
    let requests: [(&str, &str, &str, &[u8]); 3] = [
        ("GET", "/mamp/v1/card", "default-token", b""),
        ("POST", "/mamp/v1/messages", "default-token", &to_nobody),
        ("POST", "/mamp/v1/messages", "wrong-token", &to_nobody),
    ];
    for (method, path, token, body) in requests {
        let reference = mamp_http(owner_node, method, path, token, body).await;
        for n in NODES {
            let got = mamp_http(cluster.node(n), method, path, token, body).await;
            assert_eq!(got, reference, "{method} {path} (token {token}): node {n} answers otherwise than the owner {mamp_owner}");
        }
    }
    let (status, card) = mamp_http(owner_node, "GET", "/mamp/v1/card", "default-token", b"").await;
    assert_eq!((status, &card["agent_id"]), (200, &json!("agent://gw.example/gateway")), "{card}");
    let (status, refused) = mamp_http(owner_node, "POST", "/mamp/v1/messages", "default-token", &to_nobody).await;
    assert_eq!((status, &refused["error"]), (404, &json!("agent_not_found")), "{refused}");

    // A message in through the other non-owner reaches alice; the same message through every node gets the same answer and is not delivered again.
    let (status, received) = mamp_http(cluster.node(m2), "POST", "/mamp/v1/messages", "default-token", &to_alice).await;
    assert_eq!(status, 200, "POST on node {m2}: {received}");
    assert_eq!(received["status"], "received", "{received}");
    let got = alice.expect_note("the MAMP message posted on another node", REPLICATION, |n| n["method"] == "map/message").await;
    assert_eq!(got["params"]["message"]["payload"]["content"], json!([{"type": "text", "text": "hello from outside"}]), "{got}");
    for n in NODES {
        let again = mamp_http(cluster.node(n), "POST", "/mamp/v1/messages", "default-token", &to_alice).await;
        assert_eq!(again, (200, received.clone()), "the same message again on node {n}");
    }
    if let Some(twice) = alice.note(Duration::from_millis(500), |n| n["method"] == "map/message").await {
        panic!("a repeated message_id was delivered again: {twice}");
    }

    // An agent's call right after its registration: the bridge knows the
    // caller's agents on every node (here it gets as far as the unknown
    // conversation, 92000), as it does on the owner.
    for n in NODES {
        for k in 0..5 {
            let me = format!("fresh-{n}-{k}");
            let mut fresh = cluster.node(n).agent(&me, json!({})).await;
            let params = json!({"conversationId": "none", "content": "x", "from": format!("agent://gw.example/{me}")});
            let r = fresh.call("mamp/send", params.clone()).await;
            assert_eq!(r["error"]["code"], 92000, "mamp/send {params} by {me} right after it registered on node {n} (the bridge's owner is {mamp_owner}): {r}");
        }
    }
}
