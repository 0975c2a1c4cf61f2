//! Durable storage on sqlx: SQLite by default, PostgreSQL by URL. Plugins
//! see it through the `store` host import, always scoped to (tenant, plugin).

mod migrations;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Row;

/// Longest key and value a plugin may store, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
pub const MAX_VALUE_BYTES: usize = 16 << 20;
/// Upper bound of a prefix range; keys may not contain it.
const PREFIX_END: char = '\u{10FFFF}';

#[derive(Clone)]
enum Backend {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The gateway's database.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

/// Which plugin of which tenant a storage call is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    pub tenant: String,
    pub plugin: String,
}

#[derive(Debug)]
pub enum StoreError {
    Invalid(String),
    Unavailable(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Invalid(m) => write!(f, "invalid: {m}"),
            StoreError::Unavailable(m) => write!(f, "unavailable: {m}"),
        }
    }
}

pub struct ScanOptions {
    pub prefix: String,
    pub after: Option<String>,
    pub before: Option<String>,
    pub limit: u32,
    pub reverse: bool,
}

/// One write of an atomic batch (`value: None` deletes).
pub struct Write {
    pub collection: String,
    pub key: String,
    pub value: Option<String>,
}

/// Run the same sqlx expression on whichever pool is configured.
macro_rules! on_pool {
    ($self:expr, $pool:ident => $body:expr) => {
        match &$self.backend {
            Backend::Sqlite($pool) => $body,
            Backend::Postgres($pool) => $body,
        }
    };
}

fn check_key(collection: &str, key: &str) -> Result<(), StoreError> {
    if collection.is_empty() || collection.len() > 128 {
        return Err(StoreError::Invalid("collection names are 1 to 128 bytes".into()));
    }
    if key.len() > MAX_KEY_BYTES || key.contains(PREFIX_END) {
        return Err(StoreError::Invalid(format!("keys are at most {MAX_KEY_BYTES} bytes and may not contain U+10FFFF")));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), StoreError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(StoreError::Invalid(format!("values are at most {MAX_VALUE_BYTES} bytes")));
    }
    Ok(())
}

impl Store {
    /// Open `sqlite://PATH` (created if missing) or `postgres://…`, and run migrations.
    /// `sync_full` makes SQLite fsync every commit (survives power loss, not
    /// only a process crash).
    pub async fn open(url: &str, sync_full: bool) -> anyhow::Result<Store> {
        let backend = if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let pool = PgPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(5))
                .connect(url)
                .await
                .with_context(|| format!("connecting to PostgreSQL at {}", redact(url)))?;
            Backend::Postgres(pool)
        } else if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(if sync_full { SqliteSynchronous::Full } else { SqliteSynchronous::Normal })
                .busy_timeout(Duration::from_secs(5));
            let pool = SqlitePoolOptions::new().max_connections(4).connect_with(opts).await.with_context(|| format!("opening {url}"))?;
            Backend::Sqlite(pool)
        } else {
            anyhow::bail!("storage url must start with sqlite: or postgres: (got {})", redact(url));
        };
        let store = Store { backend };
        store.migrate().await?;
        Ok(store)
    }

    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    async fn migrate(&self) -> anyhow::Result<()> {
        let postgres = matches!(self.backend, Backend::Postgres(_));
        on_pool!(self, pool => {
            sqlx::raw_sql(migrations::CREATE_LEDGER).execute(pool).await?;
            let applied: Vec<i64> = sqlx::query("SELECT version FROM gateway_migrations").fetch_all(pool).await?.iter().map(|r| r.get::<i64, _>(0)).collect();
            for (version, sqlite, pg) in migrations::MIGRATIONS {
                if applied.contains(version) {
                    continue;
                }
                let mut tx = pool.begin().await?;
                sqlx::raw_sql(if postgres { pg } else { sqlite }).execute(&mut *tx).await?;
                sqlx::query("INSERT INTO gateway_migrations (version, applied_at) VALUES ($1, $2)")
                    .bind(*version)
                    .bind(crate::ids::now_ms() as i64)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                tracing::info!(version, backend = self.backend_name(), "applied storage migration");
            }
        });
        Ok(())
    }

    pub async fn get(&self, scope: &Scope, collection: &str, key: &str) -> Result<Option<String>, StoreError> {
        check_key(collection, key)?;
        let sql = "SELECT value FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4";
        let row = on_pool!(self, pool => sqlx::query(sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).fetch_optional(pool).await?.map(|r| r.get::<String, _>(0)));
        Ok(row)
    }

    pub async fn put(&self, scope: &Scope, collection: &str, key: &str, value: &str) -> Result<(), StoreError> {
        self.batch(scope, vec![Write { collection: collection.into(), key: key.into(), value: Some(value.into()) }]).await
    }

    pub async fn delete(&self, scope: &Scope, collection: &str, key: &str) -> Result<bool, StoreError> {
        check_key(collection, key)?;
        let sql = "DELETE FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4";
        let n = on_pool!(self, pool => sqlx::query(sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).execute(pool).await?.rows_affected());
        Ok(n > 0)
    }

    /// Keys in order. Rows are read one at a time, and a result that would
    /// hold more than `max_bytes` of keys and values fails instead of being buffered.
    pub async fn scan(&self, scope: &Scope, collection: &str, o: &ScanOptions, max_bytes: usize) -> Result<Vec<(String, String)>, StoreError> {
        check_key(collection, &o.prefix)?;
        let lower = match &o.after {
            Some(a) if a.as_str() >= o.prefix.as_str() => a.clone(),
            _ => o.prefix.clone(),
        };
        let lower_strict = o.after.as_ref().is_some_and(|a| a.as_str() >= o.prefix.as_str());
        let prefix_end = format!("{}{PREFIX_END}", o.prefix);
        let upper = match &o.before {
            Some(b) if b.as_str() < prefix_end.as_str() => b.clone(),
            _ => prefix_end,
        };
        let sql = format!(
            "SELECT key, value FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key {} $4 AND key < $5 ORDER BY key {} LIMIT $6",
            if lower_strict { ">" } else { ">=" },
            if o.reverse { "DESC" } else { "ASC" }
        );
        let limit = i64::from(o.limit.clamp(1, 1000));
        let mut rows = Vec::new();
        let mut bytes = 0usize;
        on_pool!(self, pool => {
            let mut stream = sqlx::query(&sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(&lower).bind(&upper).bind(limit).fetch(pool);
            while let Some(row) = futures_util::TryStreamExt::try_next(&mut stream).await? {
                let (key, value) = (row.get::<String, _>(0), row.get::<String, _>(1));
                bytes += key.len() + value.len();
                if bytes > max_bytes {
                    return Err(StoreError::Invalid(format!("the scan's result would exceed {max_bytes} bytes (the plugin's memory allowance); ask for fewer entries")));
                }
                rows.push((key, value));
            }
        });
        Ok(rows)
    }

    pub async fn count(&self, scope: &Scope, collection: &str, prefix: &str) -> Result<u64, StoreError> {
        check_key(collection, prefix)?;
        let upper = format!("{prefix}{PREFIX_END}");
        let sql = "SELECT COUNT(*) FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key >= $4 AND key < $5";
        let n: i64 = on_pool!(self, pool => sqlx::query(sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(prefix).bind(&upper).fetch_one(pool).await?.get(0));
        Ok(n as u64)
    }

    /// Apply writes in one transaction.
    pub async fn batch(&self, scope: &Scope, writes: Vec<Write>) -> Result<(), StoreError> {
        for w in &writes {
            check_key(&w.collection, &w.key)?;
            if let Some(v) = &w.value {
                check_value(v)?;
            }
        }
        let upsert = "INSERT INTO plugin_kv (tenant, plugin, collection, key, value) VALUES ($1, $2, $3, $4, $5) \
                      ON CONFLICT (tenant, plugin, collection, key) DO UPDATE SET value = excluded.value";
        let delete = "DELETE FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4";
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            for w in &writes {
                let q = match &w.value {
                    Some(v) => sqlx::query(upsert).bind(&scope.tenant).bind(&scope.plugin).bind(&w.collection).bind(&w.key).bind(v),
                    None => sqlx::query(delete).bind(&scope.tenant).bind(&scope.plugin).bind(&w.collection).bind(&w.key),
                };
                q.execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }
}

/// Hex SHA-256 of some bytes.
pub fn digest_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_scan_over_its_byte_allowance_fails_instead_of_buffering() {
        let dir = std::env::temp_dir().join(format!("map-gateway-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = Store::open(&format!("sqlite://{}", dir.join("t.db").display()), false).await.unwrap();
        let scope = Scope { tenant: "t".into(), plugin: "p".into() };
        for key in ["a", "b", "c"] {
            db.put(&scope, "big", key, &"v".repeat(1000)).await.unwrap();
        }
        let all = ScanOptions { prefix: String::new(), after: None, before: None, limit: 100, reverse: false };
        assert_eq!(db.scan(&scope, "big", &all, 10_000).await.unwrap().len(), 3);
        match db.scan(&scope, "big", &all, 1_500).await {
            Err(StoreError::Invalid(m)) => assert!(m.contains("1500 bytes"), "{m}"),
            other => panic!("expected a refusal, got {:?}", other.map(|rows| rows.len())),
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
