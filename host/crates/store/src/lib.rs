//! Durable storage: SQLite by default (rusqlite, `sqlite`), PostgreSQL by
//! URL (sqlx, `postgres`). Plugins see it through the `store` host import,
//! always scoped to (tenant, plugin); `wit/store.wit` states the consistency
//! model both backends keep, and `conformance` checks it on both.
//!
//! Writes on SQLite go through one writer thread with group commit
//! (`group_commit`), which keeps a read cache (`cache`) current; on PostgreSQL,
//! which other gateways may write too, each write call is its own
//! transaction and every read goes to the database; a cluster singleton's
//! writes also check its lease's fencing token there (`leases`), and the
//! gateways share their compiled plugins there (`artifacts`) and keep the
//! cluster's current rollout (`rollouts`). While PostgreSQL is unreachable,
//! calls fail at once (`breaker`). Either
//! way a key's version comes from one clock per database, ticked once per
//! transaction, so versions never repeat.

mod artifacts;
mod breaker;
mod cache;
mod group_commit;
mod leases;
mod migrations;
mod ops;
mod postgres;
mod rollouts;
mod sqlite;
mod sqlite_ops;

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

pub use self::artifacts::Artifacts;
pub use self::leases::{Fence, Leases};
use self::ops::{check_key, check_ops, over_budget, ManyFill, PageFill, MAX_PAGE};
pub use self::ops::{Item, Op, Outcome};
use self::postgres::Postgres;
pub use self::rollouts::{RolloutLog, RolloutRecord};
use self::sqlite::Sqlite;

#[derive(Clone)]
enum Backend {
    Sqlite(Arc<Sqlite>),
    Postgres(Postgres),
}

/// The gateway's database.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    /// Writes through this handle need the lease this fence holds (a
    /// singleton plugin in a cluster); checked inside each write's transaction.
    fence: Option<Arc<Fence>>,
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
    /// The database cannot be reached (PostgreSQL): a connection failed or
    /// broke, or the breaker refused the call at once; retry after `retry_after`.
    Down {
        why: String,
        retry_after: std::time::Duration,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Invalid(m) => write!(f, "invalid: {m}"),
            StoreError::Unavailable(m) | StoreError::Contended(m) => write!(f, "unavailable: {m}"),
            StoreError::Down { why, retry_after } => write!(f, "unavailable: {why}; retry in {} ms", retry_after.as_millis()),
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
#[derive(Clone)]
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

fn text(key: &str, bytes: Vec<u8>) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|_| StoreError::Invalid(format!("the value of {key} is bytes, not UTF-8 text: read it with get-many or scan-page")))
}

impl Store {
    /// Open `sqlite://PATH` (created if missing) or `postgres://…`, and run migrations.
    /// `sync_full` makes SQLite fsync every commit (survives power loss, not
    /// only a process crash); `cache_bytes` bounds SQLite's read cache (0: none);
    /// `probe` is how often an unreachable PostgreSQL is tried again.
    pub async fn open(url: &str, sync_full: bool, cache_bytes: usize, probe: std::time::Duration) -> anyhow::Result<Store> {
        let backend = if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres(Postgres::open(url, probe).await?)
        } else if url.starts_with("sqlite:") {
            Backend::Sqlite(Arc::new(Sqlite::open(url, sync_full, cache_bytes)?))
        } else {
            anyhow::bail!("storage url must start with sqlite: or postgres: (got {})", map_config::redact_url(url));
        };
        Ok(Store { backend, fence: None })
    }

    /// This database, for a writer whose every write needs `fence`'s lease
    /// (PostgreSQL; on SQLite one process holds every lease).
    pub fn fenced(&self, fence: Arc<Fence>) -> Store {
        Store { backend: self.backend.clone(), fence: Some(fence) }
    }

    /// Report the read cache's bytes when metrics are scraped (SQLite; the
    /// sampler holds the store weakly).
    pub fn sample_cache(&self) {
        if let Backend::Sqlite(db) = &self.backend {
            let weak = Arc::downgrade(db);
            map_observe::metrics::sample_on_scrape(move || {
                if let Some(db) = weak.upgrade() {
                    map_observe::metrics::store_cache(db.cache_bytes());
                }
            });
        }
    }

    /// Singleton leases, when other processes share the database (PostgreSQL).
    pub fn leases(&self) -> Option<Leases> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.leases()),
        }
    }

    /// The clusters' current rollouts (PostgreSQL).
    pub fn rollout_log(&self) -> Option<RolloutLog> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.rollout_log()),
        }
    }

    /// Compiled plugins shared with the other gateways on the database (PostgreSQL).
    pub fn artifacts(&self) -> Option<Artifacts> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.artifacts()),
        }
    }

    /// Whether the database answers a trivial query now (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(db) => db.ping(),
            Backend::Postgres(db) => db.ping().await,
        }
    }

    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// One value as text.
    pub async fn get(&self, scope: &Scope, collection: &str, key: &str) -> Result<Option<String>, StoreError> {
        check_key(collection, key)?;
        let value = match &self.backend {
            Backend::Sqlite(db) => db.get(scope, collection, key)?,
            Backend::Postgres(db) => db.get(scope, collection, key).await?,
        };
        value.map(|v| text(key, v)).transpose()
    }

    /// Several keys in one statement (one snapshot), answered in order. A
    /// result over `max_bytes` fails instead of being buffered.
    pub async fn get_many(&self, scope: &Scope, keys: &[(String, String)], max_bytes: usize) -> Result<Vec<Option<Item>>, StoreError> {
        let fill = ManyFill::new(keys, max_bytes)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let got = async {
            match &self.backend {
                Backend::Sqlite(db) => db.get_many(scope, fill, keys),
                Backend::Postgres(db) => db.get_many(scope, fill, keys).await,
            }
        };
        let got = got.instrument(map_observe::telemetry::store_op("get_many", self.backend_name())).await;
        map_observe::metrics::store_op("get_many", self.backend_name(), started.elapsed());
        got
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
        let started = Instant::now();
        let done = async {
            match &self.backend {
                Backend::Sqlite(db) => db.commit(scope, ops).await,
                Backend::Postgres(db) => db.commit(scope, &ops, self.fence.as_deref()).await,
            }
        };
        let done = done.instrument(map_observe::telemetry::store_op("commit", self.backend_name())).await;
        map_observe::metrics::store_op("commit", self.backend_name(), started.elapsed());
        done
    }

    /// A page of keys in order, bounded by `o.limit` and by `max_bytes` of
    /// keys and values (the first entry is given even if alone it is bigger,
    /// up to `hard_max_bytes`).
    pub async fn scan_page(&self, scope: &Scope, collection: &str, o: &ScanOptions, max_bytes: usize, hard_max_bytes: usize) -> Result<Page, StoreError> {
        check_key(collection, &o.prefix)?;
        let fill = PageFill::new(o.limit, max_bytes, hard_max_bytes);
        let started = Instant::now();
        let page = async {
            match &self.backend {
                Backend::Sqlite(db) => db.scan_page(scope, collection, o, fill),
                Backend::Postgres(db) => db.scan_page(scope, collection, o, fill).await,
            }
        };
        let page = page.instrument(map_observe::telemetry::store_op("scan_page", self.backend_name())).await;
        map_observe::metrics::store_op("scan_page", self.backend_name(), started.elapsed());
        page
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
        match &self.backend {
            Backend::Sqlite(db) => db.count(scope, collection, prefix),
            Backend::Postgres(db) => db.count(scope, collection, prefix).await,
        }
    }
}

/// Hex SHA-256 of some bytes.
pub fn digest_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod conformance;
