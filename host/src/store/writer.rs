//! SQLite's single writer with group commit: concurrent write calls queue
//! here, and each round applies every queued call in one transaction (each
//! inside a savepoint, so one call's conflict or error leaves the others
//! alone) and acknowledges them only after that transaction has committed.
//! One fsync then serves many calls, and since every call is bounded
//! (`ops::check_ops`), no tenant holds the writer for long.

use sqlx::sqlite::SqliteConnection;
use sqlx::Connection;
use tokio::sync::{mpsc, oneshot};

use super::apply::apply_sqlite;
use super::ops::{call_bytes, Op, Outcome, MAX_CALL_BYTES, MAX_OPS};
use super::{Scope, StoreError};

/// Most calls committed together.
const MAX_GROUP: usize = 256;

struct Job {
    scope: Scope,
    ops: Vec<Op>,
    reply: oneshot::Sender<Result<Outcome, StoreError>>,
}

/// The handle write calls go through.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Job>,
}

impl Writer {
    /// Start the writer on its own connection.
    pub fn start(conn: SqliteConnection) -> Writer {
        let (queue, jobs) = mpsc::channel(4 * MAX_GROUP);
        tokio::spawn(run(conn, jobs));
        Writer { queue }
    }

    /// Apply `ops` atomically; answers once durable.
    pub async fn commit(&self, scope: &Scope, ops: Vec<Op>) -> Result<Outcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Unavailable("the storage writer has stopped".into());
        self.queue.send(Job { scope: scope.clone(), ops, reply }).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

async fn run(mut conn: SqliteConnection, mut jobs: mpsc::Receiver<Job>) {
    let mut group: Vec<Job> = Vec::with_capacity(MAX_GROUP);
    while let Some(first) = jobs.recv().await {
        let (mut ops, mut bytes) = (first.ops.len(), call_bytes(&first.ops));
        group.push(first);
        // Take what is already waiting, up to about one call's worth.
        while group.len() < MAX_GROUP && ops < MAX_OPS && bytes < MAX_CALL_BYTES {
            match jobs.try_recv() {
                Ok(job) => {
                    ops += job.ops.len();
                    bytes += call_bytes(&job.ops);
                    group.push(job);
                }
                Err(_) => break,
            }
        }
        let answers = commit_group(&mut conn, &group).await;
        for (job, answer) in group.drain(..).zip(answers) {
            let _ = job.reply.send(answer);
        }
    }
    let _ = conn.close().await;
}

/// One transaction for the whole group; an answer per job.
async fn commit_group(conn: &mut SqliteConnection, group: &[Job]) -> Vec<Result<Outcome, StoreError>> {
    let fail_all = |e: StoreError| group.iter().map(|_| Err(StoreError::Unavailable(e.to_string()))).collect();
    if let Err(e) = sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await {
        return fail_all(e.into());
    }
    let version: i64 = match sqlx::query_scalar("UPDATE kv_clock SET version = version + 1 RETURNING version").fetch_one(&mut *conn).await {
        Ok(v) => v,
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return fail_all(e.into());
        }
    };
    let alone = group.len() == 1;
    let mut answers = Vec::with_capacity(group.len());
    for job in group {
        if !alone {
            if let Err(e) = sqlx::query("SAVEPOINT call").execute(&mut *conn).await {
                answers.push(Err(e.into()));
                continue;
            }
        }
        let answer = apply_sqlite(conn, &job.scope, &job.ops, version).await;
        let undo = !matches!(answer, Ok(Outcome::Committed { .. }));
        if !alone {
            let undone = if undo { sqlx::query("ROLLBACK TO call").execute(&mut *conn).await.map(drop) } else { Ok(()) };
            if let Err(e) = undone.and(sqlx::query("RELEASE call").execute(&mut *conn).await.map(drop)) {
                let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                return fail_all(e.into());
            }
        } else if undo {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return vec![answer];
        }
        answers.push(answer);
    }
    match sqlx::query("COMMIT").execute(&mut *conn).await {
        Ok(_) => answers,
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            fail_all(e.into())
        }
    }
}
