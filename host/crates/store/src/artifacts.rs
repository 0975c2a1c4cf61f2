//! Compiled plugins shared by the gateways of one PostgreSQL database, so
//! that a cluster compiles a component once, not once per node. A row is
//! keyed like the disk cache: by the component's bytes and the engine's
//! compatibility hash together. One node at a time compiles a key: it holds
//! a transaction-scoped advisory lock on the key while it compiles, and the
//! others wait for that lock, then read the row it wrote.
//!
//! Rows are bounded per plugin name: the `KEEP_PER_PLUGIN` most recently
//! used stay. Deleting a row costs at most a compile later (a node that runs
//! its version has it in memory and in its disk cache), so a version that
//! another node still runs for a while may lose its row safely.

use std::time::Duration;

use sqlx::postgres::PgPool;
use sqlx::{Postgres, Transaction};

use super::StoreError;

/// Rows kept per plugin: the version that runs, the one before it (nodes
/// change over one by one), and one for another gateway build (another
/// engine) while the nodes are upgraded.
pub const KEEP_PER_PLUGIN: i64 = 3;

/// The shared artifacts of one database.
#[derive(Clone)]
pub struct Artifacts {
    pub(super) pool: PgPool,
}

/// The turn to compile one key: no other node compiles it (or waits past
/// its turn) until `publish` commits the artifact or this is dropped.
pub struct CompileTurn {
    tx: Transaction<'static, Postgres>,
    key: String,
}

/// The advisory lock's number for a key (a hex digest): its first 64 bits.
fn lock_id(key: &str) -> i64 {
    u64::from_str_radix(key.get(..16).unwrap_or(key), 16).unwrap_or(0) as i64
}

impl Artifacts {
    /// The artifact stored under `key`, marked as used now.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let sql = "UPDATE plugin_artifacts SET used_at = clock_timestamp() WHERE key = $1 RETURNING artifact";
        Ok(sqlx::query_scalar(sql).bind(key).fetch_optional(&self.pool).await?)
    }

    /// Wait, at most `wait`, for the turn to compile `key`. Past that the
    /// database answers with an error (`lock_timeout`) and the caller
    /// compiles on its own.
    pub async fn turn(&self, key: &str, wait: Duration) -> Result<CompileTurn, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Local to this transaction; it bounds the advisory lock's wait too.
        sqlx::query("SELECT set_config('lock_timeout', $1, true)").bind(format!("{}ms", wait.as_millis().max(1))).execute(&mut *tx).await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(lock_id(key)).execute(&mut *tx).await?;
        Ok(CompileTurn { tx, key: key.to_string() })
    }
}

impl CompileTurn {
    /// The artifact, if a node that had the turn before stored it.
    pub async fn stored(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        let sql = "SELECT artifact FROM plugin_artifacts WHERE key = $1";
        Ok(sqlx::query_scalar(sql).bind(&self.key).fetch_optional(&mut *self.tx).await?)
    }

    /// Store the artifact of plugin `name` (component digest `digest`),
    /// replacing one that did not load; drop the plugin's older rows beyond
    /// `KEEP_PER_PLUGIN`; end the turn.
    pub async fn publish(mut self, name: &str, digest: &str, artifact: &[u8]) -> Result<(), StoreError> {
        let insert = "INSERT INTO plugin_artifacts (key, plugin, digest, artifact, created_at, used_at) \
                      VALUES ($1, $2, $3, $4, clock_timestamp(), clock_timestamp()) \
                      ON CONFLICT (key) DO UPDATE SET plugin = excluded.plugin, artifact = excluded.artifact, used_at = excluded.used_at";
        sqlx::query(insert).bind(&self.key).bind(name).bind(digest).bind(artifact).execute(&mut *self.tx).await?;
        let prune = "DELETE FROM plugin_artifacts WHERE plugin = $1 AND key NOT IN \
                     (SELECT key FROM plugin_artifacts WHERE plugin = $1 ORDER BY used_at DESC, key LIMIT $2)";
        sqlx::query(prune).bind(name).bind(KEEP_PER_PLUGIN).execute(&mut *self.tx).await?;
        self.tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Store;

    async fn postgres() -> Store {
        let url = std::env::var("MAP_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into());
        Store::open(&url, false, 0, Duration::from_millis(10)).await.unwrap_or_else(|e| panic!("PostgreSQL is required for the artifact tests ({url}): {e:#}"))
    }

    fn key(n: u8) -> String {
        crate::digest_hex(format!("{}-{}-{n}", std::process::id(), map_protocol::ids::ulid()).as_bytes())
    }

    /// While one node has the turn for a key, another waits (here past its
    /// bound, so it is refused); once the first publishes, the row is there.
    #[tokio::test]
    async fn one_turn_per_key_and_the_row_follows_it() {
        let artifacts = postgres().await.artifacts().expect("PostgreSQL shares artifacts");
        let (k, plugin) = (key(0), format!("p-{}", map_protocol::ids::ulid()));
        assert_eq!(artifacts.get(&k).await.unwrap(), None);
        let mut first = artifacts.turn(&k, Duration::from_secs(5)).await.unwrap();
        assert_eq!(first.stored().await.unwrap(), None);
        let refused = artifacts.turn(&k, Duration::from_millis(200)).await;
        assert!(refused.is_err(), "a second turn while the first is held");
        let other = artifacts.turn(&key(1), Duration::from_millis(200)).await;
        assert!(other.is_ok(), "another key has a turn of its own");
        drop(other);
        first.publish(&plugin, "d0", b"compiled").await.unwrap();
        let mut second = artifacts.turn(&k, Duration::from_secs(5)).await.expect("the turn is free again");
        assert_eq!(second.stored().await.unwrap().as_deref(), Some(&b"compiled"[..]));
        assert_eq!(artifacts.get(&k).await.unwrap().as_deref(), Some(&b"compiled"[..]));
    }

    /// A plugin keeps its most recently used rows; using an old one keeps it.
    #[tokio::test]
    async fn a_plugin_keeps_its_most_recently_used_artifacts() {
        let artifacts = postgres().await.artifacts().expect("PostgreSQL shares artifacts");
        let plugin = format!("p-{}", map_protocol::ids::ulid());
        let keys: Vec<String> = (0..5).map(key).collect();
        for (i, k) in keys.iter().enumerate() {
            if i == 3 {
                // The first version is used again (a node restarted on it).
                assert!(artifacts.get(&keys[0]).await.unwrap().is_some());
            }
            artifacts.turn(k, Duration::from_secs(5)).await.unwrap().publish(&plugin, &format!("d{i}"), k.as_bytes()).await.unwrap();
        }
        let mut kept = Vec::new();
        for k in &keys {
            kept.push(artifacts.get(k).await.unwrap().is_some());
        }
        assert_eq!(kept, [true, false, false, true, true], "the three most recently used of {keys:?}");
    }
}
