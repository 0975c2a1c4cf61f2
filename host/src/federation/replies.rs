//! Reply grants: a local agent that writes to a peer may be answered by
//! that peer for `reply_window_secs` after its last message there, while it
//! stays registered (the same registration), though it is not shown to it.
//! Kept in the store (scope `(tenant, "$federation")`, collection `replies`,
//! keys `<peer>/<SHA-256 of the agent id>`), so that in a cluster the node
//! that takes the peer's route sees a grant another node made. Only this
//! system's own agents make grants, and at most `MAX_GRANTS` per peer.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use map_core::model::Agent;
use map_store::{ScanOptions, Scope, Store, StoreError, Write};

const COLLECTION: &str = "replies";
/// Grants kept per peer; past it, expired ones are removed first, and a new
/// one is not made while none has expired.
const MAX_GRANTS: u64 = 10_000;

/// One registration of an agent: a grant ends with it.
#[derive(Serialize, Deserialize, Clone, PartialEq, Debug)]
pub struct Registration {
    pub agent: String,
    pub owner: String,
    pub registered_at: u64,
}

impl Registration {
    pub fn of(agent: &Agent) -> Registration {
        Registration { agent: agent.id.clone(), owner: agent.owner_id.clone(), registered_at: agent.lifecycle.created_at }
    }
}

#[derive(Serialize, Deserialize)]
struct Grant {
    #[serde(flatten)]
    registration: Registration,
    /// Until when (ms since the epoch) the peer may route to the agent.
    until: u64,
}

pub struct Replies {
    db: Store,
    scope: Scope,
    prefix: String,
    window_ms: u64,
    /// What this node wrote lately, by agent: a grant is written again only
    /// once a tenth of its window has passed.
    written: Mutex<HashMap<String, (Registration, u64)>>,
    /// Grants in the store at the last count, and grants written since.
    counted: Mutex<(u64, u64)>,
    /// `MAX_GRANTS`.
    max: u64,
}

impl Replies {
    /// The grants made to `peer`, with what an earlier run left.
    pub async fn open(db: Store, tenant: &str, peer: &str, window_secs: u64) -> Result<Replies, StoreError> {
        let scope = Scope { tenant: tenant.to_string(), plugin: "$federation".into() };
        let prefix = format!("{peer}/");
        let stored = db.count(&scope, COLLECTION, &prefix).await?;
        let window_ms = window_secs.saturating_mul(1000);
        Ok(Replies { db, scope, prefix, window_ms, written: Mutex::new(HashMap::new()), counted: Mutex::new((stored, 0)), max: MAX_GRANTS })
    }

    fn key(&self, agent: &str) -> String {
        format!("{}{}", self.prefix, map_store::digest_hex(agent.as_bytes()))
    }

    /// `who` wrote to the peer now: the peer may answer it for the window.
    /// `false` when no grant could be made (the limit, with none expired).
    pub async fn grant(&self, who: &Registration) -> Result<bool, StoreError> {
        if self.window_ms == 0 {
            return Ok(false);
        }
        let now = map_protocol::ids::now_ms();
        let until = now + self.window_ms;
        let fresh = |w: &(Registration, u64)| w.0 == *who && w.1.saturating_sub(now) > self.window_ms - self.window_ms / 10;
        if self.written.lock().get(&who.agent).is_some_and(fresh) {
            return Ok(true);
        }
        let full = {
            let c = self.counted.lock();
            c.0 + c.1 >= self.max
        };
        if full {
            let live = self.prune(now).await?;
            *self.counted.lock() = (live, 0);
            if live >= self.max {
                return Ok(false);
            }
        }
        let grant = Grant { registration: who.clone(), until };
        let text = serde_json::to_string(&grant).map_err(|e| StoreError::Invalid(e.to_string()))?;
        self.db.put(&self.scope, COLLECTION, &self.key(&who.agent), &text).await?;
        self.counted.lock().1 += 1;
        let mut written = self.written.lock();
        if written.len() as u64 >= self.max {
            written.retain(|_, w| w.1 > now);
        }
        written.insert(who.agent.clone(), (who.clone(), until));
        Ok(true)
    }

    /// Whether the peer may route to `who` now.
    pub async fn allows(&self, who: &Registration) -> Result<bool, StoreError> {
        let Some(text) = self.db.get(&self.scope, COLLECTION, &self.key(&who.agent)).await? else { return Ok(false) };
        let grant: Option<Grant> = serde_json::from_str(&text).ok();
        Ok(grant.is_some_and(|g| g.registration == *who && g.until > map_protocol::ids::now_ms()))
    }

    /// Remove the expired grants: how many are left.
    async fn prune(&self, now: u64) -> Result<u64, StoreError> {
        let (mut live, mut after) = (0, None);
        loop {
            let o = ScanOptions { prefix: self.prefix.clone(), after: after.clone(), before: None, limit: 500, reverse: false };
            let page = self.db.scan(&self.scope, COLLECTION, &o, 16 << 20).await?;
            let mut expired = Vec::new();
            for (key, text) in &page {
                match serde_json::from_str::<Grant>(text) {
                    Ok(g) if g.until > now => live += 1,
                    _ => expired.push(Write { collection: COLLECTION.into(), key: key.clone(), value: None }),
                }
            }
            self.db.batch(&self.scope, expired).await?;
            match page.last() {
                Some((key, _)) if page.len() == 500 => after = Some(key.clone()),
                _ => return Ok(live),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(agent: &str, registered_at: u64) -> Registration {
        Registration { agent: agent.into(), owner: "p-1".into(), registered_at }
    }

    #[tokio::test]
    async fn grants_hold_for_their_registration_and_are_bounded_expired_ones_first() {
        let dir = std::env::temp_dir().join(format!("map-gateway-replies-{}", map_protocol::ids::secret()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = Store::open(&format!("sqlite://{}", dir.join("t.db").display()), false, 0, std::time::Duration::ZERO).await.unwrap();
        let mut replies = Replies::open(db.clone(), "t", "globex", 3600).await.unwrap();
        replies.max = 2;
        // Two grants that expire at once, then room for new ones.
        replies.window_ms = 1;
        for a in ["a", "b"] {
            assert!(replies.grant(&who(a, 1)).await.unwrap());
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        assert!(!replies.allows(&who("a", 1)).await.unwrap(), "expired");
        replies.window_ms = 3_600_000;
        for a in ["c", "d"] {
            assert!(replies.grant(&who(a, 1)).await.unwrap(), "{a}: the expired grants make room");
        }
        assert!(!replies.grant(&who("e", 1)).await.unwrap(), "at the limit, none expired");
        assert!(replies.allows(&who("c", 1)).await.unwrap());
        assert!(!replies.allows(&who("e", 1)).await.unwrap());
        // Another registration of the same id has no grant.
        assert!(!replies.allows(&who("c", 2)).await.unwrap());
        // A later run sees what is stored.
        let again = Replies::open(db, "t", "globex", 3600).await.unwrap();
        assert_eq!(*again.counted.lock(), (2, 0));
        assert!(again.allows(&who("d", 1)).await.unwrap());
        let _ = std::fs::remove_dir_all(dir);
    }
}
