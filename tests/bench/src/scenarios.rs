//! The scenarios. Every load loop is one task per sender socket together with
//! the sockets that receive its messages (a `select!` over them: one reader and
//! one writer per socket, nothing spawned per request), bounded by a deadline.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures_util::stream::{self, SelectAll};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{self, CallError, Conn, Ws};
use crate::servers::{self, Server};
use crate::stats::{Samples, Summary};

/// After the measured window, how long the loops wait for answers still in flight.
const GRACE: Duration = Duration::from_secs(3);

/// Origin of the timestamps embedded in payloads (`"bt"`: ns since this instant).
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

pub(crate) fn ns_at(t: Instant) -> u64 {
    t.saturating_duration_since(base()).as_nanos() as u64
}

#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub warmup: Duration,
    pub secs: Duration,
}

#[derive(Clone, Copy)]
struct Clock {
    measure_from: Instant,
    end: Instant,
    grace_end: Instant,
}

impl Clock {
    fn new(t: Timing) -> Clock {
        let measure_from = Instant::now() + t.warmup;
        let end = measure_from + t.secs;
        Clock { measure_from, end, grace_end: end + GRACE }
    }

    fn in_window(&self, t: Instant) -> bool {
        t >= self.measure_from && t < self.end
    }
}

/// One measured load.
#[derive(Clone, Debug, Default)]
pub struct Load {
    /// Deliveries (or answers, for request scenarios) per second in the window.
    pub rate: f64,
    pub lat: Summary,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Server CPU during the window, in cores (1.0 = one core busy).
    pub server_cores: Option<f64>,
    /// The generator's CPU during the window, in cores.
    pub generator_cores: Option<f64>,
    /// Scenario-specific remarks (the subscriber's share, the sockets used, …).
    pub note: String,
}

impl Load {
    /// The median of several rounds by rate (the round itself, latencies included).
    pub fn median(mut rounds: Vec<Load>) -> Option<Load> {
        rounds.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        let mid = rounds.len() / 2;
        rounds.into_iter().nth(mid)
    }

    /// Server CPU time per counted message, in µs.
    pub fn cpu_per_msg_us(&self) -> Option<f64> {
        self.server_cores.filter(|_| self.rate > 0.0).map(|c| c * 1e6 / self.rate)
    }
}

#[derive(Clone, Debug)]
pub enum Outcome {
    Load(Load),
    /// Resident memory per idle session.
    Idle {
        sessions: usize,
        per_session_kib: f64,
        rss_before_kib: u64,
        rss_after_kib: u64,
        open_secs: f64,
        failed: usize,
    },
    /// Time from spawn to the ready line.
    Startup {
        ms: f64,
        note: String,
    },
    /// The scenario does not apply to this target (e.g. no mail plugin).
    NotApplicable(String),
    Failed(String),
}

#[derive(Default)]
struct Tally {
    /// Deliveries / answers counted in the window.
    counted: u64,
    lat: Samples,
    errors: u64,
    first_error: Option<String>,
    sent: u64,
}

impl Tally {
    fn error(&mut self, e: impl Into<String>) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.into());
        }
    }
}

/// `"bt":123` in a frame → 123.
pub(crate) fn stamp(text: &str) -> Option<u64> {
    let at = text.find("\"bt\":")? + 5;
    let digits = &text[at..];
    let end = digits.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// The top-level `"id":N` of a response.
fn response_id(text: &str) -> Option<u64> {
    let at = text.find("\"id\":")? + 5;
    let digits = text[at..].trim_start();
    let end = digits.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse().ok()
}

pub(crate) enum Kind {
    Notification,
    Result,
    Error,
}

/// Which of `"method"`, `"result"`, `"error"` comes first: the servers here all
/// write the top-level key before any nested one.
pub(crate) fn kind(text: &str) -> Kind {
    let pos = |k: &str| text.find(k).unwrap_or(usize::MAX);
    let (m, r, e) = (pos("\"method\""), pos("\"result\""), pos("\"error\""));
    if m < r && m < e {
        Kind::Notification
    } else if e < r {
        Kind::Error
    } else {
        Kind::Result
    }
}

pub(crate) fn error_text(text: &str) -> String {
    serde_json::from_str::<Value>(text).ok().and_then(|v| v.get("error").cloned()).map(|e| e.to_string()).unwrap_or_else(|| text.chars().take(200).collect())
}

/// Samples CPU of the servers (summed: the nodes of a cluster) and of this
/// process over the measured window.
struct CpuWindow {
    server: Option<Duration>,
    me: Option<Duration>,
    at: Instant,
}

/// The CPU time of every server together (None if any is unknown).
fn cpu_sum(servers: &[&Server]) -> Option<Duration> {
    servers.iter().map(|s| s.cpu()).sum()
}

impl CpuWindow {
    fn start(servers: &[&Server]) -> CpuWindow {
        CpuWindow { server: cpu_sum(servers), me: servers::self_cpu(), at: Instant::now() }
    }

    fn finish(self, servers: &[&Server], load: &mut Load) {
        let wall = self.at.elapsed().as_secs_f64();
        let cores = |a: Option<Duration>, b: Option<Duration>| Some((b? - a?).as_secs_f64() / wall);
        load.server_cores = cores(self.server, cpu_sum(servers));
        load.generator_cores = cores(self.me, servers::self_cpu());
    }
}

// ---------------------------------------------------------------- map/send

/// One sender and the sockets its messages reach.
struct Group {
    sender: Conn,
    receivers: Vec<Ws>,
    /// The `to` of every send, as JSON.
    to: String,
}

type Next = Option<Result<Message, tokio_tungstenite::tungstenite::Error>>;

/// What the sender loop has seen so far.
struct Progress {
    clock: Clock,
    t: Tally,
    answered: u64,
    failed: u64,
    got: u64,
}

impl Progress {
    /// A frame on a receiver socket; false ends the loop.
    fn delivery(&mut self, m: Next) -> bool {
        match m {
            Some(Ok(Message::Text(text))) => {
                let now = Instant::now();
                if let Some(bt) = stamp(text.as_str()) {
                    self.got += 1;
                    if self.clock.in_window(now) {
                        self.t.counted += 1;
                        self.t.lat.record(ns_at(now).saturating_sub(bt));
                    }
                }
                true
            }
            Some(Ok(_)) => true,
            Some(Err(e)) => {
                self.t.error(format!("receiver: {e}"));
                false
            }
            None => {
                self.t.error("receiver closed");
                false
            }
        }
    }

    /// A frame on the sender socket; false ends the loop.
    fn answer(&mut self, m: Next) -> bool {
        match m {
            Some(Ok(Message::Text(text))) => {
                match kind(text.as_str()) {
                    Kind::Notification => {}
                    Kind::Result => self.answered += 1,
                    Kind::Error => {
                        self.answered += 1;
                        self.failed += 1;
                        self.t.error(error_text(text.as_str()));
                    }
                }
                true
            }
            Some(Ok(_)) => true,
            Some(Err(e)) => {
                self.t.error(format!("sender: {e}"));
                false
            }
            None => {
                self.t.error("sender closed");
                false
            }
        }
    }
}

/// Keep `window` messages in flight on `g.sender` until the clock ends. A message
/// stays in flight until its answer and all of its deliveries have arrived.
/// After each wake-up every frame that is already there is taken before the
/// writer refills the window, so that one write carries several requests when
/// several answers came in together.
async fn drive(g: Group, window: u64, clock: Clock) -> Tally {
    use futures_util::FutureExt;
    let fanout = g.receivers.len().max(1) as u64;
    let mut id = g.sender.next_id;
    let (mut sink, mut answers) = g.sender.ws.split();
    let mut deliveries: SelectAll<Ws> = stream::select_all(g.receivers);
    let mut p = Progress { clock, t: Tally::default(), answered: 0, failed: 0, got: 0 };
    let sleep = tokio::time::sleep_until(clock.end.into());
    tokio::pin!(sleep);
    let mut sending = true;
    'run: loop {
        let done = p.answered.min((p.got + p.failed * fanout) / fanout);
        if sending {
            let mut fed = false;
            while p.t.sent - done < window {
                let mut frame = String::with_capacity(160 + g.to.len());
                let _ = write!(
                    frame,
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"map/send","params":{{"to":{},"payload":{{"bt":{},"text":"map-bench payload"}}}}}}"#,
                    g.to,
                    ns_at(Instant::now())
                );
                id += 1;
                if let Err(e) = sink.feed(Message::text(frame)).await {
                    p.t.error(format!("write: {e}"));
                    break 'run;
                }
                p.t.sent += 1;
                fed = true;
            }
            if fed {
                if let Err(e) = sink.flush().await {
                    p.t.error(format!("write: {e}"));
                    break 'run;
                }
            }
        } else if done >= p.t.sent {
            break;
        }
        let more = tokio::select! {
            biased;
            m = deliveries.next(), if !deliveries.is_empty() => p.delivery(m),
            m = answers.next() => p.answer(m),
            () = &mut sleep => {
                if sending {
                    sending = false;
                    sleep.as_mut().reset(clock.grace_end.into());
                    true
                } else {
                    p.t.error(format!("{} messages still unfinished {GRACE:?} after the end", p.t.sent - done));
                    false
                }
            }
        };
        if !more {
            break;
        }
        // Take what is already buffered or ready without waiting (bounded).
        for _ in 0..1024 {
            if !deliveries.is_empty() {
                if let Some(m) = deliveries.next().now_or_never() {
                    if !p.delivery(m) {
                        break 'run;
                    }
                    continue;
                }
            }
            match answers.next().now_or_never() {
                Some(m) => {
                    if !p.answer(m) {
                        break 'run;
                    }
                }
                None => break,
            }
        }
    }
    p.t
}

/// Counts `map/event` notifications on a subscriber socket until the window ends.
async fn watch(mut ws: Ws, clock: Clock) -> (Tally, u64) {
    let mut t = Tally::default();
    let mut overflows = 0;
    let deadline = tokio::time::sleep_until(clock.end.into());
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            m = ws.next() => match m {
                Some(Ok(Message::Text(text))) => {
                    let now = Instant::now();
                    let text = text.as_str();
                    if text.contains("\"map/event\"") && clock.in_window(now) {
                        t.counted += 1;
                        if let Some(bt) = stamp(text) {
                            t.lat.record(ns_at(now).saturating_sub(bt));
                        }
                        if text.contains("overflow") {
                            overflows += 1;
                        }
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => { t.error(format!("subscriber: {e}")); break; }
                None => { t.error("subscriber closed"); break; }
            },
            () = &mut deadline => break,
        }
    }
    (t, overflows)
}

fn summarize(tallies: Vec<Tally>, secs: f64) -> Load {
    let mut lat = Samples::default();
    let mut load = Load::default();
    let mut counted = 0;
    for t in tallies {
        counted += t.counted;
        load.errors += t.errors;
        if load.first_error.is_none() {
            load.first_error = t.first_error;
        }
        lat.merge(t.lat);
    }
    load.rate = counted as f64 / secs;
    load.lat = lat.summary();
    load
}

/// `servers`: whose CPU the window counts.
async fn run_groups(servers: &[&Server], groups: Vec<Group>, window: u64, timing: Timing, subscriber: Option<Ws>) -> Load {
    let clock = Clock::new(timing);
    let watcher: Option<JoinHandle<(Tally, u64)>> = subscriber.map(|ws| tokio::spawn(watch(ws, clock)));
    let tasks: Vec<JoinHandle<Tally>> = groups.into_iter().map(|g| tokio::spawn(drive(g, window, clock))).collect();
    tokio::time::sleep_until(clock.measure_from.into()).await;
    let cpu = CpuWindow::start(servers);
    tokio::time::sleep_until(clock.end.into()).await;
    let mut tallies = Vec::new();
    let mut load = Load::default();
    cpu.finish(servers, &mut load);
    for task in tasks {
        match task.await {
            Ok(t) => tallies.push(t),
            Err(e) => tallies.push(Tally { errors: 1, first_error: Some(format!("task: {e}")), ..Tally::default() }),
        }
    }
    let secs = timing.secs.as_secs_f64();
    let summary = summarize(tallies, secs);
    load = Load { server_cores: load.server_cores, generator_cores: load.generator_cores, ..summary };
    if let Some(w) = watcher {
        if let Ok((mut t, overflows)) = w.await {
            let lat = t.lat.summary();
            let _ = write!(load.note, "subscriber: {:.0} events/s", t.counted as f64 / secs);
            if lat.count > 0 {
                let _ = write!(load.note, ", event p50 {} p99 {}", crate::report::us(lat.p50_us), crate::report::us(lat.p99_us));
            }
            if overflows > 0 {
                let _ = write!(load.note, ", {overflows} overflow notices");
            }
            if let Some(e) = t.first_error {
                load.errors += t.errors;
                let _ = write!(load.note, ", subscriber error: {e}");
            }
        }
    }
    load
}

/// `map/send {to: {agent}}` between `pairs` sender/receiver pairs, each sender
/// keeping `window` messages in flight. With `subscriber`, one client also
/// subscribes to every event (`map/subscribe {filter: {}}`) and is counted.
pub async fn send(server: &Server, pairs: usize, window: u64, timing: Timing, subscriber: bool) -> Outcome {
    send_between(server, server, &[server], pairs, window, timing, subscriber).await
}

/// How long a receiver registered on one node may take to become visible on another.
const VISIBLE_TIMEOUT: Duration = Duration::from_secs(30);

/// `send` with the senders (and the subscriber) on `from` and the receivers
/// on `to`, e.g. two nodes of one cluster; the CPU columns count the servers
/// in `cpu_of` together. When `from` and `to` are different servers, every
/// receiver is polled for with `map/agents/get` on its sender's socket until
/// `from` sees it (replication is asynchronous).
pub async fn send_between(from: &Server, to: &Server, cpu_of: &[&Server], pairs: usize, window: u64, timing: Timing, subscriber: bool) -> Outcome {
    let placed = vec![(from, to); pairs];
    send_placed(&placed, cpu_of, window, timing, subscriber.then_some(from)).await
}

/// `send` with each pair placed on servers of its own: `placed[i]` is
/// (pair i's sender's server, its receiver's server), e.g. pairs spread over
/// the nodes of a cluster. A receiver on another server than its sender is
/// polled for as in `send_between`; `subscriber`: where the watcher connects.
pub async fn send_placed(placed: &[(&Server, &Server)], cpu_of: &[&Server], window: u64, timing: Timing, subscriber: Option<&Server>) -> Outcome {
    let mut across = 0;
    let mut groups = Vec::new();
    let mut slowest = Duration::ZERO;
    for (i, &(from, to)) in placed.iter().enumerate() {
        let cross = !std::ptr::eq(from, to);
        let setup = async {
            let (mut sender, _) = Conn::agent(&from.agent_url(), &format!("sender-{i}")).await?;
            let (receiver, rid) = Conn::agent(&to.agent_url(), &format!("receiver-{i}")).await?;
            if cross {
                slowest = slowest.max(sender.await_agent(&rid, VISIBLE_TIMEOUT).await?);
            }
            Ok::<_, String>(Group { sender, receivers: vec![receiver.ws], to: json!({ "agent": rid }).to_string() })
        };
        match setup.await {
            Ok(g) => groups.push(g),
            Err(e) => return Outcome::Failed(format!("setup: {e}")),
        }
        across += usize::from(cross);
    }
    let sub = match subscriber {
        Some(server) => {
            let setup = async {
                let mut c = client::open(&server.client_url(), false).await?;
                c.connect("client").await?;
                c.call("map/subscribe", json!({"filter": {}})).await?;
                Ok::<_, String>(c.ws)
            };
            match setup.await {
                Ok(ws) => Some(ws),
                Err(e) => return Outcome::Failed(format!("subscriber setup: {e}")),
            }
        }
        None => None,
    };
    let mut load = run_groups(cpu_of, groups, window, timing, sub).await;
    let mut extra = format!("{} pair(s) x {window} in flight", placed.len());
    if across == placed.len() && across > 0 {
        let _ = write!(extra, ", receivers on another server (visible to the senders' server after ≤ {} ms)", slowest.as_millis());
    } else if across > 0 {
        let _ = write!(extra, ", {across} receiver(s) on another server (visible to the senders' server after ≤ {} ms)", slowest.as_millis());
    }
    load.note = if load.note.is_empty() { extra } else { format!("{extra}; {}", load.note) };
    Outcome::Load(load)
}

/// `map/send {to: {scope}}` from one sender to a scope of `members` agents, each
/// on its own socket; `window` messages in flight. Rate counts deliveries.
pub async fn fanout(server: &Server, members: usize, window: u64, timing: Timing) -> Outcome {
    let url = server.agent_url();
    let setup = async {
        let (mut sender, _) = Conn::agent(&url, "fanout-sender").await?;
        let scope = match sender.call("map/scopes/create", json!({"name": format!("bench-{members}")})).await {
            Ok(r) => r,
            Err(CallError::Rpc { code: -32601, .. }) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let scope_id = scope
            .pointer("/scope/id")
            .or_else(|| scope.get("scopeId"))
            .or_else(|| scope.get("id"))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("map/scopes/create: no scope id in {scope}"))?
            .to_string();
        let mut receivers = Vec::with_capacity(members);
        for i in 0..members {
            let (mut c, aid) = Conn::agent(&url, &format!("member-{i}")).await?;
            c.call("map/scopes/join", json!({"scopeId": scope_id, "agentId": aid})).await?;
            receivers.push(c.ws);
        }
        Ok::<_, String>(Some(Group { sender, receivers, to: json!({ "scope": scope_id }).to_string() }))
    };
    match setup.await {
        Ok(Some(g)) => {
            let mut load = run_groups(&[server], vec![g], window, timing, None).await;
            load.note = format!("1 sender x {window} in flight, {members} members");
            Outcome::Load(load)
        }
        Ok(None) => Outcome::NotApplicable("no scopes".into()),
        Err(e) => Outcome::Failed(format!("setup: {e}")),
    }
}

// ---------------------------------------------------------------- requests (mail/turn, any method)

/// Keep `window` requests in flight on one socket; latency is request to answer.
async fn drive_requests(c: Conn, window: u64, clock: Clock, make: impl Fn(u64) -> String) -> Tally {
    use futures_util::FutureExt;
    const RING: usize = 4096;
    let window = window.min(RING as u64 / 2);
    let mut t = Tally::default();
    let mut sent_at: Vec<Option<Instant>> = vec![None; RING];
    let mut id = c.next_id;
    let (mut sink, mut answers) = c.ws.split();
    let mut answered = 0u64;
    let on_frame = |t: &mut Tally, answered: &mut u64, sent_at: &mut [Option<Instant>], m: Next| -> bool {
        match m {
            Some(Ok(Message::Text(text))) => {
                let now = Instant::now();
                let text = text.as_str();
                match kind(text) {
                    Kind::Notification => return true,
                    Kind::Error => t.error(error_text(text)),
                    Kind::Result => {}
                }
                *answered += 1;
                let at = response_id(text).and_then(|i| sent_at[(i as usize) % RING].take());
                if clock.in_window(now) {
                    t.counted += 1;
                    if let Some(at) = at {
                        t.lat.record((now - at).as_nanos() as u64);
                    }
                }
                true
            }
            Some(Ok(_)) => true,
            Some(Err(e)) => {
                t.error(format!("socket: {e}"));
                false
            }
            None => {
                t.error("socket closed");
                false
            }
        }
    };
    let sleep = tokio::time::sleep_until(clock.end.into());
    tokio::pin!(sleep);
    let mut sending = true;
    'run: loop {
        if sending {
            let mut fed = false;
            while t.sent - answered < window {
                let frame = make(id);
                sent_at[(id as usize) % RING] = Some(Instant::now());
                if let Err(e) = sink.feed(Message::text(frame)).await {
                    t.error(format!("write: {e}"));
                    break 'run;
                }
                id += 1;
                t.sent += 1;
                fed = true;
            }
            if fed {
                if let Err(e) = sink.flush().await {
                    t.error(format!("write: {e}"));
                    break 'run;
                }
            }
        } else if answered >= t.sent {
            break;
        }
        let more = tokio::select! {
            biased;
            m = answers.next() => on_frame(&mut t, &mut answered, &mut sent_at, m),
            () = &mut sleep => {
                if sending {
                    sending = false;
                    sleep.as_mut().reset(clock.grace_end.into());
                    true
                } else {
                    t.error(format!("{} requests unanswered {GRACE:?} after the end", t.sent - answered));
                    false
                }
            }
        };
        if !more {
            break;
        }
        for _ in 0..1024 {
            match answers.next().now_or_never() {
                Some(m) => {
                    if !on_frame(&mut t, &mut answered, &mut sent_at, m) {
                        break 'run;
                    }
                }
                None => break,
            }
        }
    }
    t
}

/// `mail/turn` through the mail plugin: `sockets` agents, each in its own
/// conversation, each keeping `window` turns in flight, beside `idle`
/// sessions held open (the host's work per turn should not grow with
/// them). Not applicable when `mail/create` is an unknown method (no mail
/// plugin loaded).
pub async fn mail(server: &Server, sockets: usize, window: u64, timing: Timing, idle: usize) -> Outcome {
    let url = server.agent_url();
    let held = open_idle(&url, idle).await;
    if held.conns.len() < idle {
        return Outcome::Failed(format!("{} of {idle} idle sessions opened: {}", held.conns.len(), held.first_error.unwrap_or_default()));
    }
    let mut conns = Vec::new();
    for i in 0..sockets {
        let setup = async {
            let (mut c, _) = Conn::agent(&url, &format!("mailer-{i}")).await?;
            let r = match c.call("mail/create", json!({"subject": format!("bench {i}")})).await {
                Ok(r) => r,
                Err(CallError::Rpc { code: -32601, message }) => return Ok(Err(message)),
                Err(e) => return Err(e.to_string()),
            };
            let conv = r.pointer("/conversation/id").and_then(Value::as_str).ok_or_else(|| format!("mail/create: no conversation id in {r}"))?.to_string();
            // One turn outside the load: the first call may warm the plugin up.
            c.call("mail/turn", json!({"conversationId": conv, "contentType": "text", "content": "hello"})).await?;
            Ok::<_, String>(Ok((c, conv)))
        };
        match setup.await {
            Ok(Ok(x)) => conns.push(x),
            Ok(Err(msg)) => return Outcome::NotApplicable(format!("no mail plugin (mail/create: {msg})")),
            Err(e) => return Outcome::Failed(format!("setup: {e}")),
        }
    }
    let clock = Clock::new(timing);
    let tasks: Vec<JoinHandle<Tally>> = conns
        .into_iter()
        .map(|(c, conv)| {
            let conv = serde_json::to_string(&conv).expect("string");
            tokio::spawn(drive_requests(c, window, clock, move |id| {
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"mail/turn","params":{{"conversationId":{conv},"contentType":"text","content":"map-bench turn {id}"}}}}"#
                )
            }))
        })
        .collect();
    let mut load = measure_requests(&[server], tasks, clock, timing).await;
    load.note = format!("{sockets} sockets x {window} in flight, latency = request to answer");
    drop(held);
    Outcome::Load(load)
}

/// Sample the CPU of `cpu_of` over the measured window of `clock`, then
/// collect the request loops' tallies.
async fn measure_requests(cpu_of: &[&Server], tasks: Vec<JoinHandle<Tally>>, clock: Clock, timing: Timing) -> Load {
    tokio::time::sleep_until(clock.measure_from.into()).await;
    let cpu = CpuWindow::start(cpu_of);
    tokio::time::sleep_until(clock.end.into()).await;
    let mut cores = Load::default();
    cpu.finish(cpu_of, &mut cores);
    let mut tallies = Vec::new();
    for task in tasks {
        match task.await {
            Ok(t) => tallies.push(t),
            Err(e) => tallies.push(Tally { errors: 1, first_error: Some(format!("task: {e}")), ..Tally::default() }),
        }
    }
    let mut load = summarize(tallies, timing.secs.as_secs_f64());
    load.server_cores = cores.server_cores;
    load.generator_cores = cores.generator_cores;
    load
}

/// `method` with `params` (JSON text) from `sockets` client sessions on
/// `server`, each keeping `window` calls in flight; the CPU columns count
/// `cpu_of` together (the nodes of a cluster). Rate counts answers, error
/// answers included (they are also counted as errors); latency is request
/// to answer.
pub async fn calls(server: &Server, cpu_of: &[&Server], method: &str, params: &str, sockets: usize, window: u64, timing: Timing) -> Outcome {
    let url = server.client_url();
    let value: Value = match serde_json::from_str(params) {
        Ok(v) => v,
        Err(e) => return Outcome::Failed(format!("params {params}: {e}")),
    };
    let mut conns = Vec::with_capacity(sockets);
    for _ in 0..sockets {
        let setup = async {
            let mut c = client::open(&url, false).await?;
            c.connect("client").await?;
            // One call outside the load: the first may find the plugin cold.
            c.call(method, value.clone()).await?;
            Ok::<_, String>(c)
        };
        match setup.await {
            Ok(c) => conns.push(c),
            Err(e) => return Outcome::Failed(format!("setup: {e}")),
        }
    }
    let clock = Clock::new(timing);
    let method = serde_json::to_string(method).expect("string");
    let tasks: Vec<JoinHandle<Tally>> = conns
        .into_iter()
        .map(|c| {
            let (method, params) = (method.clone(), params.to_string());
            tokio::spawn(drive_requests(c, window, clock, move |id| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method},"params":{params}}}"#)))
        })
        .collect();
    let mut load = measure_requests(cpu_of, tasks, clock, timing).await;
    load.note = format!("{sockets} socket(s) x {window} in flight");
    Outcome::Load(load)
}

// ---------------------------------------------------------------- idle sessions

/// Open `n` WebSockets, `map/connect` each, leave them idle, and read the
/// server's VmRSS before and after.
pub async fn idle(server: &Server, n: usize) -> Outcome {
    let Some(before) = server.rss_kib() else { return Outcome::NotApplicable("no pid to read VmRSS of".into()) };
    let started = Instant::now();
    let Held { conns, failed, first_error } = open_idle(&server.agent_url(), n).await;
    let open_secs = started.elapsed().as_secs_f64();
    // Let the server settle (allocations behind the last answers, timers).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = server.rss_kib().unwrap_or(before);
    let held = conns.len();
    drop(conns);
    if held == 0 {
        return Outcome::Failed(format!("no session opened: {}", first_error.unwrap_or_default()));
    }
    if let Some(e) = first_error {
        eprintln!("#   {failed} of {n} sessions failed, first: {e}");
    }
    Outcome::Idle {
        sessions: held,
        per_session_kib: after.saturating_sub(before) as f64 / held as f64,
        rss_before_kib: before,
        rss_after_kib: after,
        open_secs,
        failed,
    }
}

/// Idle sessions, open until dropped.
struct Held {
    conns: Vec<Conn>,
    failed: usize,
    first_error: Option<String>,
}

/// Open `n` WebSockets and `map/connect` each, 64 at a time.
async fn open_idle(url: &str, n: usize) -> Held {
    let results: Vec<Result<Conn, String>> = stream::iter(0..n)
        .map(|_| async move {
            let mut c = client::open(url, true).await?;
            c.connect("agent").await?;
            Ok(c)
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let mut held = Held { conns: Vec::with_capacity(n), failed: 0, first_error: None };
    for r in results {
        match r {
            Ok(c) => held.conns.push(c),
            Err(e) => {
                held.failed += 1;
                held.first_error.get_or_insert(e);
            }
        }
    }
    held
}

/// The extensions a `map/connect` result advertises (names, else URIs).
pub async fn extensions(server: &Server) -> Vec<String> {
    let Ok(mut c) = client::open(&server.agent_url(), false).await else { return Vec::new() };
    let Ok(r) = c.connect("agent").await else { return Vec::new() };
    r.pointer("/capabilities/extensions")
        .and_then(Value::as_array)
        .map(|xs| xs.iter().filter_map(|x| x.get("name").or_else(|| x.get("uri")).and_then(Value::as_str).map(str::to_string)).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second of `mail/turn` against the real gateway with the mail
    /// plugin, beside idle sessions: every turn answered, none failed.
    #[test]
    fn tiny_mail_beside_idle_sessions() {
        servers::raise_nofile();
        let p = servers::test_paths("mail", &["mail.wasm", "mail.toml"]);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let timing = Timing { warmup: Duration::from_millis(200), secs: Duration::from_secs(1) };
        let out = rt.block_on(async {
            let server = Server::start(servers::Target::Gateway, &p, "mail").expect("the gateway starts");
            mail(&server, 2, 4, timing, 50).await
        });
        let _ = std::fs::remove_dir_all(&p.scratch);
        match out {
            Outcome::Load(l) => assert!(l.rate > 0.0 && l.errors == 0, "rate {} errors {} ({:?})", l.rate, l.errors, l.first_error),
            _ => panic!("not a load"),
        }
    }

    #[test]
    fn frame_parsing() {
        assert_eq!(stamp(r#"{"params":{"message":{"payload":{"bt":12345,"text":"x"}}}}"#), Some(12345));
        assert_eq!(response_id(r#"{"jsonrpc":"2.0","id": 42,"result":{"turn":{"id":"turn-1"}}}"#), Some(42));
        assert!(matches!(kind(r#"{"jsonrpc":"2.0","id":1,"result":{"source":{"method":"mail/turn"}}}"#), Kind::Result));
        assert!(matches!(kind(r#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#), Kind::Error));
        assert!(matches!(kind(r#"{"jsonrpc":"2.0","method":"map/message","params":{"result":1}}"#), Kind::Notification));
    }
}
