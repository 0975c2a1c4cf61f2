//! The embedded default's durable event log and scopes: a SQLite file
//! (`<data_dir>/events.db`) beside the plugin store. Each tenant's replay
//! window is written behind the fabric every `storage.event_log_flush_ms`
//! (at most the window's size per flush, however fast events come, in
//! transactions of about `PAGE_BYTES`) and at
//! shutdown, and read back at start-up; scope definitions are written as
//! they change, before the call that changed them is answered.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use rusqlite::{params, Connection};

use map_core::directory::{ChangeSink, Track};
use map_core::events::StoredEvent;
use map_core::fabric::{LocalFabric, Recorded};
use map_core::model::Scope;
use map_core::registry::Registry;
use map_core::tracked::Changes;
use map_core::Tenant;

/// About how many bytes of events one transaction writes: a flush holds
/// one page of events and one serialised body at a time, not the window.
const PAGE_BYTES: usize = 1 << 20;

pub struct Journal {
    conn: Mutex<Connection>,
    /// Events kept per tenant.
    capacity: usize,
    /// Per tenant: the fabric and the newest event written.
    logs: Mutex<Vec<(String, Arc<LocalFabric>, Option<String>)>>,
}

impl Journal {
    pub fn open(path: &Path, capacity: usize) -> anyhow::Result<Arc<Journal>> {
        let conn = Connection::open(path).with_context(|| format!("opening the event log {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS events (tenant TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (tenant, id)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS scopes (tenant TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (tenant, id)) WITHOUT ROWID;",
        )?;
        Ok(Arc::new(Journal { conn: Mutex::new(conn), capacity: capacity.max(1), logs: Mutex::new(Vec::new()) }))
    }

    /// A tenant's fabric, refilled with its logged events, and written from now on.
    pub fn fabric_for(&self, tenant: &str, fabric: LocalFabric) -> anyhow::Result<Arc<LocalFabric>> {
        let entries: Vec<StoredEvent> = {
            let conn = self.conn.lock();
            let mut stmt = conn.prepare("SELECT body FROM (SELECT id, body FROM events WHERE tenant = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id")?;
            let rows = stmt.query_map(params![tenant, self.capacity as i64], |r| r.get::<_, String>(0))?;
            rows.filter_map(|r| r.ok()).filter_map(|body| serde_json::from_str(&body).ok()).collect()
        };
        let newest = entries.last().map(|e| e.id.clone());
        if let Some(id) = &newest {
            fabric.mark_saved(id);
        }
        fabric.restore(entries);
        let fabric = Arc::new(fabric);
        self.logs.lock().push((tenant.to_string(), fabric.clone(), newest));
        Ok(fabric)
    }

    /// Put a tenant's saved scopes back (without members: agents do not
    /// outlive the process) and save its scope changes from now on.
    pub fn keep_scopes(self: &Arc<Self>, tenant: &Tenant) -> anyhow::Result<()> {
        let scopes: Vec<Scope> = {
            let conn = self.conn.lock();
            let mut stmt = conn.prepare("SELECT body FROM scopes WHERE tenant = ?1")?;
            let rows = stmt.query_map(params![tenant.id], |r| r.get::<_, String>(0))?;
            rows.filter_map(|r| r.ok()).filter_map(|body| serde_json::from_str(&body).ok()).collect()
        };
        {
            let mut reg = tenant.registry.lock();
            for scope in scopes {
                reg.scopes.insert_quiet(scope.id.clone(), scope);
            }
        }
        let sink = Arc::new(ScopeSink { journal: self.clone(), tenant: tenant.id.clone(), saved: Mutex::new(Default::default()) });
        tenant.registry.watch(sink, Track { agents: false, scopes: true, sessions: false });
        Ok(())
    }

    /// Write every tenant's events recorded since the last flush, and drop
    /// those past the window.
    pub fn flush(&self) {
        let mut logs = self.logs.lock();
        for (tenant, fabric, newest) in logs.iter_mut() {
            // Events recorded while this flush runs wait for the next one.
            let Some(until) = fabric.newest_recorded() else { continue };
            while newest.as_deref().is_none_or(|n| n < until.as_str()) {
                let page = fabric.recorded_page(newest.as_deref(), PAGE_BYTES);
                let Some(last) = page.last().map(|r| r.id().to_string()) else { break };
                let window_from = fabric.oldest_recorded();
                if let Err(e) = self.write_events(tenant, &page, window_from.as_ref().map(|id| id.as_str())) {
                    tracing::error!(tenant = %tenant, error = %e, "writing the event log failed; retrying at the next flush");
                    break;
                }
                fabric.mark_saved(&last);
                *newest = Some(last);
            }
        }
    }

    /// Write one page of events, each serialised just before its row is
    /// written (one body at a time), and trim the table to the replay
    /// window, which starts at `window_from` (the fabric's oldest event:
    /// the window in memory is bounded by count and bytes, and so is the
    /// table then). Trimming by that id is a range delete on the key;
    /// counting back from the newest row would read the whole window's
    /// pages on every flush.
    fn write_events(&self, tenant: &str, page: &[Arc<Recorded>], window_from: Option<&str>) -> rusqlite::Result<()> {
        let mut conn = self.conn.lock();
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached("INSERT OR REPLACE INTO events (tenant, id, body) VALUES (?1, ?2, ?3)")?;
            for r in page {
                let body = serde_json::to_string(&r.stored()).expect("events serialise");
                insert.execute(params![tenant, r.id(), body])?;
            }
            if let Some(from) = window_from {
                tx.execute("DELETE FROM events WHERE tenant = ?1 AND id < ?2", params![tenant, from])?;
            }
        }
        tx.commit()
    }

    /// Flush every `every` until the process ends.
    pub fn spawn_flusher(self: &Arc<Self>, every: Duration) {
        let journal = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(j) = journal.upgrade() else { return };
                // SQLite calls block: off the async workers.
                // The flush's copies were freed on that thread: give them back (see `memory`).
                let _ = tokio::task::spawn_blocking(move || {
                    j.flush();
                    crate::memory::collect(true);
                })
                .await;
            }
        });
    }

    fn write_scope(&self, tenant: &str, id: &str, body: Option<&str>) -> rusqlite::Result<()> {
        let conn = self.conn.lock();
        match body {
            Some(body) => conn.execute("INSERT OR REPLACE INTO scopes (tenant, id, body) VALUES (?1, ?2, ?3)", params![tenant, id, body])?,
            None => conn.execute("DELETE FROM scopes WHERE tenant = ?1 AND id = ?2", params![tenant, id])?,
        };
        Ok(())
    }
}

/// Saves a tenant's scope definitions when they change (a member joining
/// or leaving changes nothing saved, so it writes nothing).
struct ScopeSink {
    journal: Arc<Journal>,
    tenant: String,
    /// What was last saved per scope.
    saved: Mutex<foldhash::HashMap<String, String>>,
}

impl ChangeSink for ScopeSink {
    fn changed(&self, reg: &Registry, changes: Changes) {
        let mut saved = self.saved.lock();
        for id in changes.scopes {
            let body = reg.scopes.get(&id).map(|s| serde_json::to_string(s).expect("scopes serialise"));
            if saved.get(&id) == body.as_ref() {
                continue;
            }
            if let Err(e) = self.journal.write_scope(&self.tenant, &id, body.as_deref()) {
                tracing::error!(tenant = %self.tenant, scope = %id, error = %e, "saving a scope failed");
                continue;
            }
            match body {
                Some(b) => saved.insert(id, b),
                None => saved.remove(&id),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use map_core::events::{NewEvent, Source};
    use map_core::fabric::Fabric;

    fn saved(journal: &Journal, tenant: &str) -> Vec<String> {
        let conn = journal.conn.lock();
        let mut stmt = conn.prepare("SELECT id FROM events WHERE tenant = ?1 ORDER BY id").unwrap();
        stmt.query_map([tenant], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect()
    }

    fn publish(fabric: &LocalFabric, text: String) -> String {
        fabric.publish(NewEvent::with_text("x", Source::default(), text)).as_str().to_string()
    }

    #[test]
    fn the_table_holds_the_window_the_fabric_holds_by_count_and_by_bytes() {
        let dir = std::env::temp_dir().join(format!("journal-test-{}", map_protocol::ids::secret()));
        std::fs::create_dir_all(&dir).unwrap();
        let journal = Journal::open(&dir.join("events.db"), 5).unwrap();

        let counted = journal.fabric_for("counted", LocalFabric::new(5, 1 << 20)).unwrap();
        let ids: Vec<String> = (0..12).map(|i| publish(&counted, format!("{{\"i\":{i}}}"))).collect();
        journal.flush();
        assert_eq!(saved(&journal, "counted"), ids[7..], "the newest five");

        // About 10 kB each in a window of 25 kB: two stay, in memory and on disk.
        let sized = journal.fabric_for("sized", LocalFabric::new(5, 25_000)).unwrap();
        let big = format!("{{\"p\":\"{}\"}}", "x".repeat(10_000));
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(publish(&sized, big.clone()));
            ids.push(publish(&sized, big.clone()));
            journal.flush();
        }
        assert_eq!(saved(&journal, "sized"), ids[4..], "the table is trimmed to the window in memory");
        assert_eq!(saved(&journal, "counted").len(), 5, "each tenant's window on its own");
        std::fs::remove_dir_all(&dir).ok();
    }
}
