//! Where the hub's records live in the tenant's store. Every change of a
//! job is one atomic batch: the job, its history entry, and its place in
//! the queue (present exactly while it is queued).

use map_plugin_sdk::store::{keys, Batch, Collection, Raw, Text};
use map_plugin_sdk::{ids, Result};

use crate::model::{Agent, HistoryEntry, Job, Status};

pub const JOBS: Collection<Job> = Collection::new("jobs");
pub const AGENTS: Collection<Agent> = Collection::new("agents");
/// The encoded `TestInit` / `TranslationInit` of each job, sent as stored.
pub const INITS: Collection<Vec<u8>, Raw> = Collection::new("inits");
/// `<job>/<ulid>`: a job's history in order.
pub const HISTORY: Collection<HistoryEntry> = Collection::new("history");
/// Queued job ids (ids are time-ordered, so key order is submission order).
pub const QUEUE: Collection<String, Text> = Collection::new("queue");
/// Ids of jobs proposed or running: what a restart must settle.
pub const ACTIVE: Collection<String, Text> = Collection::new("active");

pub fn history_prefix(job: &str) -> String {
    keys::prefix(&[keys::escape(job)])
}

/// Store `job` as it now is, with `entry` in its history.
pub fn save(job: &Job, entry: HistoryEntry) -> Result<()> {
    save_with(job, entry, Batch::new())
}

/// `save`, adding to a batch that already holds other writes.
pub fn save_with(job: &Job, entry: HistoryEntry, mut batch: Batch) -> Result<()> {
    batch.put(&JOBS, job.id.clone(), job);
    batch.put(&HISTORY, keys::join(&[keys::escape(&job.id), ids::ulid()]), &entry);
    match job.status {
        Status::Queued => batch.put(&QUEUE, job.id.clone(), &String::new()).delete(&ACTIVE, job.id.clone()),
        Status::Proposed | Status::Running => batch.delete(&QUEUE, job.id.clone()).put(&ACTIVE, job.id.clone(), &String::new()),
        _ => batch.delete(&QUEUE, job.id.clone()).delete(&ACTIVE, job.id.clone()),
    };
    batch.apply()?;
    Ok(())
}

/// Up to `limit` jobs that `wanted` keeps, newest first, after `cursor`
/// (the id of the last job of the previous page), and the cursor of the
/// next page when more follow.
pub fn newest_first(wanted: impl Fn(&Job) -> bool, cursor: Option<String>, limit: usize) -> Result<(Vec<Job>, Option<String>)> {
    let mut jobs = Vec::new();
    let mut last = None;
    let mut more = false;
    JOBS.all().reverse().resume(cursor).each(|e| {
        if jobs.len() == limit {
            more = true;
            return Ok(false);
        }
        last = Some(e.key);
        if wanted(&e.value) {
            jobs.push(e.value);
        }
        Ok(true)
    })?;
    Ok((jobs, last.filter(|_| more)))
}

/// A history entry about the job as it now is.
pub fn entry(job: &Job, message: Option<String>) -> HistoryEntry {
    HistoryEntry { at: now(), status: job.status, agent: job.agent.clone(), message, state: None, telemetry: None }
}

pub fn now() -> String {
    ids::iso8601(ids::now_ms())
}
