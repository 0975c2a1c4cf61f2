//! One call's operations as SQLite statements, run by the writer thread
//! (`group_commit`) inside its open transaction.

use rusqlite::{params, Connection, OptionalExtension};

use super::ops::{add_to_counter, Op, Outcome};
use super::{Scope, StoreError};

/// A failing SQLite call, here or in `sqlite`'s reads, is the database being unavailable.
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

const SELECT_ITEM: &str = "SELECT value, version FROM plugin_kv WHERE tenant = ?1 AND plugin = ?2 AND collection = ?3 AND key = ?4";
const UPSERT: &str = "INSERT INTO plugin_kv (tenant, plugin, collection, key, value, version) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                      ON CONFLICT (tenant, plugin, collection, key) DO UPDATE SET value = excluded.value, version = excluded.version";
const DELETE: &str = "DELETE FROM plugin_kv WHERE tenant = ?1 AND plugin = ?2 AND collection = ?3 AND key = ?4";

/// Apply one call's operations at `version` inside the writer's open
/// transaction. Conditions are checked first, so a conflict writes nothing.
pub fn apply(conn: &Connection, scope: &Scope, ops: &[Op], version: i64) -> Result<Outcome, StoreError> {
    let read = |collection: &str, key: &str| -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        Ok(conn.prepare_cached(SELECT_ITEM)?.query_row(params![scope.tenant, scope.plugin, collection, key], |r| Ok((r.get(0)?, r.get(1)?))).optional()?)
    };
    for (i, op) in ops.iter().enumerate() {
        let holds = match op {
            Op::ExpectVersion { collection, key, version } => read(collection, key)?.map_or(0, |(_, v)| v as u64) == *version,
            Op::ExpectValue { collection, key, value } => read(collection, key)?.map(|(v, _)| v) == *value,
            _ => continue,
        };
        if !holds {
            return Ok(Outcome::Conflict(i as u32));
        }
    }
    let (mut counters, mut deleted) = (Vec::new(), 0u64);
    let mut upsert = conn.prepare_cached(UPSERT)?;
    for op in ops {
        match op {
            Op::Put { collection, key, value } => {
                upsert.execute(params![scope.tenant, scope.plugin, collection, key, value, version])?;
            }
            Op::Delete { collection, key } => {
                deleted += conn.prepare_cached(DELETE)?.execute(params![scope.tenant, scope.plugin, collection, key])? as u64;
            }
            Op::Add { collection, key, delta } => {
                // The writer is the only one writing, so read-then-write is atomic.
                let next = add_to_counter(read(collection, key)?.map(|(v, _)| v).as_deref(), *delta, key)?;
                upsert.execute(params![scope.tenant, scope.plugin, collection, key, next.to_string().into_bytes(), version])?;
                counters.push(next);
            }
            Op::ExpectVersion { .. } | Op::ExpectValue { .. } => {}
        }
    }
    Ok(Outcome::Committed { version: version as u64, counters, deleted })
}
