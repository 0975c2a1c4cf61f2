//! Open-loop `map/send`: messages leave on a fixed schedule whatever the
//! server's answers do. A message that leaves late carries its scheduled
//! send time, so a stall shows in the latency of every message it held back
//! (no coordinated omission); one within the timer's slack carries the time
//! it actually left, so the timer's 1 ms granularity is not counted against
//! the server. Used by `scale` and `soak`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::client::{Conn, Ws};
use crate::scenarios::{self, Kind};
use crate::stats::Samples;

/// After the schedule ends, how long a pair waits for deliveries still due.
const GRACE: Duration = Duration::from_secs(3);
/// How late a timer may wake (tokio's has 1 ms ticks) before the lateness
/// counts as latency.
const SLACK: Duration = Duration::from_millis(2);

/// A sender and the agent it sends to (`to` is the JSON of `{agent}`).
pub struct Pair {
    pub sender: Conn,
    pub receiver: Ws,
    pub to: String,
}

/// What the tasks of one run count together. The generator has one thread,
/// so the locks are never contended.
#[derive(Default)]
pub struct Meter {
    lat: Mutex<Samples>,
    pub sent: AtomicU64,
    pub delivered: AtomicU64,
    pub errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Meter {
    pub fn error(&self, e: impl Into<String>) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().expect("meter lock");
        if first.is_none() {
            *first = Some(e.into());
        }
    }

    pub fn first_error(&self) -> Option<String> {
        self.first_error.lock().expect("meter lock").clone()
    }

    /// The latencies recorded since the last take.
    pub fn take(&self) -> Samples {
        std::mem::take(&mut *self.lat.lock().expect("meter lock"))
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// `rate` messages per second over all pairs from `start` until `end`;
/// latencies count for messages scheduled from `measure_from` on.
#[derive(Clone, Copy)]
pub struct Schedule {
    pub rate: f64,
    pub start: Instant,
    pub measure_from: Instant,
    pub end: Instant,
}

/// Drive every pair (a task each) until its schedule ends and its deliveries are in.
pub async fn run(pairs: Vec<Pair>, s: Schedule, meter: Arc<Meter>) {
    let n = pairs.len();
    let tasks: Vec<_> = pairs.into_iter().enumerate().map(|(i, p)| tokio::spawn(drive(p, i, n, s, meter.clone()))).collect();
    for t in tasks {
        if let Err(e) = t.await {
            meter.error(format!("task: {e}"));
        }
    }
}

fn frame(id: u64, to: &str, bt: u64) -> Message {
    Message::text(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"map/send","params":{{"to":{to},"payload":{{"bt":{bt},"text":"map-bench paced"}}}}}}"#))
}

/// One pair sends every `n / rate` seconds, offset by its place among the
/// `n` pairs; when the loop wakes late it sends everything already due.
async fn drive(p: Pair, i: usize, n: usize, s: Schedule, m: Arc<Meter>) {
    let period = n as f64 / s.rate;
    let offset = period * i as f64 / n as f64;
    let at = |k: u64| s.start + Duration::from_secs_f64(offset + period * k as f64);
    let measure_ns = scenarios::ns_at(s.measure_from);
    let (mut id, to) = (p.sender.next_id, p.to);
    let (mut sink, mut answers) = p.sender.ws.split();
    let mut receiver = p.receiver;
    let (mut k, mut got) = (0u64, 0u64);
    let grace_end = s.end + GRACE;
    loop {
        let sending = at(k) < s.end;
        if !sending && got >= k {
            break;
        }
        // Checked on every turn, not by the timer alone: while deliveries
        // and answers keep coming, the timer never wins the biased select.
        if !sending && Instant::now() >= grace_end {
            m.error(format!("{} of {k} messages not delivered {GRACE:?} after the end", k - got));
            break;
        }
        let wake = if sending { at(k) } else { grace_end };
        let more = tokio::select! {
            biased;
            f = receiver.next() => delivery(f, measure_ns, &m, &mut got),
            f = answers.next() => answer(f, &m),
            () = tokio::time::sleep_until(wake.into()) => {
                if !sending {
                    continue; // the grace period is over: the check above ends the loop
                }
                let now = Instant::now();
                let mut ok = true;
                while ok && at(k) <= now && at(k) < s.end {
                    let sent = if now - at(k) <= SLACK { now } else { at(k) };
                    ok = sink.feed(frame(id, &to, scenarios::ns_at(sent))).await.is_ok();
                    id += 1;
                    k += 1;
                    m.sent.fetch_add(1, Ordering::Relaxed);
                }
                if !(ok && sink.flush().await.is_ok()) {
                    m.error("sender: write failed");
                }
                ok
            }
        };
        if !more {
            break;
        }
    }
}

type Next = Option<Result<Message, tokio_tungstenite::tungstenite::Error>>;

/// A frame on the receiver; false ends the pair.
fn delivery(f: Next, measure_ns: u64, m: &Meter, got: &mut u64) -> bool {
    match f {
        Some(Ok(Message::Text(text))) => {
            let now = scenarios::ns_at(Instant::now());
            if let Some(bt) = scenarios::stamp(text.as_str()) {
                *got += 1;
                m.delivered.fetch_add(1, Ordering::Relaxed);
                if bt >= measure_ns {
                    m.lat.lock().expect("meter lock").record(now.saturating_sub(bt));
                }
            }
            true
        }
        Some(Ok(_)) => true,
        Some(Err(e)) => {
            m.error(format!("receiver: {e}"));
            false
        }
        None => {
            m.error("receiver closed");
            false
        }
    }
}

/// A frame on the sender: error answers count; false ends the pair.
fn answer(f: Next, m: &Meter) -> bool {
    match f {
        Some(Ok(Message::Text(text))) => {
            if matches!(scenarios::kind(text.as_str()), Kind::Error) {
                m.error(scenarios::error_text(text.as_str()));
            }
            true
        }
        Some(Ok(_)) => true,
        Some(Err(e)) => {
            m.error(format!("sender: {e}"));
            false
        }
        None => {
            m.error("sender closed");
            false
        }
    }
}
