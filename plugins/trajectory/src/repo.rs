//! Reading and writing checkpoint records with their indexes and chunks,
//! following the layout in `keys`.

use map_plugin_sdk::store::{retry, Attempt, Batch, Outcome, Versioned};
use map_plugin_sdk::{Error, Result};

use crate::keys::{self, Index, CHECKPOINTS, CHUNKS, META, SEQ};
use crate::model::{Checkpoint, Record};

pub fn load(id: &str) -> Result<Option<Record>> {
    CHECKPOINTS.get(id)
}

/// The record under `id` with its version, for a report that may replace it.
pub fn load_versioned(id: &str) -> Result<Versioned<Record>> {
    CHECKPOINTS.get_versioned(id)
}

/// The next report sequence number. It is a counter in the store, so
/// concurrent reports (on any instance) each draw their own.
pub fn next_seq() -> Result<u64> {
    Ok(META.add(SEQ, 1)?.max(0) as u64)
}

fn position(record: &Record) -> String {
    keys::position(record.checkpoint.timestamp, record.seq, &record.checkpoint.id)
}

/// Where `record` sits in `index` (the key a listing cursor resumes below).
pub fn key_in(index: &Index, record: &Record) -> String {
    index.key(&position(record))
}

/// Store `record`, its index entries and its artifact chunks in one atomic
/// commit that replaces `previous` (what the report read under the same id)
/// entirely: its index entries and chunks go. The commit applies only if
/// the stored record is still `previous`; when another report of the same
/// id committed in between, the record is read again, `may_replace` asked
/// about it, and the commit tried again, so no report leaves stale index
/// entries or chunks behind.
pub fn save(record: &Record, chunks: Vec<Vec<String>>, mut previous: Versioned<Record>, may_replace: impl Fn(&Record) -> Result<()>) -> Result<()> {
    let mut batch = Batch::new();
    for index in Index::all_for(&record.checkpoint) {
        batch.put(&index.collection(), key_in(&index, record), &record.checkpoint);
    }
    for (a, artifact_chunks) in chunks.into_iter().enumerate() {
        for (c, chunk) in artifact_chunks.into_iter().enumerate() {
            batch.put_bytes(CHUNKS.name(), keys::chunk(&record.blob, a, c as u32), chunk.into_bytes());
        }
    }
    let id = &record.checkpoint.id;
    batch.put(&CHECKPOINTS, id.as_str(), record);
    // The new values stay; what depends on `previous` is rebuilt per attempt.
    let fixed = batch.len();
    retry(|| {
        batch.truncate(fixed);
        batch.expect_version(&CHECKPOINTS, id.as_str(), previous.version);
        if let Some(old) = &previous.value {
            for index in Index::all_for(&old.checkpoint) {
                batch.delete(&index.collection(), key_in(&index, old));
            }
            for (a, artifact) in old.artifacts.iter().enumerate() {
                for c in 0..artifact.total_chunks {
                    batch.delete(&CHUNKS, keys::chunk(&old.blob, a, c));
                }
            }
        }
        match batch.commit().map_err(unstorable)? {
            Outcome::Committed(_) => Ok(Attempt::Done(())),
            Outcome::Conflict(_) => {
                previous = load_versioned(id)?;
                if let Some(old) = &previous.value {
                    may_replace(old)?;
                }
                Ok(Attempt::Retry)
            }
        }
    })
}

/// Only our own keys and values reach the store, so a write it refuses
/// (not an outage) comes from identifiers or metadata too large to keep.
fn unstorable(e: Error) -> Error {
    if e.is_storage() && !e.is_retryable() {
        Error::invalid_params(format!("Cannot store this checkpoint: {}", e.message()))
    } else {
        e
    }
}

/// Up to `limit` checkpoints of `index`, newest first, with keys strictly
/// between `after` and `before`.
pub fn newest_first(index: &Index, after: Option<String>, before: Option<String>, limit: u32) -> Result<Vec<Checkpoint>> {
    let mut range = index.collection().prefix(index.prefix()).reverse();
    if let Some(a) = after {
        range = range.after(a);
    }
    if let Some(b) = before {
        range = range.before(b);
    }
    Ok(range.take(limit as usize)?.into_iter().map(|e| e.value).collect())
}
