//! Durable storage on sqlx: SQLite by default, PostgreSQL by URL. Plugins
//! see it through the `store` host import, always scoped to (tenant, plugin);
//! `wit/store.wit` states the consistency model this module keeps.
//!
//! Writes on SQLite go through one writer with group commit (`writer`); on
//! PostgreSQL each write call is its own transaction, serialisable when it
//! carries conditions. Either way a key's version comes from one clock per
//! database, ticked once per transaction, so versions never repeat.

mod apply;
mod migrations;
mod ops;
mod writer;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Row};

use self::apply::apply_postgres;
pub use self::ops::{Item, Op, Outcome};
use self::ops::{check_key, check_ops, MAX_KEYS, MAX_PAGE, PREFIX_END};
use self::writer::Writer;

#[derive(Clone)]
enum Backend {
    Sqlite { readers: SqlitePool, writer: Writer },
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
    /// A concurrent transaction touched the same keys (PostgreSQL); the
    /// commit is retried or answered as a conflict, never shown as is.
    Contended(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        // Serialisation failure and deadlock: another transaction won.
        let contended = matches!(&e, sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("40001") | Some("40P01")));
        if contended {
            StoreError::Contended(e.to_string())
        } else {
            StoreError::Unavailable(e.to_string())
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Invalid(m) => write!(f, "invalid: {m}"),
            StoreError::Unavailable(m) | StoreError::Contended(m) => write!(f, "unavailable: {m}"),
        }
    }
}

/// Which keys of a collection a scan returns.
pub struct ScanOptions {
    pub prefix: String,
    pub after: Option<String>,
    pub before: Option<String>,
    pub limit: u32,
    pub reverse: bool,
}

/// One page of a range, and where to read on (when it may hold more).
pub struct Page {
    pub entries: Vec<(String, Item)>,
    pub next: Option<String>,
}

/// One write of an atomic batch (`value: None` deletes).
pub struct Write {
    pub collection: String,
    pub key: String,
    pub value: Option<String>,
}

/// Run the same sqlx expression on whichever pool serves reads.
macro_rules! on_readers {
    ($self:expr, $pool:ident => $body:expr) => {
        match &$self.backend {
            Backend::Sqlite { readers: $pool, .. } => $body,
            Backend::Postgres($pool) => $body,
        }
    };
}

fn text(key: &str, bytes: Vec<u8>) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|_| StoreError::Invalid(format!("the value of {key} is bytes, not UTF-8 text: read it with get-many or scan-page")))
}

fn over_budget(max_bytes: usize) -> StoreError {
    StoreError::Invalid(format!("the result would exceed {max_bytes} bytes (the plugin's memory allowance); ask for fewer entries"))
}

impl Store {
    /// Open `sqlite://PATH` (created if missing) or `postgres://…`, and run migrations.
    /// `sync_full` makes SQLite fsync every commit (survives power loss, not
    /// only a process crash).
    pub async fn open(url: &str, sync_full: bool) -> anyhow::Result<Store> {
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let pool = PgPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(5))
                .connect(url)
                .await
                .with_context(|| format!("connecting to PostgreSQL at {}", redact(url)))?;
            let store = Store { backend: Backend::Postgres(pool) };
            store.migrate().await?;
            Ok(store)
        } else if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(if sync_full { SqliteSynchronous::Full } else { SqliteSynchronous::Normal })
                .busy_timeout(Duration::from_secs(5))
                // Rows a reader may hold ahead of the scan consuming them (values reach 16 MiB).
                .row_buffer_size(4);
            let readers = SqlitePoolOptions::new().max_connections(4).connect_with(opts.clone()).await.with_context(|| format!("opening {url}"))?;
            let conn = opts.connect().await.with_context(|| format!("opening {url}"))?;
            let store = Store { backend: Backend::Sqlite { readers, writer: Writer::start(conn) } };
            store.migrate().await?;
            Ok(store)
        } else {
            anyhow::bail!("storage url must start with sqlite: or postgres: (got {})", redact(url));
        }
    }

    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    async fn migrate(&self) -> anyhow::Result<()> {
        let postgres = matches!(self.backend, Backend::Postgres(_));
        on_readers!(self, pool => {
            let mut tx = pool.begin().await?;
            if postgres {
                // Gateways starting together on one database migrate one at a time.
                sqlx::query(migrations::LOCK_POSTGRES).execute(&mut *tx).await?;
            }
            sqlx::raw_sql(migrations::CREATE_LEDGER).execute(&mut *tx).await?;
            tx.commit().await?;
            for (version, sqlite, pg) in migrations::MIGRATIONS {
                let mut tx = pool.begin().await?;
                if postgres {
                    sqlx::query(migrations::LOCK_POSTGRES).execute(&mut *tx).await?;
                }
                let done = sqlx::query("SELECT 1 FROM gateway_migrations WHERE version = $1").bind(*version).fetch_optional(&mut *tx).await?.is_some();
                if done {
                    continue;
                }
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

    /// One value as text.
    pub async fn get(&self, scope: &Scope, collection: &str, key: &str) -> Result<Option<String>, StoreError> {
        check_key(collection, key)?;
        let sql = "SELECT value FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key = $4";
        let value: Option<Vec<u8>> = on_readers!(self, pool => sqlx::query(sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(key).fetch_optional(pool).await?.map(|r| r.get(0)));
        value.map(|v| text(key, v)).transpose()
    }

    /// Several keys in one statement (one snapshot), answered in order. A
    /// result over `max_bytes` fails instead of being buffered.
    pub async fn get_many(&self, scope: &Scope, keys: &[(String, String)], max_bytes: usize) -> Result<Vec<Option<Item>>, StoreError> {
        if keys.len() > MAX_KEYS {
            return Err(StoreError::Invalid(format!("get-many reads at most {MAX_KEYS} keys (got {})", keys.len())));
        }
        for (c, k) in keys {
            check_key(c, k)?;
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pairs: Vec<String> = (0..keys.len()).map(|i| format!("(${}, ${})", 3 + 2 * i, 4 + 2 * i)).collect();
        let sql = format!(
            "SELECT collection, key, value, version FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND (collection, key) IN (VALUES {})",
            pairs.join(", ")
        );
        let mut found: Vec<Option<Item>> = vec![None; keys.len()];
        let mut bytes = 0usize;
        on_readers!(self, pool => {
            let mut q = sqlx::query(&sql).bind(&scope.tenant).bind(&scope.plugin);
            for (c, k) in keys {
                q = q.bind(c).bind(k);
            }
            let mut rows = q.fetch(pool);
            while let Some(row) = futures_util::TryStreamExt::try_next(&mut rows).await? {
                let (c, k): (String, String) = (row.get(0), row.get(1));
                let item = Item { value: row.get(2), version: row.get::<i64, _>(3) as u64 };
                // Every position asking for this key (a key may be asked twice).
                for (i, _) in keys.iter().enumerate().filter(|(_, (kc, kk))| *kc == c && *kk == k) {
                    bytes += item.value.len() + k.len();
                    if bytes > max_bytes {
                        return Err(over_budget(max_bytes));
                    }
                    found[i] = Some(item.clone());
                }
            }
        });
        Ok(found)
    }

    pub async fn put(&self, scope: &Scope, collection: &str, key: &str, value: &str) -> Result<(), StoreError> {
        self.commit(scope, vec![Op::Put { collection: collection.into(), key: key.into(), value: value.as_bytes().to_vec() }]).await.map(drop)
    }

    pub async fn delete(&self, scope: &Scope, collection: &str, key: &str) -> Result<bool, StoreError> {
        match self.commit(scope, vec![Op::Delete { collection: collection.into(), key: key.into() }]).await? {
            Outcome::Committed { deleted, .. } => Ok(deleted > 0),
            Outcome::Conflict(_) => Err(StoreError::Unavailable("the delete conflicted with a concurrent write; retry".into())),
        }
    }

    /// Apply writes in one transaction.
    pub async fn batch(&self, scope: &Scope, writes: Vec<Write>) -> Result<(), StoreError> {
        let ops = writes
            .into_iter()
            .map(|w| match w.value {
                Some(v) => Op::Put { collection: w.collection, key: w.key, value: v.into_bytes() },
                None => Op::Delete { collection: w.collection, key: w.key },
            })
            .collect();
        self.commit(scope, ops).await.map(drop)
    }

    /// Apply operations atomically once every condition holds; answered only
    /// after the transaction committed.
    pub async fn commit(&self, scope: &Scope, ops: Vec<Op>) -> Result<Outcome, StoreError> {
        check_ops(&ops)?;
        if ops.is_empty() {
            return Ok(Outcome::Committed { version: 0, counters: Vec::new(), deleted: 0 });
        }
        match &self.backend {
            Backend::Sqlite { writer, .. } => writer.commit(scope, ops).await,
            Backend::Postgres(pool) => commit_postgres(pool, scope, &ops).await,
        }
    }

    /// A page of keys in order, bounded by `o.limit` and by `max_bytes` of
    /// keys and values (the first entry is given even if alone it is bigger,
    /// up to `hard_max_bytes`).
    pub async fn scan_page(&self, scope: &Scope, collection: &str, o: &ScanOptions, max_bytes: usize, hard_max_bytes: usize) -> Result<Page, StoreError> {
        check_key(collection, &o.prefix)?;
        let limit = o.limit.min(MAX_PAGE);
        if limit == 0 {
            return Ok(Page { entries: Vec::new(), next: None });
        }
        let lower_strict = o.after.as_ref().is_some_and(|a| a.as_str() >= o.prefix.as_str());
        let lower = if lower_strict { o.after.clone().unwrap_or_default() } else { o.prefix.clone() };
        let prefix_end = format!("{}{PREFIX_END}", o.prefix);
        let upper = match &o.before {
            Some(b) if b.as_str() < prefix_end.as_str() => b.clone(),
            _ => prefix_end,
        };
        let sql = format!(
            "SELECT key, value, version FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key {} $4 AND key < $5 ORDER BY key {} LIMIT $6",
            if lower_strict { ">" } else { ">=" },
            if o.reverse { "DESC" } else { "ASC" }
        );
        let mut entries: Vec<(String, Item)> = Vec::new();
        let mut bytes = 0usize;
        let mut cut = false;
        on_readers!(self, pool => {
            let mut rows = sqlx::query(&sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(&lower).bind(&upper).bind(i64::from(limit)).fetch(pool);
            while let Some(row) = futures_util::TryStreamExt::try_next(&mut rows).await? {
                let key: String = row.get(0);
                let item = Item { value: row.get(1), version: row.get::<i64, _>(2) as u64 };
                let size = key.len() + item.value.len();
                if entries.is_empty() && size > hard_max_bytes {
                    return Err(over_budget(hard_max_bytes));
                }
                if !entries.is_empty() && bytes + size > max_bytes {
                    cut = true;
                    break;
                }
                bytes += size;
                entries.push((key, item));
            }
        });
        let full = cut || entries.len() == limit as usize;
        let next = if full { entries.last().map(|(k, _)| k.clone()) } else { None };
        Ok(Page { entries, next })
    }

    /// Keys in order, values as text. A result that would hold more than
    /// `max_bytes` of keys and values fails instead of being buffered.
    pub async fn scan(&self, scope: &Scope, collection: &str, o: &ScanOptions, max_bytes: usize) -> Result<Vec<(String, String)>, StoreError> {
        let page = self.scan_page(scope, collection, o, max_bytes, max_bytes).await?;
        if page.entries.len() < o.limit.min(MAX_PAGE) as usize && page.next.is_some() {
            return Err(over_budget(max_bytes));
        }
        page.entries.into_iter().map(|(k, item)| text(&k, item.value).map(|v| (k, v))).collect()
    }

    pub async fn count(&self, scope: &Scope, collection: &str, prefix: &str) -> Result<u64, StoreError> {
        check_key(collection, prefix)?;
        let upper = format!("{prefix}{PREFIX_END}");
        let sql = "SELECT COUNT(*) FROM plugin_kv WHERE tenant = $1 AND plugin = $2 AND collection = $3 AND key >= $4 AND key < $5";
        let n: i64 = on_readers!(self, pool => sqlx::query(sql).bind(&scope.tenant).bind(&scope.plugin).bind(collection).bind(prefix).bind(&upper).fetch_one(pool).await?.get(0));
        Ok(n as u64)
    }
}

/// Times an unconditional commit is retried after losing to a concurrent one.
const RETRIES: usize = 5;

/// One PostgreSQL transaction; serialisable when it carries conditions, so
/// a condition cannot be invalidated between its check and the commit.
async fn commit_postgres(pool: &PgPool, scope: &Scope, ops: &[Op]) -> Result<Outcome, StoreError> {
    let first_condition = ops.iter().position(Op::is_condition);
    let mut attempt = 0;
    loop {
        let result = async {
            let mut tx = pool.begin().await?;
            if first_condition.is_some() {
                sqlx::query("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE").execute(&mut *tx).await?;
            }
            let version: i64 = sqlx::query_scalar("SELECT nextval('kv_clock')").fetch_one(&mut *tx).await?;
            let outcome = apply_postgres(&mut tx, scope, ops, version).await?;
            if matches!(outcome, Outcome::Committed { .. }) {
                tx.commit().await?;
            }
            Ok::<_, StoreError>(outcome)
        }
        .await;
        match (result, first_condition) {
            (Err(StoreError::Contended(_)), Some(i)) => return Ok(Outcome::Conflict(i as u32)),
            (Err(StoreError::Contended(m)), None) => {
                attempt += 1;
                if attempt > RETRIES {
                    return Err(StoreError::Unavailable(m));
                }
            }
            (other, _) => return other,
        }
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
mod conformance;
