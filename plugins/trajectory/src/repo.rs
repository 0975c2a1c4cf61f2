//! Reading and writing checkpoint records with their indexes and chunks,
//! following the layout in `keys`.

use crate::error::{Error, Result};
use crate::host;
use crate::keys::{self, Index};
use crate::map_gateway::plugin::store::Write;
use crate::model::{Checkpoint, Record};

pub fn load(id: &str) -> Result<Option<Record>> {
    match host::get(keys::CHECKPOINTS, id)? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text).map(Some).map_err(|e| Error::damaged(format!("Stored checkpoint {id} is unreadable: {e}"))),
    }
}

/// The next report sequence number. Two concurrent reports may draw the same
/// one; keys stay unique through the checkpoint id, only their relative
/// order within one millisecond is then by id.
pub fn next_seq() -> Result<u64> {
    Ok(host::get(keys::META, keys::SEQ)?.and_then(|s| s.parse::<u64>().ok()).unwrap_or(0) + 1)
}

fn position(record: &Record) -> String {
    keys::position(record.checkpoint.timestamp, record.seq, &record.checkpoint.id)
}

/// Where `record` sits in `index` (the key a listing cursor resumes below).
pub fn key_in(index: &Index, record: &Record) -> String {
    index.key(&position(record))
}

/// Store a record, its index entries and its artifact chunks in one atomic
/// batch, replacing `previous` (the record it overwrites) entirely.
pub fn save(record: &Record, chunks: Vec<Vec<String>>, previous: Option<&Record>) -> Result<()> {
    let mut writes: Vec<Write> = Vec::new();
    if let Some(old) = previous {
        for index in Index::all_for(&old.checkpoint) {
            writes.push(host::delete(index.collection(), &key_in(&index, old)));
        }
        for (a, artifact) in old.artifacts.iter().enumerate() {
            for c in 0..artifact.total_chunks {
                writes.push(host::delete(keys::CHUNKS, &keys::chunk(&old.blob, a, c)));
            }
        }
    }
    let checkpoint_json = serde_json::to_string(&record.checkpoint).expect("a checkpoint serialises");
    for index in Index::all_for(&record.checkpoint) {
        writes.push(host::put(index.collection(), &key_in(&index, record), checkpoint_json.clone()));
    }
    for (a, artifact_chunks) in chunks.into_iter().enumerate() {
        for (c, chunk) in artifact_chunks.into_iter().enumerate() {
            writes.push(host::put(keys::CHUNKS, &keys::chunk(&record.blob, a, c as u32), chunk));
        }
    }
    writes.push(host::put(keys::CHECKPOINTS, &record.checkpoint.id, serde_json::to_string(record).expect("a record serialises")));
    writes.push(host::put(keys::META, keys::SEQ, record.seq.to_string()));
    host::batch(&writes)
}

/// Up to `limit` checkpoints of `index`, newest first, with keys strictly
/// between `after` and `before`.
pub fn newest_first(index: &Index, after: Option<String>, before: Option<String>, limit: u32) -> Result<Vec<Checkpoint>> {
    let rows = host::scan_newest_first(index.collection(), &index.prefix(), after, before, limit)?;
    rows.into_iter()
        .map(|(key, value)| serde_json::from_str(&value).map_err(|e| Error::damaged(format!("Stored index entry {key} is unreadable: {e}"))))
        .collect()
}
