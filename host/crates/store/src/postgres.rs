//! PostgreSQL through sqlx: a pool shared by every gateway process on the
//! database. Each write call is a transaction of its own, serialisable when
//! it carries conditions, so a condition cannot be invalidated between its
//! check and the commit; versions come from the sequence `kv_clock`.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::Row;

use super::artifacts::Artifacts;
use super::breaker::{Breaker, RETRY_AFTER};
use super::leases::{self, Fence, Leases};
use super::migrations;
use super::ops::{add_to_counter, bounds, ManyFill, Op, Outcome, PageFill, PREFIX_END};
use super::rollouts::RolloutLog;
use super::{Item, Page, ScanOptions, Scope, StoreError};
use map_config::redact_url;

/// Times a commit is run again after losing to a concurrent one.
const RETRIES: usize = 5;

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        // Serialisation failure and deadlock: another transaction won.
        let contended = matches!(&e, sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("40001") | Some("40P01")));
        // No connection to be had, or the one in use broke: the database is unreachable.
        let unreachable =
            matches!(&e, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::WorkerCrashed);
        if contended {
            StoreError::Contended(e.to_string())
        } else if unreachable {
            StoreError::Down { why: format!("PostgreSQL is unreachable: {e}"), retry_after: RETRY_AFTER }
        } else {
            StoreError::Unavailable(e.to_string())
        }
    }
}

#[derive(Clone)]
pub struct Postgres {
    pool: PgPool,
    /// Open while the database is unreachable: calls fail at once.
    breaker: Arc<Breaker>,
}

impl Postgres {
    pub fn leases(&self) -> Leases {
        Leases { pool: self.pool.clone(), breaker: self.breaker.clone() }
    }

    pub fn artifacts(&self) -> Artifacts {
        Artifacts { pool: self.pool.clone() }
    }

    pub fn rollout_log(&self) -> RolloutLog {
        RolloutLog { pool: self.pool.clone(), breaker: self.breaker.clone() }
    }

    /// A trivial query, given two seconds; a failure opens the breaker.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let query = async {
            match tokio::time::timeout(Duration::from_secs(2), sqlx::query("SELECT 1").execute(&self.pool)).await {
                Ok(done) => done.map(drop).map_err(StoreError::from),
                Err(_) => Err(StoreError::Down { why: "PostgreSQL did not answer within 2 s".into(), retry_after: RETRY_AFTER }),
            }
        };
        self.breaker.guard(query).await
    }

    /// Connect and migrate; `probe`: how often an unreachable database is tried again.
    pub async fn open(url: &str, probe: Duration) -> anyhow::Result<Postgres> {
        let options = PgConnectOptions::from_str(url).with_context(|| format!("the PostgreSQL URL {}", redact_url(url)))?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options.clone())
            .await
            .with_context(|| format!("connecting to PostgreSQL at {}", redact_url(url)))?;
        let db = Postgres { breaker: Breaker::new(&options, pool.clone(), probe), pool };
        db.migrate().await?;
        Ok(db)
    }

    /// Gateways starting together on one database migrate one at a time.
    async fn migrate(&self) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(migrations::LOCK_POSTGRES).execute(&mut *tx).await?;
        sqlx::raw_sql(migrations::CREATE_LEDGER).execute(&mut *tx).await?;
        tx.commit().await?;
        for (version, _, pg) in migrations::MIGRATIONS {
            let mut tx = self.pool.begin().await?;
            sqlx::query(migrations::LOCK_POSTGRES).execute(&mut *tx).await?;
            let done = sqlx::query("SELECT 1 FROM gateway_migrations WHERE version = $1").bind(*version).fetch_optional(&mut *tx).await?.is_some();
            if done {
                continue;
            }
            sqlx::raw_sql(pg).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO gateway_migrations (version, applied_at) VALUES ($1, $2)")
                .bind(*version)
                .bind(map_protocol::ids::now_ms() as i64)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            tracing::info!(version, backend = "postgres", "applied storage migration");
        }
        Ok(())
    }

    pub async fn get(&self, scope: &Scope, collection: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let sql = "SELECT value FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4";
        let row = self
            .breaker
            .guard(async {
                Ok::<_, StoreError>(sqlx::query(sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).fetch_optional(&self.pool).await?)
            })
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn get_many(&self, scope: &Scope, fill: ManyFill<'_>, keys: &[(String, String)]) -> Result<Vec<Option<Item>>, StoreError> {
        self.breaker.guard(self.get_many_now(scope, fill, keys)).await
    }

    async fn get_many_now(&self, scope: &Scope, mut fill: ManyFill<'_>, keys: &[(String, String)]) -> Result<Vec<Option<Item>>, StoreError> {
        let sql = format!(
            "SELECT collection, key, value, version FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND (collection, key) IN (VALUES {})",
            fill.values_list('$', 3)
        );
        let mut q = sqlx::query(&sql).bind(&scope.tenant).bind(&scope.plugin);
        for (c, k) in keys {
            q = q.bind(c).bind(k);
        }
        let mut rows = q.fetch(&self.pool);
        while let Some(row) = futures_util::TryStreamExt::try_next(&mut rows).await? {
            let (c, k): (String, String) = (row.get(0), row.get(1));
            fill.offer(&c, &k, Item { value: row.get(2), version: row.get::<i64, _>(3) as u64 })?;
        }
        Ok(fill.finish())
    }

    pub async fn scan_page(&self, scope: &Scope, collection: &str, o: &ScanOptions, fill: PageFill) -> Result<Page, StoreError> {
        self.breaker.guard(self.scan_page_now(scope, collection, o, fill)).await
    }

    async fn scan_page_now(&self, scope: &Scope, collection: &str, o: &ScanOptions, mut fill: PageFill) -> Result<Page, StoreError> {
        if fill.limit() == 0 {
            return Ok(fill.finish());
        }
        let b = bounds(o);
        let sql = format!(
            "SELECT key, value, version FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key {} $4 AND key < $5 ORDER BY key {} LIMIT $6",
            if b.strict { ">" } else { ">=" },
            if o.reverse { "DESC" } else { "ASC" }
        );
        let limit = fill.limit() as i64;
        let mut rows = sqlx::query(&sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(&b.lower).bind(&b.upper).bind(limit).fetch(&self.pool);
        while let Some(row) = futures_util::TryStreamExt::try_next(&mut rows).await? {
            if !fill.offer(row.get(0), Item { value: row.get(1), version: row.get::<i64, _>(2) as u64 })? {
                break;
            }
        }
        Ok(fill.finish())
    }

    pub async fn count(&self, scope: &Scope, collection: &str, prefix: &str) -> Result<u64, StoreError> {
        let upper = format!("{prefix}{PREFIX_END}");
        let sql = "SELECT COUNT(*) FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key >= $4 AND key < $5";
        let row = self
            .breaker
            .guard(async {
                Ok::<_, StoreError>(
                    sqlx::query(sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(prefix).bind(&upper).fetch_one(&self.pool).await?,
                )
            })
            .await?;
        Ok(row.get::<i64, _>(0) as u64)
    }

    /// One transaction, run again when it loses to a concurrent one; with a
    /// fence, only while its lease holds.
    pub async fn commit(&self, scope: &Scope, ops: &[Op], fence: Option<&Fence>) -> Result<Outcome, StoreError> {
        self.breaker.guard(self.commit_now(scope, ops, fence)).await
    }

    async fn commit_now(&self, scope: &Scope, ops: &[Op], fence: Option<&Fence>) -> Result<Outcome, StoreError> {
        let first_condition = ops.iter().position(Op::is_condition);
        let mut attempt = 0;
        loop {
            let result = async {
                let mut tx = self.pool.begin().await?;
                if first_condition.is_some() {
                    sqlx::query("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE").execute(&mut *tx).await?;
                }
                if let Some(fence) = fence {
                    leases::check(&mut tx, fence).await?;
                }
                let version: i64 = sqlx::query_scalar("SELECT nextval('kv_clock')").fetch_one(&mut *tx).await?;
                let outcome = apply(&mut tx, scope, ops, version).await?;
                if matches!(outcome, Outcome::Committed { .. }) {
                    tx.commit().await?;
                }
                Ok::<_, StoreError>(outcome)
            }
            .await;
            // Losing to a concurrent transaction (which serialisable isolation
            // may also report for neighbouring keys) runs the call again:
            // its conditions are checked afresh.
            match result {
                Err(StoreError::Contended(m)) => {
                    attempt += 1;
                    if attempt > RETRIES {
                        return match first_condition {
                            Some(i) => Ok(Outcome::Conflict(i as u32)),
                            None => Err(StoreError::Unavailable(m)),
                        };
                    }
                }
                other => return other,
            }
        }
    }
}

const SELECT_FOR_UPDATE: &str = "SELECT value, version FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4 FOR UPDATE";
const UPSERT: &str = "INSERT INTO plugin_kv (tenant, plugin, collection, key, value, version) VALUES ($1, $2, $3, $4, $5, $6) \
                      ON CONFLICT (tenant, plugin, collection, key) DO UPDATE SET value = excluded.value, version = excluded.version";
const INSERT_NEW: &str = "INSERT INTO plugin_kv (tenant, plugin, collection, key, value, version) VALUES ($1, $2, $3, $4, $5, $6) \
                          ON CONFLICT (tenant, plugin, collection, key) DO NOTHING";
const DELETE: &str = "DELETE FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4";

/// Read one key inside the transaction, locking its row until the end.
async fn read_locked(conn: &mut PgConnection, scope: &Scope, collection: &str, key: &str) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
    let row = sqlx::query(SELECT_FOR_UPDATE).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).fetch_optional(&mut *conn).await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Apply one call's operations at `version` inside the open transaction.
/// Conditions are checked first, so a conflict writes nothing.
async fn apply(conn: &mut PgConnection, scope: &Scope, ops: &[Op], version: i64) -> Result<Outcome, StoreError> {
    for (i, op) in ops.iter().enumerate() {
        let holds = match op {
            Op::ExpectVersion { collection, key, version } => read_locked(conn, scope, collection, key).await?.map_or(0, |(_, v)| v as u64) == *version,
            Op::ExpectValue { collection, key, value } => read_locked(conn, scope, collection, key).await?.map(|(v, _)| v) == *value,
            _ => continue,
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
                let current = read_locked(conn, scope, collection, key).await?.map(|(v, _)| v);
                let next = add_to_counter(current.as_deref(), *delta, key)?;
                // An absent key is inserted only if nobody inserted it
                // meanwhile; otherwise read it again, now locked.
                let sql = if current.is_some() { UPSERT } else { INSERT_NEW };
                let written = sqlx::query(sql)
                    .bind(&scope.tenant)
                    .bind(&scope.plugin)
                    .bind(collection)
                    .bind(key)
                    .bind(next.to_string().into_bytes())
                    .bind(version)
                    .execute(&mut *conn)
                    .await?;
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
