//! Session lifecycle: open, attach to a connection, detach, resume, expire.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::events::{NewEvent, Source};
use super::model::Agent;
use super::outbox::Outbox;
use super::registry::SessionInfo;
use super::{Active, Conn, ConnState, Gateway, Live};
use crate::{Authenticated, Tenant};
use map_protocol::ids;

/// Why `attach_stream` refused.
#[derive(Debug, PartialEq, Eq)]
pub enum StreamRefused {
    /// No such session for this caller.
    NotFound,
    /// Another connection receives the session's frames.
    InUse,
}

/// An event about an agent, with the facets filters need.
///
/// `data` keeps its nested objects and also gets the flat fields clients of
/// the SDK's own server read (`agentId`, `ownerId`, `name`, `role`).
pub(crate) fn agent_event(kind: &'static str, agent: &Agent, mut data: Value) -> NewEvent {
    if let Value::Object(d) = &mut data {
        d.entry("agentId").or_insert_with(|| json!(agent.id));
        // An orphan's owner is null, as the SDK's `isOrphanedAgent` reads it.
        d.entry("ownerId").or_insert_with(|| if agent.owner_id.is_empty() { Value::Null } else { json!(agent.owner_id) });
        if let Some(name) = &agent.name {
            d.entry("name").or_insert_with(|| json!(name));
        }
        if let Some(role) = &agent.role {
            d.entry("role").or_insert_with(|| json!(&**role));
        }
    }
    let source = Source { agent_id: Some(agent.id.clone()), participant_id: Some(agent.owner_id.clone()).filter(|o| !o.is_empty()), scope_id: None };
    let mut ev = NewEvent::new(kind, source, data);
    if agent.visibility.as_deref().is_some_and(|v| v != "public") {
        ev.hidden_agent = Some(Box::new(agent.clone()));
    }
    ev.facets.source_role = agent.role.clone();
    ev.facets.roles = agent.role.iter().cloned().collect();
    ev.facets.scopes = agent.scopes.clone();
    ev.facets.metadata = agent.metadata.clone();
    ev
}

pub(crate) fn participant_event(kind: &'static str, s: &SessionInfo, extra: Value) -> NewEvent {
    let source = Source { participant_id: Some(s.participant_id.clone()), ..Source::default() };
    let mut data = json!({"participantId": s.participant_id, "participantType": s.participant_type});
    if let (Value::Object(d), Value::Object(e)) = (&mut data, extra) {
        d.extend(e);
    }
    NewEvent::new(kind, source, data)
}

/// Publish events about agents: those about a hidden agent go only to the
/// sessions that may see it now. Never call with the registry locked.
/// Where agent-level rules are in use, every event about a current agent
/// goes only to the sessions whose agents may see it.
pub(crate) fn publish_agent_events(tenant: &Tenant, mut events: Vec<NewEvent>) {
    {
        let reg = tenant.registry.lock();
        for e in &mut events {
            if let Some(agent) = e.hidden_agent.take() {
                e.audience = Some(reg.audience_of(&agent));
            } else if let Some(agent) = e.source.agent_id.as_deref().filter(|_| reg.agent_rules && e.audience.is_none()).and_then(|id| reg.agents.get(id)) {
                e.audience = Some(reg.audience_of(agent));
            }
        }
    }
    for e in events {
        tenant.fabric.publish(e);
    }
}

/// Agents released per hold of the registry lock: a session with very many
/// agents must not stall the tenant (or the process) while it ends.
const RELEASE_BATCH: usize = 256;

/// Unregister every agent of a session (or orphan them: `agent_orphaned`
/// says who owned each, `previousOwner`) and publish the events, in
/// batches, each in time linear in its size; the events are made after the
/// lock is released. Very many agents are released off the runtime's
/// worker (see `off_worker`).
pub(crate) fn release_agents(tenant: &Tenant, session_id: &str, orphan: bool, reason: &str) {
    let owned = match tenant.registry.lock().sessions.get_mut(session_id) {
        Some(s) => std::mem::take(&mut s.agents),
        None => return,
    };
    let release = || {
        for batch in owned.chunks(RELEASE_BATCH) {
            // Each agent as it is now, with the participant that owned it.
            let released: Vec<(Agent, String)> = {
                let mut reg = tenant.registry.lock();
                if orphan {
                    batch.iter().filter_map(|id| reg.agents.get_mut(id).map(orphaned)).collect()
                } else {
                    reg.remove_agents(batch).into_iter().map(|a| (a, String::new())).collect()
                }
            };
            let events = released.iter().map(|(a, owner)| released_event(a, owner, orphan, reason)).collect();
            publish_agent_events(tenant, events);
        }
    };
    if owned.len() > RELEASE_BATCH {
        off_worker(release);
    } else {
        release();
    }
}

/// Mark an agent orphaned, owned by nobody: its copy as it is now, and who owned it.
fn orphaned(a: &mut Agent) -> (Agent, String) {
    a.state = "orphaned".into();
    a.lifecycle.last_state_change = ids::now_ms();
    a.session = String::new();
    let owner = std::mem::take(&mut a.owner_id);
    (a.clone(), owner)
}

/// `agent_orphaned` (with `previousOwner`) or `agent_unregistered`.
fn released_event(a: &Agent, owner: &str, orphan: bool, reason: &str) -> NewEvent {
    if orphan {
        agent_event("agent_orphaned", a, json!({"agentId": a.id, "agent": a, "previousOwner": owner, "reason": reason}))
    } else {
        agent_event("agent_unregistered", a, json!({"agentId": a.id, "agent": a, "reason": reason}))
    }
}

/// Run long synchronous work on a runtime worker while the runtime moves
/// the worker's other tasks to another thread (`block_in_place`), so they
/// are not held up; as is where that cannot be done (no multi-thread runtime).
fn off_worker<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(rt) if rt.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(work),
        _ => work(),
    }
}

impl Tenant {
    /// A session whose cluster node died: mark it disconnected, as a closed
    /// connection would, so it can be resumed elsewhere until it expires.
    pub fn park_session(&self, session_id: &str) {
        let event = {
            let mut reg = self.registry.lock();
            let Some(info) = reg.sessions.get_mut(session_id).filter(|s| s.connected) else { return };
            info.connected = false;
            info.disconnected_at = Some(ids::now_ms());
            participant_event("participant_disconnected", info, json!({"reason": "node lost"}))
        };
        self.fabric.publish(event);
    }

    /// End for good a session that no node serves: its agents go (or are
    /// orphaned, as it asked), and it leaves the directory.
    pub fn end_session(&self, session_id: &str, reason: &str) {
        let orphan = self.registry.lock().sessions.get(session_id).is_some_and(|s| s.agent_behavior == "orphan");
        release_agents(self, session_id, orphan, reason);
        let mut reg = self.registry.lock();
        if let Some(info) = reg.sessions.remove(session_id) {
            if reg.participants.get(&info.participant_id).is_some_and(|s| s == session_id) {
                reg.participants.remove(&info.participant_id);
            }
        }
    }
}

impl Gateway {
    /// Create a session in `tenant` for this connection and bind the connection to it.
    pub(crate) fn open_session(self: &Arc<Self>, conn: &mut Conn, who: Authenticated, info: SessionInfo) -> Active {
        let Authenticated { tenant, principal, expires_at } = who;
        let outbox = Arc::new(Outbox::new(self.config.limits.outbox_frames, self.config.limits.outbox_bytes));
        if conn.streams {
            outbox.attach(conn.tx.clone());
        }
        tenant.fabric.join(&info.id, outbox.clone());
        let token = ids::secret();
        let mut info = info;
        info.resume_hash = ids::secret_hash(&token);
        info.principal = principal;
        let event = participant_event("participant_connected", &info, json!({}));
        let active = self.go_live(conn, &tenant, &info, outbox, token, expires_at);
        {
            let mut reg = tenant.registry.lock();
            reg.participants.insert(info.participant_id.clone(), info.id.clone());
            reg.sessions.insert(info.id.clone(), info);
        }
        tenant.fabric.publish(event);
        active
    }

    /// Make a session live in this process, with its outbox, resume token
    /// and credential expiry, and bind the connection to it.
    fn go_live(&self, conn: &mut Conn, tenant: &Arc<Tenant>, info: &SessionInfo, outbox: Arc<Outbox>, token: String, expires_at: Option<u64>) -> Active {
        let active = Active {
            tenant: tenant.clone(),
            session_id: info.id.clone(),
            participant_id: info.participant_id.clone(),
            participant_type: info.participant_type.clone(),
            principal: info.principal.clone(),
            outbox,
        };
        let live = Live {
            session: active.clone(),
            generation: Arc::new(AtomicU64::new(1)),
            resume_token: token.clone(),
            disconnected: Arc::new(AtomicBool::new(false)),
            expiry: Default::default(),
        };
        conn.deferred.extend(live.expiry.arm(expires_at, &active.outbox));
        map_observe::metrics::session(&tenant.id, 1.0);
        self.sessions.lock().insert(info.id.clone(), live);
        self.resume_tokens.lock().insert(token, info.id.clone());
        conn.state = ConnState::Active(active.clone());
        active
    }

    /// The live session a resume token names.
    pub(crate) fn resumable(&self, token: &str) -> Option<Live> {
        let session_id = self.resume_tokens.lock().get(token).cloned()?;
        self.live(&session_id)
    }

    /// Rebind a connection to the session of a resume token, if it is still
    /// live; the token is replaced by a fresh one. `expires_at`: of the
    /// credential the session holds now.
    pub(crate) fn resume_session(self: &Arc<Self>, conn: &mut Conn, token: &str, expires_at: Option<u64>) -> Option<(Active, String, Vec<String>)> {
        let session_id = self.resume_tokens.lock().remove(token)?;
        let new_token = ids::secret();
        let live = {
            let mut sessions = self.sessions.lock();
            let live = sessions.get_mut(&session_id)?;
            live.resume_token = new_token.clone();
            live.generation.fetch_add(1, Ordering::SeqCst);
            live.disconnected.store(false, Ordering::SeqCst);
            live.clone()
        };
        self.resume_tokens.lock().insert(new_token.clone(), session_id.clone());
        if conn.streams {
            live.session.outbox.attach(conn.tx.clone());
        }
        let (owned, event) = {
            let mut reg = live.session.tenant.registry.lock();
            let info = reg.sessions.get_mut(&session_id)?;
            info.connected = true;
            info.connected_at = ids::now_ms();
            info.disconnected_at = None;
            info.resume_hash = ids::secret_hash(&new_token);
            let owned = info.agents.clone();
            (owned, participant_event("participant_connected", info, json!({"reconnected": true})))
        };
        live.session.tenant.fabric.publish(event);
        conn.deferred.extend(live.expiry.arm(expires_at, &live.session.outbox));
        let active = live.session.clone();
        conn.state = ConnState::Active(active.clone());
        Some((active, new_token, owned))
    }

    /// Take up a session whose cluster node died, if `token` resumes it and
    /// `who` opened it: same id, agents and subscriptions (from their last
    /// checkpoint, so events may come again but none are skipped).
    pub(crate) fn adopt_session(self: &Arc<Self>, conn: &mut Conn, who: &Authenticated, token: &str) -> Option<(Active, String, Vec<String>)> {
        let tenant = who.tenant.clone();
        let hash = ids::secret_hash(token);
        let new_token = ids::secret();
        let outbox = Arc::new(Outbox::new(self.config.limits.outbox_frames, self.config.limits.outbox_bytes));
        let (info, owned, event) = {
            let mut reg = tenant.registry.lock();
            let id = reg
                .sessions
                .values()
                .find(|s| ids::secrets_equal(&s.resume_hash, &hash) && ids::secrets_equal(&s.principal, &who.principal))
                .filter(|s| s.home.as_deref().is_some_and(|home| tenant.fabric.home_is_gone(home, &s.id)))
                .map(|s| s.id.clone())?;
            let info = reg.sessions.get_mut(&id)?;
            info.home = None;
            info.connected = true;
            info.connected_at = ids::now_ms();
            info.disconnected_at = None;
            info.resume_hash = ids::secret_hash(&new_token);
            let event = participant_event("participant_connected", info, json!({"reconnected": true}));
            (info.clone(), info.agents.clone(), event)
        };
        if conn.streams {
            outbox.attach(conn.tx.clone());
        }
        tenant.fabric.join(&info.id, outbox.clone());
        // Its subscriptions come back as blind as its permissions say.
        tenant.fabric.observing(&info.id, super::permissions::observes(&info));
        let extensions = tenant.extensions();
        for sub in tenant.fabric.parked_subscriptions(&info.id) {
            if let Ok(filter) = sub.filter.clone().resolve(|key| extensions.data_filter(key)) {
                tenant.fabric.adopt_subscription(&info.id, crate::fabric::ParkedSubscription { filter, ..sub });
            }
        }
        let active = self.go_live(conn, &tenant, &info, outbox, new_token.clone(), who.expires_at);
        tenant.fabric.publish(event);
        Some((active, new_token, owned))
    }

    /// The connection is gone (or said `map/disconnect`): park the session's
    /// frames and let it be resumed until the window closes. Returns the resume token.
    pub fn connection_closed(self: &Arc<Self>, conn: &mut Conn) -> Option<String> {
        let ConnState::Active(active) = std::mem::replace(&mut conn.state, ConnState::Fresh) else { return None };
        active.outbox.detach(&conn.tx);
        let live = self.live(&active.session_id)?;
        let event = {
            let mut reg = active.tenant.registry.lock();
            let info = reg.sessions.get_mut(&active.session_id)?;
            info.connected = false;
            info.disconnected_at = Some(ids::now_ms());
            participant_event("participant_disconnected", info, json!({}))
        };
        active.tenant.fabric.publish(event);
        active.tenant.asks.session_closed(&active.session_id);
        if let Some(fed) = active.tenant.federation() {
            fed.session_closed(&active.session_id);
        }
        self.schedule_expiry(&active.session_id, &live);
        Some(live.resume_token)
    }

    /// Expire the session when the resume window closes, unless a connection
    /// has taken it up by then.
    pub(crate) fn schedule_expiry(self: &Arc<Self>, session_id: &str, live: &Live) {
        let generation = live.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let gateway = Arc::clone(self);
        let window = Duration::from_secs(self.config.server.resume_window_secs);
        let session_id = session_id.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(window).await;
            let idle = gateway.live(&session_id).is_some_and(|l| l.generation.load(Ordering::SeqCst) == generation && !l.session.outbox.is_attached());
            if idle {
                gateway.expire(&session_id, "resume window closed");
            }
        });
    }

    /// The live session an HTTP request or event stream names, if the
    /// request comes from the tenant and principal that opened it and the
    /// client has not said `map/disconnect`. One answer for every refusal, so
    /// a guess learns nothing.
    fn claimed(&self, session_id: &str, who: Option<&Authenticated>) -> Option<Live> {
        let live = self.live(session_id)?;
        let who = who?;
        let same = Arc::ptr_eq(&who.tenant, &live.session.tenant) && ids::secrets_equal(&who.principal, &live.session.principal);
        (same && !live.disconnected.load(Ordering::SeqCst)).then_some(live)
    }

    /// Bind an HTTP request to the session it names (see `claimed`).
    pub fn bind_session(&self, conn: &mut Conn, session_id: &str, who: Option<&Authenticated>) -> bool {
        let Some(live) = self.claimed(session_id, who) else { return false };
        conn.state = ConnState::Active(Active {
            tenant: live.session.tenant,
            session_id: session_id.to_string(),
            participant_id: live.session.participant_id,
            participant_type: live.session.participant_type,
            principal: live.session.principal,
            outbox: live.session.outbox,
        });
        true
    }

    /// An HTTP request is done: its session stays, its frames park until an
    /// event stream takes them, and it expires after a quiet resume window.
    pub fn request_done(self: &Arc<Self>, conn: &mut Conn) -> Option<String> {
        let ConnState::Active(active) = std::mem::replace(&mut conn.state, ConnState::Fresh) else { return None };
        active.outbox.detach(&conn.tx);
        let live = self.live(&active.session_id)?;
        self.schedule_expiry(&active.session_id, &live);
        Some(active.session_id)
    }

    /// An event stream (SSE) takes the session's frames, unless another
    /// connection (a WebSocket or another stream) already does: a second
    /// stream is refused and never steals the first.
    pub fn attach_stream(&self, session_id: &str, who: Option<&Authenticated>, tx: super::outbox::FrameTx) -> Result<(), StreamRefused> {
        let live = self.claimed(session_id, who).ok_or(StreamRefused::NotFound)?;
        if !live.session.outbox.attach_if_free(tx) {
            return Err(StreamRefused::InUse);
        }
        live.generation.fetch_add(1, Ordering::SeqCst);
        if let Some(due) = live.expiry.arm(live.expiry.expires_at(), &live.session.outbox) {
            let _ = live.session.outbox.push(due);
        }
        Ok(())
    }

    /// The event stream ended.
    pub fn stream_closed(self: &Arc<Self>, session_id: &str, tx: &super::outbox::FrameTx) {
        if let Some(live) = self.live(session_id) {
            live.session.outbox.detach(tx);
            self.schedule_expiry(session_id, &live);
        }
    }

    /// End a session for good: its agents go (or are orphaned), its
    /// subscriptions end, its token stops working.
    pub(crate) fn expire(&self, session_id: &str, reason: &str) {
        let Some(live) = self.sessions.lock().remove(session_id) else { return };
        map_observe::metrics::session(&live.session.tenant.id, -1.0);
        live.expiry.cancel();
        self.resume_tokens.lock().remove(&live.resume_token);
        live.session.outbox.close();
        let tenant = &live.session.tenant;
        tenant.fabric.leave(session_id);
        tenant.asks.session_closed(session_id);
        tenant.end_session(session_id, reason);
    }
}
