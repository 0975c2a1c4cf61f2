//! A cluster's current rollout, kept in PostgreSQL (`cluster_rollouts`, one
//! row per cluster name): the component digests every node is to serve and
//! those a rollback returns to. A node that starts, or that was down while
//! the rollout ran, reads it and serves what the other nodes serve. Rows
//! are replaced only by later rollouts (ids are ULIDs, ordered by time), so
//! two rollouts announced at once leave the later one.

use std::collections::BTreeMap;
use std::sync::Arc;

use sqlx::postgres::PgPool;
use sqlx::Row;

use super::breaker::Breaker;
use super::StoreError;

/// One rollout as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutRecord {
    pub id: String,
    /// `rollout` or `rollback`.
    pub kind: String,
    /// The node that announced it.
    pub from: String,
    /// Component digest by plugin key: what every node serves.
    pub pins: BTreeMap<String, String>,
    /// What the announcing node served before (a rollback's pins).
    pub previous: BTreeMap<String, String>,
    /// When it was announced (Unix ms).
    pub at: u64,
}

/// The current rollout of each cluster on one database.
#[derive(Clone)]
pub struct RolloutLog {
    pub(super) pool: PgPool,
    pub(super) breaker: Arc<Breaker>,
}

fn pins_text(pins: &BTreeMap<String, String>) -> String {
    serde_json::to_string(pins).expect("a map of strings is JSON")
}

fn pins_of(text: &str) -> Result<BTreeMap<String, String>, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Invalid(format!("a recorded rollout's digests are not JSON: {e}")))
}

impl RolloutLog {
    /// The cluster's current rollout, if it ever had one.
    pub async fn current(&self, cluster: &str) -> Result<Option<RolloutRecord>, StoreError> {
        let sql = "SELECT id, kind, from_node, pins, previous, at FROM cluster_rollouts WHERE cluster = $1";
        let row = self.breaker.guard(async { Ok::<_, StoreError>(sqlx::query(sql).bind(cluster).fetch_optional(&self.pool).await?) }).await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(RolloutRecord {
            id: row.get(0),
            kind: row.get(1),
            from: row.get(2),
            pins: pins_of(row.get(3))?,
            previous: pins_of(row.get(4))?,
            at: row.get::<i64, _>(5) as u64,
        }))
    }

    /// Record `r` as the cluster's current rollout, unless a later one is
    /// recorded already: whether it now is the current one.
    pub async fn record(&self, cluster: &str, r: &RolloutRecord) -> Result<bool, StoreError> {
        let sql = "INSERT INTO cluster_rollouts (cluster, id, kind, from_node, pins, previous, at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                   ON CONFLICT (cluster) DO UPDATE SET id = excluded.id, kind = excluded.kind, from_node = excluded.from_node, \
                   pins = excluded.pins, previous = excluded.previous, at = excluded.at WHERE cluster_rollouts.id < excluded.id";
        let query =
            sqlx::query(sql).bind(cluster).bind(&r.id).bind(&r.kind).bind(&r.from).bind(pins_text(&r.pins)).bind(pins_text(&r.previous)).bind(r.at as i64);
        let done = self.breaker.guard(async { Ok::<_, StoreError>(query.execute(&self.pool).await?) }).await?;
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::RolloutRecord;
    use crate::Store;

    #[tokio::test]
    async fn the_later_rollout_stays_current() {
        let url = std::env::var("MAP_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into());
        let db = Store::open(&url, false, 0, std::time::Duration::from_millis(10))
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is required for the rollout tests ({url}): {e:#}"));
        let rollouts = db.rollout_log().expect("PostgreSQL keeps rollouts");
        let cluster = format!("rollouts-{}-{}", std::process::id(), map_protocol::ids::ulid());
        assert_eq!(rollouts.current(&cluster).await.unwrap(), None);
        let record = |id: String, digest: &str| RolloutRecord {
            id,
            kind: "rollout".into(),
            from: "a".into(),
            pins: [("echo".to_string(), digest.to_string())].into(),
            previous: [("echo".to_string(), "d0".to_string())].into(),
            at: 1,
        };
        let (first, second) = (record(map_protocol::ids::ulid(), "d1"), record(map_protocol::ids::ulid(), "d2"));
        assert!(rollouts.record(&cluster, &first).await.unwrap());
        assert!(rollouts.record(&cluster, &second).await.unwrap());
        assert!(!rollouts.record(&cluster, &first).await.unwrap(), "an earlier rollout does not replace a later one");
        assert_eq!(rollouts.current(&cluster).await.unwrap(), Some(second));
    }
}
