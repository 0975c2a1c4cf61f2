//! Leases of singleton plugins (PostgreSQL): one holder per (tenant,
//! plugin) at a time, chosen by the database, with a fencing token that
//! grows at every takeover. Expiry is measured by the database's clock, so
//! the nodes' clocks need not agree. A write of a fenced plugin carries its
//! token, and the transaction that writes checks it (`check`): a holder
//! that lost the lease cannot write, even if it has not noticed yet.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPool};

use super::breaker::Breaker;
use super::StoreError;

/// Who may write for a (tenant, plugin): this node, while it holds the
/// lease with `token` (0: it holds none, so its writes are refused).
#[derive(Debug)]
pub struct Fence {
    pub tenant: String,
    pub plugin: String,
    pub holder: String,
    token: AtomicI64,
}

impl Fence {
    pub fn new(tenant: &str, plugin: &str, holder: &str) -> Fence {
        Fence { tenant: tenant.into(), plugin: plugin.into(), holder: holder.into(), token: AtomicI64::new(0) }
    }

    /// The token of the lease held now, if any.
    pub fn token(&self) -> Option<i64> {
        Some(self.token.load(Ordering::Acquire)).filter(|t| *t > 0)
    }

    pub fn hold(&self, token: i64) {
        self.token.store(token, Ordering::Release);
    }

    pub fn drop_lease(&self) {
        self.token.store(0, Ordering::Release);
    }

    fn refused(&self) -> StoreError {
        StoreError::Unavailable(format!(
            "this node no longer holds the lease of plugin {} for tenant {}: another node owns it, and only the owner writes",
            self.plugin, self.tenant
        ))
    }
}

/// Inside a write's transaction: the lease is still this holder's with this
/// token, and stays so until the commit (the row is share-locked, so a
/// takeover waits for the write, and a write after a takeover fails).
pub async fn check(conn: &mut PgConnection, fence: &Fence) -> Result<(), StoreError> {
    let Some(token) = fence.token() else { return Err(fence.refused()) };
    let sql = "SELECT 1 FROM plugin_leases WHERE tenant = $1 AND plugin = $2 AND holder = $3 AND token = $4 FOR SHARE";
    let held = sqlx::query(sql).bind(&fence.tenant).bind(&fence.plugin).bind(&fence.holder).bind(token).fetch_optional(&mut *conn).await?;
    match held {
        Some(_) => Ok(()),
        None => Err(fence.refused()),
    }
}

/// The lease operations on one database.
#[derive(Clone)]
pub struct Leases {
    pub(super) pool: PgPool,
    pub(super) breaker: Arc<Breaker>,
}

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

impl Leases {
    /// Take the lease if it is free, expired, or already this holder's
    /// (a node restarted under its name): the new token. `None`: another
    /// holder has it.
    pub async fn acquire(&self, fence: &Fence, ttl: Duration) -> Result<Option<i64>, StoreError> {
        let sql = "INSERT INTO plugin_leases (tenant, plugin, holder, token, expires_at) \
                   VALUES ($1, $2, $3, 1, clock_timestamp() + $4 * interval '1 millisecond') \
                   ON CONFLICT (tenant, plugin) DO UPDATE SET holder = excluded.holder, token = plugin_leases.token + 1, expires_at = excluded.expires_at \
                   WHERE plugin_leases.expires_at < clock_timestamp() OR plugin_leases.holder = excluded.holder \
                   RETURNING token";
        let token = sqlx::query_scalar::<_, i64>(sql).bind(&fence.tenant).bind(&fence.plugin).bind(&fence.holder).bind(millis(ttl)).fetch_optional(&self.pool);
        self.breaker.guard(async { Ok::<_, StoreError>(token.await?) }).await
    }

    /// Extend the lease this holder has with this token; `false`: it is lost.
    pub async fn renew(&self, fence: &Fence, token: i64, ttl: Duration) -> Result<bool, StoreError> {
        let sql = "UPDATE plugin_leases SET expires_at = clock_timestamp() + $5 * interval '1 millisecond' \
                   WHERE tenant = $1 AND plugin = $2 AND holder = $3 AND token = $4";
        let done = sqlx::query(sql).bind(&fence.tenant).bind(&fence.plugin).bind(&fence.holder).bind(token).bind(millis(ttl)).execute(&self.pool);
        Ok(self.breaker.guard(async { Ok::<_, StoreError>(done.await?) }).await?.rows_affected() == 1)
    }

    /// Give the lease up (a graceful stop): another node may take it at once.
    pub async fn release(&self, fence: &Fence, token: i64) -> Result<(), StoreError> {
        let sql = "UPDATE plugin_leases SET expires_at = clock_timestamp() - interval '1 millisecond' \
                   WHERE tenant = $1 AND plugin = $2 AND holder = $3 AND token = $4";
        let done = sqlx::query(sql).bind(&fence.tenant).bind(&fence.plugin).bind(&fence.holder).bind(token).execute(&self.pool);
        self.breaker.guard(async { Ok::<_, StoreError>(done.await.map(drop)?) }).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::Fence;
    use crate::{Op, Scope, Store};

    async fn postgres() -> Store {
        let url = std::env::var("MAP_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into());
        Store::open(&url, false, 0, Duration::from_millis(10)).await.unwrap_or_else(|e| panic!("PostgreSQL is required for the lease tests ({url}): {e:#}"))
    }

    fn put(key: &str) -> Vec<Op> {
        vec![Op::Put { collection: "c".into(), key: key.into(), value: b"v".to_vec() }]
    }

    /// Node a holds the lease and writes; it stalls past the lease's end,
    /// node b takes over, and a's writes (with its old token) are refused
    /// while b's go through.
    #[tokio::test]
    async fn a_fenced_out_holder_cannot_write() {
        let db = postgres().await;
        let leases = db.leases().expect("PostgreSQL has leases");
        let tenant = format!("lease-{}-{}", std::process::id(), map_protocol::ids::now_ms());
        let scope = Scope { tenant: tenant.clone(), plugin: "hub".into() };
        let (a, b) = (Arc::new(Fence::new(&tenant, "hub", "node-a")), Arc::new(Fence::new(&tenant, "hub", "node-b")));
        let ttl = Duration::from_millis(300);
        let (as_a, as_b) = (db.fenced(a.clone()), db.fenced(b.clone()));
        assert!(as_a.commit(&scope, put("before")).await.is_err(), "no lease yet: no write");
        let first = leases.acquire(&a, ttl).await.unwrap().expect("a free lease is taken");
        a.hold(first);
        assert_eq!(leases.acquire(&b, ttl).await.unwrap(), None, "a holds it");
        as_a.commit(&scope, put("a1")).await.expect("the holder writes");
        // a stops renewing; b takes the lease once it has expired.
        let deadline = Instant::now() + Duration::from_secs(10);
        let second = loop {
            if let Some(t) = leases.acquire(&b, ttl).await.unwrap() {
                break t;
            }
            assert!(Instant::now() < deadline, "b never took the expired lease");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        b.hold(second);
        assert!(second > first, "the token grows at a takeover ({first} → {second})");
        let refused = as_a.commit(&scope, put("a2")).await.expect_err("a's token is stale");
        assert!(refused.to_string().contains("no longer holds the lease"), "{refused}");
        assert!(!leases.renew(&a, first, ttl).await.unwrap(), "a cannot renew a lease it lost");
        as_b.commit(&scope, put("b1")).await.expect("the new holder writes");
        assert_eq!(db.get(&scope, "c", "a2").await.unwrap(), None, "nothing of the refused write is kept");
        assert!(db.get(&scope, "c", "a1").await.unwrap().is_some() && db.get(&scope, "c", "b1").await.unwrap().is_some());
        // A graceful stop gives the lease up at once.
        leases.release(&b, second).await.unwrap();
        let third = leases.acquire(&a, ttl).await.unwrap().expect("a released lease is free");
        assert!(third > second);
    }
}
