//! Messages waiting for one peer, in the gateway's store (scope `(tenant,
//! "$federation")`, collection `outbox`, keys `<peer>/<sequence>`), so they
//! survive a restart and go out in order once the peer is reachable. Bounded
//! by count and bytes; each entry remembers when it was queued.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use map_store::{ScanOptions, Scope, Store, StoreError};

const COLLECTION: &str = "outbox";

/// One message for the peer: the `map/federation/route` envelope it will carry.
#[derive(Serialize, Deserialize, Clone)]
pub struct Entry {
    pub envelope: Value,
    pub queued_at: u64,
}

pub struct Outbox {
    db: Store,
    scope: Scope,
    prefix: String,
    next: AtomicU64,
    /// Entries and bytes held now.
    held: Mutex<(usize, usize)>,
    /// The size of each held entry, by key (what `remove` gives back).
    sizes: Mutex<HashMap<String, usize>>,
    max_messages: usize,
    max_bytes: usize,
}

impl Outbox {
    /// The peer's queue, with what an earlier run left in it.
    pub async fn open(db: Store, tenant: &str, peer: &str, max_messages: usize, max_bytes: usize) -> Result<Outbox, StoreError> {
        let outbox = Outbox {
            db,
            scope: Scope { tenant: tenant.to_string(), plugin: "$federation".into() },
            prefix: format!("{peer}/"),
            next: AtomicU64::new(0),
            held: Mutex::new((0, 0)),
            sizes: Mutex::new(HashMap::new()),
            max_messages,
            max_bytes,
        };
        let (mut count, mut bytes, mut last) = (0, 0, 0u64);
        let mut after = None;
        loop {
            let page = outbox.page(after.as_deref(), 500).await?;
            for (key, value) in &page {
                count += 1;
                bytes += value.len();
                last = last.max(outbox.sequence(key));
                outbox.sizes.lock().insert(key.clone(), value.len());
            }
            match page.last() {
                Some((key, _)) if page.len() == 500 => after = Some(key.clone()),
                _ => break,
            }
        }
        *outbox.held.lock() = (count, bytes);
        outbox.next.store(last + 1, Ordering::Relaxed);
        Ok(outbox)
    }

    fn sequence(&self, key: &str) -> u64 {
        key.strip_prefix(&self.prefix).and_then(|s| u64::from_str_radix(s, 16).ok()).unwrap_or(0)
    }

    async fn page(&self, after: Option<&str>, limit: u32) -> Result<Vec<(String, String)>, StoreError> {
        let o = ScanOptions { prefix: self.prefix.clone(), after: after.map(String::from), before: None, limit, reverse: false };
        self.db.scan(&self.scope, COLLECTION, &o, 64 << 20).await
    }

    /// Queue a message; `Err` when the queue is full (by count or bytes) or the store failed.
    pub async fn push(&self, entry: &Entry) -> Result<String, String> {
        let text = serde_json::to_string(entry).map_err(|e| e.to_string())?;
        {
            let mut held = self.held.lock();
            if held.0 >= self.max_messages || held.1 + text.len() > self.max_bytes {
                return Err(format!("{} messages ({} bytes) already wait for this system", held.0, held.1));
            }
            held.0 += 1;
            held.1 += text.len();
        }
        let key = format!("{}{:016x}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed));
        if let Err(e) = self.db.put(&self.scope, COLLECTION, &key, &text).await {
            let mut held = self.held.lock();
            held.0 -= 1;
            held.1 -= text.len();
            return Err(e.to_string());
        }
        self.sizes.lock().insert(key.clone(), text.len());
        Ok(key)
    }

    /// The oldest waiting messages after the key `after` (from the first
    /// when `None`), in order.
    pub async fn oldest(&self, after: Option<&str>, limit: u32) -> Result<Vec<(String, Entry)>, StoreError> {
        let page = self.page(after, limit).await?;
        Ok(page.into_iter().filter_map(|(k, v)| Some((k, serde_json::from_str(&v).ok()?))).collect())
    }

    /// The message went out (or was refused, or expired): forget it.
    pub async fn remove(&self, key: &str) -> Result<(), StoreError> {
        if self.db.delete(&self.scope, COLLECTION, key).await? {
            let size = self.sizes.lock().remove(key).unwrap_or(0);
            let mut held = self.held.lock();
            held.0 = held.0.saturating_sub(1);
            held.1 = held.1.saturating_sub(size);
        }
        Ok(())
    }
}
