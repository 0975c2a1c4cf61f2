//! SQLite through rusqlite, called in place: a read runs on the calling
//! thread on a pooled connection (a point read costs microseconds, less
//! than handing it to another thread and back), and writes go to the one
//! writer thread (`group_commit`), which commits them in groups. WAL mode lets the
//! readers run beside the writer and see each commit as soon as it is made.
//! Reads are served from `cache` when it holds every key (or the page) asked for.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::cache::{push_part, Cache, Lookup};
use super::group_commit::GroupCommit;
use super::migrations;
use super::ops::{bounds, ManyFill, Op, Outcome, PageFill, PREFIX_END};
use super::{Item, Page, ScanOptions, Scope, StoreError};

/// Idle read connections kept for reuse.
const IDLE_READERS: usize = 8;
/// WAL pages after which the writer checkpoints itself (64 MiB).
const WRITER_CHECKPOINT_PAGES: i64 = 16384;
/// Prepared statements cached per connection.
const STATEMENTS: usize = 128;

pub struct Sqlite {
    path: PathBuf,
    sync_full: bool,
    readers: Mutex<Vec<Connection>>,
    cache: Arc<Cache>,
    writer: GroupCommit,
}

/// A connection with the gateway's settings.
fn connect(path: &PathBuf, sync_full: bool) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", if sync_full { "FULL" } else { "NORMAL" })?;
    // Plans that never depend on bound values: otherwise binding a new
    // LIMIT or key re-prepares the cached statement on every call.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.set_prepared_statement_cache_capacity(STATEMENTS);
    Ok(conn)
}

impl Sqlite {
    /// Open `sqlite://PATH` (created if missing) and migrate it.
    pub fn open(url: &str, sync_full: bool, cache_bytes: usize) -> anyhow::Result<Sqlite> {
        let path = PathBuf::from(url.trim_start_matches("sqlite:").trim_start_matches("//"));
        let mut conn = connect(&path, sync_full).with_context(|| format!("opening {url}"))?;
        migrate(&mut conn).with_context(|| format!("migrating {url}"))?;
        // The checkpoint thread copies the WAL after commits; the writer
        // does it only if that falls far behind.
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        let checkpoints = connect(&path, sync_full)?;
        let cache = Arc::new(Cache::new(cache_bytes));
        let writer = GroupCommit::start(conn, checkpoints, cache.clone())?;
        Ok(Sqlite { path, sync_full, readers: Mutex::new(Vec::new()), writer, cache })
    }

    /// Apply `ops` atomically through the writer thread; answers once durable.
    pub async fn commit(&self, scope: &Scope, ops: Vec<Op>) -> Result<Outcome, StoreError> {
        self.writer.commit(scope, ops).await
    }

    /// Bytes the read cache holds now.
    pub fn cache_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// A trivial query on a reader connection (not through the cache).
    pub fn ping(&self) -> Result<(), StoreError> {
        self.read(|conn| Ok(conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)).map(|_| ())?))
    }

    /// Run `read` on an idle connection (a new one when all are busy).
    fn read<T>(&self, read: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let idle = self.readers.lock().pop();
        let conn = match idle {
            Some(c) => c,
            None => connect(&self.path, self.sync_full)?,
        };
        let result = read(&conn);
        let mut idle = self.readers.lock();
        if idle.len() < IDLE_READERS {
            idle.push(conn);
        }
        result
    }

    pub fn get(&self, scope: &Scope, collection: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let keys = [(collection.to_string(), key.to_string())];
        let fill = ManyFill::new(&keys, usize::MAX)?;
        Ok(self.get_many(scope, fill, &keys)?.pop().flatten().map(|i| i.value))
    }

    pub fn get_many(&self, scope: &Scope, mut fill: ManyFill<'_>, keys: &[(String, String)]) -> Result<Vec<Option<Item>>, StoreError> {
        let generation = match self.cache.lookup(scope, keys) {
            Lookup::Hit(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    if let Some(item) = item {
                        fill.place(i, item)?;
                    }
                }
                return Ok(fill.finish());
            }
            Lookup::Miss(generation) => generation,
        };
        self.read(|conn| {
            let sql = format!(
                "SELECT collection, key, value, version FROM plugin_kv WHERE tenant = ?1 AND plugin = ?2 AND (collection, key) IN (VALUES {})",
                fill.values_list('?', 3)
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut args: Vec<&dyn rusqlite::ToSql> = vec![&scope.tenant, &scope.plugin];
            for (c, k) in keys {
                args.push(c);
                args.push(k);
            }
            let mut rows = stmt.query(args.as_slice())?;
            while let Some(row) = rows.next()? {
                let (c, k): (String, String) = (row.get(0)?, row.get(1)?);
                fill.offer(&c, &k, Item { value: row.get(2)?, version: row.get::<_, i64>(3)? as u64 })?;
            }
            Ok(())
        })?;
        let found = fill.finish();
        self.cache.fill(generation, scope, keys, &found);
        Ok(found)
    }

    pub fn scan_page(&self, scope: &Scope, collection: &str, o: &ScanOptions, mut fill: PageFill) -> Result<Page, StoreError> {
        if fill.limit() == 0 {
            return Ok(fill.finish());
        }
        let mut request = String::with_capacity(o.prefix.len() + 64);
        for part in [Some(&o.prefix), o.after.as_ref(), o.before.as_ref()] {
            // An absent bound is a part of its own, unlike an empty one.
            match part {
                Some(p) => push_part(&mut request, p),
                None => request.push('-'),
            }
        }
        request.push(if o.reverse { 'r' } else { 'f' });
        request.push_str(&fill.shape());
        let generation = match self.cache.page(scope, collection, &request) {
            Lookup::Hit(page) => return Ok(page),
            Lookup::Miss(generation) => generation,
        };
        let b = bounds(o);
        let sql = format!(
            "SELECT key, value, version FROM plugin_kv WHERE tenant = ?1 AND plugin = ?2 AND collection = ?3 AND key {} ?4 AND key < ?5 ORDER BY key {} LIMIT ?6",
            if b.strict { ">" } else { ">=" },
            if o.reverse { "DESC" } else { "ASC" }
        );
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            // Rows come one at a time, so nothing past the page is read.
            let mut rows = stmt.query(params![scope.tenant, scope.plugin, collection, b.lower, b.upper, fill.limit() as i64])?;
            while let Some(row) = rows.next()? {
                if !fill.offer(row.get(0)?, Item { value: row.get(1)?, version: row.get::<_, i64>(2)? as u64 })? {
                    break;
                }
            }
            Ok(())
        })?;
        let page = fill.finish();
        self.cache.fill_page(generation, scope, collection, &request, (&b.lower, &b.upper), &page);
        Ok(page)
    }

    pub fn count(&self, scope: &Scope, collection: &str, prefix: &str) -> Result<u64, StoreError> {
        let upper = format!("{prefix}{PREFIX_END}");
        self.read(|conn| {
            let sql = "SELECT COUNT(*) FROM plugin_kv WHERE tenant = ?1 AND plugin = ?2 AND collection = ?3 AND key >= ?4 AND key < ?5";
            let n: i64 = conn.prepare_cached(sql)?.query_row(params![scope.tenant, scope.plugin, collection, prefix, upper], |r| r.get(0))?;
            Ok(n as u64)
        })
    }
}

fn migrate(conn: &mut Connection) -> anyhow::Result<()> {
    conn.execute_batch(migrations::CREATE_LEDGER)?;
    for (version, sqlite, _) in migrations::MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let done = tx.query_row("SELECT 1 FROM gateway_migrations WHERE version = ?1", [version], |_| Ok(())).optional()?.is_some();
        if done {
            continue;
        }
        tx.execute_batch(sqlite)?;
        tx.execute("INSERT INTO gateway_migrations (version, applied_at) VALUES (?1, ?2)", params![version, map_protocol::ids::now_ms() as i64])?;
        tx.commit()?;
        tracing::info!(version, backend = "sqlite", "applied storage migration");
    }
    Ok(())
}
