//! Applying one commit's operations inside an open transaction: the same
//! steps on SQLite and PostgreSQL (defined by a macro, since sqlx's
//! connection types differ).

/// Reads of one key inside a write transaction.
pub const SELECT_ITEM: &str = "SELECT value, version FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4";
/// The same, locking the row until the transaction ends (PostgreSQL).
pub const SELECT_ITEM_FOR_UPDATE: &str = "SELECT value, version FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4 FOR UPDATE";
pub const UPSERT: &str = "INSERT INTO plugin_kv (tenant, plugin, collection, key, value, version) VALUES ($1, $2, $3, $4, $5, $6) \
                          ON CONFLICT (tenant, plugin, collection, key) DO UPDATE SET value = excluded.value, version = excluded.version";
pub const INSERT_NEW: &str = "INSERT INTO plugin_kv (tenant, plugin, collection, key, value, version) VALUES ($1, $2, $3, $4, $5, $6) \
                              ON CONFLICT (tenant, plugin, collection, key) DO NOTHING";
pub const DELETE: &str = "DELETE FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4";

/// Define `async fn $name(conn, scope, ops, version) -> Result<Outcome, StoreError>`
/// for one sqlx connection type: apply `ops` for `scope` at `version` inside
/// the open transaction, reading keys with `$select` (which locks them where
/// the database can). Conditions are checked first, so a conflict writes nothing.
macro_rules! define_apply {
    ($name:ident, $conn:ty, $select:expr) => {
        pub async fn $name(conn: &mut $conn, scope: &$crate::store::Scope, ops: &[$crate::store::ops::Op], version: i64) -> Result<$crate::store::ops::Outcome, $crate::store::StoreError> {
            use sqlx::Row;
            use $crate::store::apply::{DELETE, INSERT_NEW, UPSERT};
            use $crate::store::ops::{add_to_counter, Op, Outcome};
            for (i, op) in ops.iter().enumerate() {
                let (collection, key, held) = match op {
                    Op::ExpectVersion { collection, key, version } => (collection, key, Err(*version)),
                    Op::ExpectValue { collection, key, value } => (collection, key, Ok(value)),
                    _ => continue,
                };
                let row = sqlx::query($select).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).fetch_optional(&mut *conn).await?;
                let found: Option<(Vec<u8>, i64)> = row.map(|r| (r.get(0), r.get(1)));
                let holds = match held {
                    Err(want) => found.map_or(0, |(_, v)| v as u64) == want,
                    Ok(want) => found.map(|(v, _)| v).as_ref() == want.as_ref(),
                };
                if !holds {
                    return Ok(Outcome::Conflict(i as u32));
                }
            }
            let (mut counters, mut deleted) = (Vec::new(), 0u64);
            for op in ops {
                match op {
                    Op::Put { collection, key, value } => {
                        sqlx::query(UPSERT).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).bind(value).bind(version).execute(&mut *conn).await?;
                    }
                    Op::Delete { collection, key } => {
                        deleted += sqlx::query(DELETE).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).execute(&mut *conn).await?.rows_affected();
                    }
                    Op::Add { collection, key, delta } => loop {
                        let row = sqlx::query($select).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).fetch_optional(&mut *conn).await?;
                        let current: Option<Vec<u8>> = row.map(|r| r.get(0));
                        let next = add_to_counter(current.as_deref(), *delta, key)?;
                        // An absent key is inserted only if nobody inserted it
                        // meanwhile; otherwise read it again (now locked).
                        let sql = if current.is_some() { UPSERT } else { INSERT_NEW };
                        let written = sqlx::query(sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).bind(next.to_string().into_bytes()).bind(version).execute(&mut *conn).await?;
                        if written.rows_affected() == 1 {
                            counters.push(next);
                            break;
                        }
                    },
                    Op::ExpectVersion { .. } | Op::ExpectValue { .. } => {}
                }
            }
            Ok(Outcome::Committed { version: version as u64, counters, deleted })
        }
    };
}

define_apply!(apply_sqlite, sqlx::SqliteConnection, SELECT_ITEM);
define_apply!(apply_postgres, sqlx::PgConnection, SELECT_ITEM_FOR_UPDATE);
