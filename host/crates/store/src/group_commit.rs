//! SQLite's single writer with group commit: concurrent write calls queue
//! here, and each round applies the waiting calls in one transaction (each
//! inside a savepoint, so one call's conflict or error leaves the others
//! alone) and acknowledges them only after that transaction has committed.
//! One fsync then serves many calls; when calls come together, the writer
//! waits a moment (`LINGER_US`) for more before it commits. Every call is bounded
//! (`ops::check_ops`) and waiting calls are taken one tenant at a time, so
//! no tenant holds the writer for long or queues others behind its writes.
//! The writer is a thread of its own: SQLite calls block.
//!
//! Two things stay off the writer's path: checkpoints (copying the WAL into
//! the database file, with its fsyncs) run on a thread of their own after
//! commits, and the version clock is stored in blocks (`CLOCK_BLOCK`), so
//! most commits write only the caller's rows. A restart starts past the
//! last stored block, so versions still never repeat.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::cache::{Cache, Change};
use super::ops::{call_bytes, Op, Outcome, MAX_CALL_BYTES, MAX_OPS};
use super::sqlite_ops::apply;
use super::{Scope, StoreError};

/// How long the writer waits for more calls when calls arrive together.
const LINGER_US: u64 = 150;
/// Most calls committed together.
const MAX_GROUP: usize = 256;
/// Versions reserved at a time in `kv_clock`.
const CLOCK_BLOCK: i64 = 1024;
/// How long the checkpointer lets commits gather before it copies them.
const CHECKPOINT_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

struct Job {
    scope: Scope,
    ops: Vec<Op>,
    reply: oneshot::Sender<Result<Outcome, StoreError>>,
}

/// The handle write calls go through to the writer thread.
#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Job>,
}

impl GroupCommit {
    /// Start the writer thread on its own connection (it keeps `cache` up
    /// to date with every commit), and the checkpointer on `checkpoints`.
    pub fn start(conn: Connection, checkpoints: Connection, cache: std::sync::Arc<Cache>) -> rusqlite::Result<GroupCommit> {
        let (queue, jobs) = mpsc::channel(4 * MAX_GROUP);
        let clock = Clock::load(&conn)?;
        let (committed, signals) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new().name("store-checkpoint".into()).spawn(move || checkpoint(checkpoints, signals)).expect("the checkpoint thread starts");
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || run(conn, jobs, clock, &cache, committed))
            .expect("the storage writer thread starts");
        Ok(GroupCommit { queue })
    }

    /// Apply `ops` atomically; answers once durable.
    pub async fn commit(&self, scope: &Scope, ops: Vec<Op>) -> Result<Outcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Unavailable("the storage writer has stopped".into());
        self.queue.send(Job { scope: scope.clone(), ops, reply }).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// Copy committed WAL frames into the database file after commits, so
/// that the writer never does it (it would only if this fell far behind).
fn checkpoint(conn: Connection, signals: std::sync::mpsc::Receiver<()>) {
    while signals.recv().is_ok() {
        std::thread::sleep(CHECKPOINT_DELAY);
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "storage checkpoint failed; the next commit retries it");
        }
    }
}

/// The version clock: versions up to `stored` are reserved in `kv_clock`.
struct Clock {
    last: i64,
    stored: i64,
}

impl Clock {
    fn load(conn: &Connection) -> rusqlite::Result<Clock> {
        let stored = conn.query_row("SELECT version FROM kv_clock WHERE id = 1", [], |r| r.get(0))?;
        Ok(Clock { last: stored, stored })
    }

    /// The next transaction's version, reserving a new block inside it when
    /// the stored one is used up; `Some(block end)` to keep once it commits.
    fn tick(&self, conn: &Connection) -> rusqlite::Result<(i64, Option<i64>)> {
        let version = self.last + 1;
        if version <= self.stored {
            return Ok((version, None));
        }
        let end = version + CLOCK_BLOCK - 1;
        conn.prepare_cached("UPDATE kv_clock SET version = ?1 WHERE id = 1")?.execute([end])?;
        Ok((version, Some(end)))
    }
}

fn run(conn: Connection, mut jobs: mpsc::Receiver<Job>, mut clock: Clock, cache: &Cache, committed: std::sync::mpsc::SyncSender<()>) {
    let mut waiting = Waiting::default();
    let mut last_group = 0;
    loop {
        if waiting.is_empty() {
            match jobs.blocking_recv() {
                Some(job) => waiting.push(job),
                None => return,
            }
        }
        waiting.take(&mut jobs);
        // Calls arrived together last time, so more are likely on their way:
        // a moment's wait lets one commit serve them too. A lone caller
        // (the previous group held one call) never waits.
        if last_group > 1 && waiting.len() < last_group * 2 {
            std::thread::sleep(std::time::Duration::from_micros(LINGER_US));
            waiting.take(&mut jobs);
        }
        let group = waiting.next_group();
        last_group = group.len();
        let (answers, ticked) = commit_group(&conn, &clock, &group);
        if let Some((version, stored)) = ticked {
            clock.last = version;
            clock.stored = stored.unwrap_or(clock.stored);
            let _ = committed.try_send(());
        }
        cache.apply(changes(&group, &answers));
        for (job, answer) in group.into_iter().zip(answers) {
            let _ = job.reply.send(answer);
        }
    }
}

/// Jobs waiting for the writer, queued per tenant so that one tenant's big
/// writes cannot keep another's small ones waiting behind them.
#[derive(Default)]
struct Waiting {
    queues: HashMap<String, VecDeque<Job>>,
    /// Tenants with waiting jobs, in the order they are served.
    turn: VecDeque<String>,
}

impl Waiting {
    fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }

    /// Everything already queued, without waiting.
    fn take(&mut self, jobs: &mut mpsc::Receiver<Job>) {
        while let Ok(job) = jobs.try_recv() {
            self.push(job);
        }
    }

    fn len(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }

    fn push(&mut self, job: Job) {
        let queue = self.queues.entry(job.scope.tenant.clone()).or_default();
        if queue.is_empty() {
            self.turn.push_back(job.scope.tenant.clone());
        }
        queue.push_back(job);
    }

    /// The next transaction's jobs: one tenant's job at a time, in turn, as
    /// long as they fit about one call's worth of operations and bytes.
    fn next_group(&mut self) -> Vec<Job> {
        let (mut group, mut ops, mut bytes) = (Vec::new(), 0usize, 0usize);
        let mut passed = 0;
        while group.len() < MAX_GROUP && passed < self.turn.len() {
            let Some(tenant) = self.turn.pop_front() else { break };
            let queue = self.queues.get_mut(&tenant).expect("a tenant in turn has a queue");
            let job = queue.front().expect("a tenant in turn has a job");
            let (o, b) = (job.ops.len(), call_bytes(&job.ops));
            let fits = group.is_empty() || (ops + o <= MAX_OPS && bytes + b <= MAX_CALL_BYTES);
            if fits {
                group.push(queue.pop_front().expect("checked above"));
                (ops, bytes, passed) = (ops + o, bytes + b, 0);
            } else {
                passed += 1;
            }
            if queue.is_empty() {
                self.queues.remove(&tenant);
            } else {
                self.turn.push_back(tenant);
            }
        }
        group
    }
}

/// What the committed calls of a group changed, key by key, in order.
fn changes<'a>(group: &'a [Job], answers: &[Result<Outcome, StoreError>]) -> Vec<Change<'a>> {
    let mut out = Vec::new();
    for (job, answer) in group.iter().zip(answers) {
        let Ok(Outcome::Committed { version, counters, .. }) = answer else { continue };
        let mut counters = counters.iter();
        for op in &job.ops {
            let (collection, key, value) = match op {
                Op::Put { collection, key, value } => (collection, key, Some((Cow::Borrowed(value.as_slice()), *version))),
                Op::Delete { collection, key } => (collection, key, None),
                Op::Add { collection, key, .. } => {
                    let value = counters.next().map(|n| n.to_string().into_bytes());
                    (collection, key, value.map(|value| (Cow::Owned(value), *version)))
                }
                Op::ExpectVersion { .. } | Op::ExpectValue { .. } => continue,
            };
            out.push(Change { scope: &job.scope, collection: collection.as_str(), key: key.as_str(), value });
        }
    }
    out
}

/// One transaction for the whole group: an answer per job, and when it
/// committed, its version (and the clock block it stored, if any).
///
/// A job that adds to a counter runs in a savepoint, since it can fail
/// after writing (a value that is not a counter) and only its own writes
/// are then undone. Conditions are checked before anything is written, so
/// other jobs need none; an error of the database itself fails the group.
fn commit_group(conn: &Connection, clock: &Clock, group: &[Job]) -> (Vec<Result<Outcome, StoreError>>, Option<(i64, Option<i64>)>) {
    let fail_all = |e: &dyn std::fmt::Display| (group.iter().map(|_| Err(StoreError::Unavailable(e.to_string()))).collect(), None);
    // Cached statements: these run for every group.
    let run = |sql: &str| conn.prepare_cached(sql).and_then(|mut s| s.execute([])).map(drop);
    let rollback = || {
        let _ = run("ROLLBACK");
    };
    if let Err(e) = run("BEGIN IMMEDIATE") {
        return fail_all(&e);
    }
    let (version, stored) = match clock.tick(conn) {
        Ok(v) => v,
        Err(e) => {
            rollback();
            return fail_all(&e);
        }
    };
    let alone = group.len() == 1;
    let mut answers = Vec::with_capacity(group.len());
    for job in group {
        let isolated = !alone && job.ops.iter().any(|op| matches!(op, Op::Add { .. }));
        if isolated {
            if let Err(e) = run("SAVEPOINT call") {
                rollback();
                return fail_all(&e);
            }
        }
        let answer = apply(conn, &job.scope, &job.ops, version);
        let failure = answer.as_ref().err().map(ToString::to_string);
        if isolated {
            if let Err(e) = if failure.is_some() { run("ROLLBACK TO call") } else { Ok(()) }.and_then(|()| run("RELEASE call")) {
                rollback();
                return fail_all(&e);
            }
        } else if let Some(reason) = failure {
            rollback();
            if alone {
                return (vec![answer], None);
            }
            return fail_all(&format!("a write of the same transaction failed: {reason}"));
        }
        answers.push(answer);
    }
    match run("COMMIT") {
        Ok(()) => (answers, Some((version, stored))),
        Err(e) => {
            rollback();
            fail_all(&e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(tenant: &str, ops: usize) -> Job {
        let scope = Scope { tenant: tenant.into(), plugin: "p".into() };
        let ops = (0..ops).map(|i| Op::Delete { collection: "c".into(), key: i.to_string() }).collect();
        Job { scope, ops, reply: oneshot::channel().0 }
    }

    fn tenants(group: &[Job]) -> Vec<(&str, usize)> {
        group.iter().map(|j| (j.scope.tenant.as_str(), j.ops.len())).collect()
    }

    #[test]
    fn a_small_write_waits_for_at_most_one_big_one() {
        let mut waiting = Waiting::default();
        for _ in 0..3 {
            waiting.push(job("big", MAX_OPS));
        }
        waiting.push(job("small", 1));
        waiting.push(job("small", 2));
        assert_eq!(tenants(&waiting.next_group()), [("big", MAX_OPS)]);
        assert_eq!(tenants(&waiting.next_group()), [("small", 1), ("small", 2)]);
        assert_eq!(tenants(&waiting.next_group()), [("big", MAX_OPS)]);
        assert_eq!(tenants(&waiting.next_group()), [("big", MAX_OPS)]);
        assert!(waiting.is_empty());
    }

    #[test]
    fn small_writes_of_many_tenants_share_one_transaction() {
        let mut waiting = Waiting::default();
        for t in ["a", "b", "c", "a"] {
            waiting.push(job(t, 3));
        }
        assert_eq!(tenants(&waiting.next_group()), [("a", 3), ("b", 3), ("c", 3), ("a", 3)]);
        assert!(waiting.is_empty());
    }
}
