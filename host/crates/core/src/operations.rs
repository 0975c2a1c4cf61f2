//! What the admin API reads of the core and does to it: tenants, sessions,
//! agents, scopes and subscriptions as an operator sees them (every
//! session, whatever its visibility rules), and ending a session.

use std::sync::Arc;

use serde_json::{json, Value};

use super::lifecycle::participant_event;
use super::registry::Registry;
use super::tracked::Tracked;
use super::{Gateway, Tenant};

impl Gateway {
    /// The tenants named (or all), sorted by id; `None` when the name is unknown.
    fn tenants_named(&self, tenant: Option<&str>) -> Option<Vec<Arc<Tenant>>> {
        let mut all: Vec<Arc<Tenant>> = match tenant {
            Some(id) => vec![self.tenants.get(id)?],
            None => self.tenants.all().cloned().collect(),
        };
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Some(all)
    }

    /// `{tenants: [{id, sessions, agents, scopes, subscriptions, eventLog: {events, bytes}}]}`.
    pub fn admin_tenants(&self) -> Value {
        let tenants: Vec<Value> = self
            .tenants_named(None)
            .unwrap_or_default()
            .iter()
            .map(|t| {
                let (sessions, agents, scopes) = {
                    let reg = t.registry.lock();
                    (reg.sessions.len(), reg.agents.len(), reg.scopes.len())
                };
                let fabric = t.fabric.inspect();
                json!({"id": t.id, "sessions": sessions, "agents": agents, "scopes": scopes,
                       "subscriptions": fabric.subscriptions.len(),
                       "eventLog": {"events": fabric.log_events, "bytes": fabric.log_bytes, "savedThrough": fabric.saved_through}})
            })
            .collect();
        json!({ "tenants": tenants })
    }

    /// `{key: [...]}` as JSON text: each tenant's entries of one map of the
    /// directory (read a piece at a time, see `Directory::walk`), as rows
    /// tagged with their tenant; `None` for an unknown tenant. The rows are
    /// made on a blocking thread: there may be very many.
    async fn listing<V, R>(&self, tenant: Option<&str>, key: &'static str, map: fn(&Registry) -> &Tracked<V>, rows: R) -> Option<String>
    where
        V: Send + Sync + 'static,
        R: Fn(&Tenant, Vec<Arc<V>>) -> Vec<Value> + Send + 'static,
    {
        let mut taken = Vec::new();
        for t in self.tenants_named(tenant)? {
            let entries = t.registry.walk(map, None, usize::MAX, |_, e| Some(e.clone())).await;
            taken.push((t, entries));
        }
        let text = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for (t, entries) in taken {
                for mut row in rows(&t, entries) {
                    row["tenant"] = json!(t.id);
                    out.push(row);
                }
            }
            json!({ key: out }).to_string()
        });
        Some(text.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())))
    }

    /// `{sessions: [...]}`: each session with its principal and subscription count.
    pub async fn admin_sessions(self: &Arc<Self>, tenant: Option<&str>) -> Option<String> {
        let gw = self.clone();
        self.listing(
            tenant,
            "sessions",
            |r| &r.sessions,
            move |t, mut sessions| {
                let subscriptions = t.fabric.inspect().subscriptions;
                sessions.sort_by_key(|s| s.created_at);
                sessions
                    .into_iter()
                    .map(|s| {
                        let mut v = serde_json::to_value(&*s).expect("session info serialises");
                        v["principal"] = json!(gw.live(&s.id).map(|l| l.session.principal.to_string()));
                        v["subscriptions"] = json!(subscriptions.iter().filter(|x| x.session_id == s.id).count());
                        v
                    })
                    .collect()
            },
        )
        .await
    }

    /// `{agents: [...]}`: every agent as the wire shows it, with its session.
    pub async fn admin_agents(&self, tenant: Option<&str>) -> Option<String> {
        self.listing(
            tenant,
            "agents",
            |r| &r.agents,
            |_, agents| {
                agents
                    .into_iter()
                    .map(|a| {
                        let mut v = serde_json::to_value(&*a).expect("agent serialises");
                        v["sessionId"] = json!(a.session);
                        v
                    })
                    .collect()
            },
        )
        .await
    }

    /// `{scopes: [...]}`: every scope with its members.
    pub async fn admin_scopes(&self, tenant: Option<&str>) -> Option<String> {
        self.listing(
            tenant,
            "scopes",
            |r| &r.scopes,
            |_, mut scopes| {
                scopes.sort_by(|a, b| a.id.cmp(&b.id));
                scopes
                    .into_iter()
                    .map(|s| {
                        let mut v = serde_json::to_value(&*s).expect("scope serialises");
                        v["members"] = json!(s.members);
                        v
                    })
                    .collect()
            },
        )
        .await
    }

    /// `{subscriptions: [{id, sessionId, eventTypes, sequence, dropped, paused, tenant}]}`.
    pub fn admin_subscriptions(&self, tenant: Option<&str>) -> Option<Value> {
        let mut out = Vec::new();
        for t in self.tenants_named(tenant)? {
            for s in t.fabric.inspect().subscriptions {
                let mut row = serde_json::to_value(s).expect("subscription serialises");
                row["tenant"] = json!(t.id);
                out.push(row);
            }
        }
        Some(json!({ "subscriptions": out }))
    }

    /// End a session now, as if its resume window had closed: its connection
    /// is closed (WebSocket 1008, event stream ended), its agents go, its
    /// resume token stops working. False when no such session is live.
    pub fn admin_disconnect(&self, session_id: &str) -> bool {
        let Some(live) = self.live(session_id) else { return false };
        live.session.outbox.close_and_end();
        let event = {
            let mut reg = live.session.tenant.registry.lock();
            reg.sessions.get_mut(session_id).filter(|s| s.connected).map(|info| {
                info.connected = false;
                info.disconnected_at = Some(map_protocol::ids::now_ms());
                participant_event("participant_disconnected", info, json!({"reason": "disconnected by an operator"}))
            })
        };
        if let Some(e) = event {
            live.session.tenant.fabric.publish(e);
        }
        self.expire(session_id, "disconnected by an operator");
        tracing::info!(session = session_id, tenant = live.session.tenant.id, "session disconnected by an operator");
        true
    }
}
