//! What the admin API reads of the core and does to it: tenants, sessions,
//! agents, scopes and subscriptions as an operator sees them (every
//! session, whatever its visibility rules), and ending a session.

use std::sync::Arc;

use serde_json::{json, Value};

use super::lifecycle::participant_event;
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

    /// `{key: [...]}`: what `rows` gives for each tenant named (or all),
    /// each row tagged with its tenant; `None` for an unknown tenant.
    fn listing(&self, tenant: Option<&str>, key: &str, rows: impl Fn(&Tenant) -> Vec<Value>) -> Option<Value> {
        let mut out = Vec::new();
        for t in self.tenants_named(tenant)? {
            for mut row in rows(&t) {
                row["tenant"] = json!(t.id);
                out.push(row);
            }
        }
        Some(json!({ key: out }))
    }

    /// `{sessions: [...]}`: each session with its principal and subscription count.
    pub fn admin_sessions(&self, tenant: Option<&str>) -> Option<Value> {
        self.listing(tenant, "sessions", |t| {
            let subscriptions = t.fabric.inspect().subscriptions;
            let reg = t.registry.lock();
            let mut sessions: Vec<_> = reg.sessions.values().collect();
            sessions.sort_by_key(|s| s.created_at);
            sessions
                .into_iter()
                .map(|s| {
                    let mut v = serde_json::to_value(s).expect("session info serialises");
                    v["principal"] = json!(self.live(&s.id).map(|l| l.principal.to_string()));
                    v["subscriptions"] = json!(subscriptions.iter().filter(|x| x.session_id == s.id).count());
                    v
                })
                .collect()
        })
    }

    /// `{agents: [...]}`: every agent as the wire shows it, with its session.
    pub fn admin_agents(&self, tenant: Option<&str>) -> Option<Value> {
        self.listing(tenant, "agents", |t| {
            let reg = t.registry.lock();
            reg.agents_sorted()
                .into_iter()
                .map(|a| {
                    let mut v = serde_json::to_value(a).expect("agent serialises");
                    v["sessionId"] = json!(a.session);
                    v
                })
                .collect()
        })
    }

    /// `{scopes: [...]}`: every scope with its members.
    pub fn admin_scopes(&self, tenant: Option<&str>) -> Option<Value> {
        self.listing(tenant, "scopes", |t| {
            let reg = t.registry.lock();
            let mut scopes: Vec<_> = reg.scopes.values().collect();
            scopes.sort_by(|a, b| a.id.cmp(&b.id));
            scopes
                .into_iter()
                .map(|s| {
                    let mut v = serde_json::to_value(s).expect("scope serialises");
                    v["members"] = json!(s.members);
                    v
                })
                .collect()
        })
    }

    /// `{subscriptions: [{id, sessionId, eventTypes, sequence, dropped, paused, tenant}]}`.
    pub fn admin_subscriptions(&self, tenant: Option<&str>) -> Option<Value> {
        self.listing(tenant, "subscriptions", |t| t.fabric.inspect().subscriptions.into_iter().map(|s| serde_json::to_value(s).expect("subscription serialises")).collect())
    }

    /// End a session now, as if its resume window had closed: its connection
    /// is closed (WebSocket 1008, event stream ended), its agents go, its
    /// resume token stops working. False when no such session is live.
    pub fn admin_disconnect(&self, session_id: &str) -> bool {
        let Some(live) = self.live(session_id) else { return false };
        live.outbox.close_and_end();
        let event = {
            let mut reg = live.tenant.registry.lock();
            reg.sessions.get_mut(session_id).filter(|s| s.connected).map(|info| {
                info.connected = false;
                info.disconnected_at = Some(crate::ids::now_ms());
                participant_event("participant_disconnected", info, json!({"reason": "disconnected by an operator"}))
            })
        };
        if let Some(e) = event {
            live.tenant.fabric.publish(e);
        }
        self.expire(session_id, "disconnected by an operator");
        tracing::info!(session = session_id, tenant = live.tenant.id, "session disconnected by an operator");
        true
    }
}
