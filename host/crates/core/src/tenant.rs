//! A tenant: a wall with its own directory, fabric and extensions. Nothing
//! is shared across tenants. Also the facade through which anything acting
//! in a tenant (method handlers, plugin imports) sends, emits and notifies.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::directory::Directory;
use super::events::NewEvent;
use super::extensions::{Extensions, NoExtensions};
use super::fabric::{Fabric, LocalFabric};
use super::federation::Federation;
use super::outbox::{Frame, Outbox};
use super::send::{self, Outgoing, Sent};
use super::Active;
use map_config::LimitsConfig;
use map_protocol::rpc::RpcError;

/// The tenants of this gateway and the credentials that lead into them.
pub type Tenants = crate::tenants::Tenants<Tenant>;
/// A principal in one of this gateway's tenants.
pub type Authenticated = crate::tenants::Authenticated<Tenant>;

pub struct Tenant {
    pub id: String,
    pub registry: Directory,
    pub fabric: Arc<dyn Fabric>,
    extensions: RwLock<Arc<dyn Extensions>>,
    /// This tenant as a system of a federation, if it is one: set once at
    /// start (read on every request: a plain load, no lock).
    federation: std::sync::OnceLock<Arc<dyn Federation>>,
    /// Which sends the observers may want (see `may_observe`), kept beside
    /// the set so a send without interest skips the lock.
    observed: AtomicU8,
    /// Requests the gateway made to participants, waiting for their answers.
    pub asks: super::asks::Asks,
    /// `[workspace]`, set once when the gateway is assembled (what `map/connect` advertises).
    workspace: std::sync::OnceLock<map_config::WorkspaceConfig>,
    /// The credentials broker (`cred/*`), where the tenant configures one; swapped on reload.
    credentials: RwLock<Option<Arc<crate::credentials::Broker>>>,
    /// Some session has had its permissions changed (`map/permissions/update`):
    /// until then requests skip the check (see `permissions::check`).
    pub restricted: std::sync::atomic::AtomicBool,
}

const OBSERVE_NONE: u8 = 0;
const OBSERVE_WITH_META: u8 = 1;
const OBSERVE_ALL: u8 = 2;

impl Tenant {
    pub fn new(id: &str, limits: &LimitsConfig) -> Tenant {
        Tenant::with_fabric(id, Arc::new(LocalFabric::new(limits.replay_events, limits.replay_bytes)))
    }

    /// A tenant whose deliveries and events go through `fabric`.
    pub fn with_fabric(id: &str, fabric: Arc<dyn Fabric>) -> Tenant {
        Tenant {
            id: id.to_string(),
            registry: Directory::default(),
            fabric,
            extensions: RwLock::new(Arc::new(NoExtensions)),
            federation: std::sync::OnceLock::new(),
            observed: AtomicU8::new(OBSERVE_NONE),
            asks: Default::default(),
            workspace: std::sync::OnceLock::new(),
            credentials: RwLock::new(None),
            restricted: Default::default(),
        }
    }

    /// The tenant's current extensions (a snapshot: a swap does not affect it).
    pub fn extensions(&self) -> Arc<dyn Extensions> {
        self.extensions.read().clone()
    }

    /// The tenant's credentials broker, if it has one.
    pub fn credentials(&self) -> Option<Arc<crate::credentials::Broker>> {
        self.credentials.read().clone()
    }

    pub fn set_credentials(&self, broker: Option<Arc<crate::credentials::Broker>>) {
        *self.credentials.write() = broker;
    }

    /// The workspace extension's settings (the defaults until the gateway sets them).
    pub fn workspace_config(&self) -> map_config::WorkspaceConfig {
        self.workspace.get().cloned().unwrap_or_default()
    }

    /// Set the workspace extension's settings (once; a later call changes nothing).
    pub fn set_workspace_config(&self, config: map_config::WorkspaceConfig) {
        let _ = self.workspace.set(config);
    }

    pub fn federation(&self) -> Option<&Arc<dyn Federation>> {
        self.federation.get()
    }

    /// Make the tenant a system (once; a later call changes nothing).
    pub fn set_federation(&self, federation: Arc<dyn Federation>) {
        let _ = self.federation.set(federation);
    }

    pub fn set_extensions(&self, set: Arc<dyn Extensions>) {
        let mut current = self.extensions.write();
        let observed = match (set.observes_any(false), set.observes_any(true)) {
            (true, _) => OBSERVE_ALL,
            (false, true) => OBSERVE_WITH_META,
            _ => OBSERVE_NONE,
        };
        self.observed.store(observed, Ordering::Relaxed);
        *current = set;
    }

    /// Whether an observer may want a send (with or without `meta`); when
    /// true, `extensions().observes(meta)` decides.
    pub fn may_observe(&self, has_meta: bool) -> bool {
        match self.observed.load(Ordering::Relaxed) {
            OBSERVE_ALL => true,
            OBSERVE_WITH_META => has_meta,
            _ => false,
        }
    }
}

impl Tenant {
    /// An identity for acting in this tenant outside any session (`plugin:<name>`, say).
    pub fn system_actor(self: &Arc<Self>, name: &str) -> Active {
        Active {
            tenant: self.clone(),
            session_id: name.to_string(),
            participant_id: name.to_string(),
            participant_type: "system".into(),
            principal: name.into(),
            outbox: Arc::new(Outbox::new(1, 1)),
        }
    }

    /// Send a message as `actor`, exactly like `map/send`: the JSON text of
    /// its result (later, when another cluster node must confirm a delivery).
    pub fn send(&self, actor: &Active, message: Outgoing) -> Result<Sent, RpcError> {
        send::send_message(actor, message)
    }

    /// Record an event and push it to matching subscriptions.
    pub fn emit(&self, event: NewEvent) {
        self.fabric.publish(event);
    }

    /// The sessions that speak for these agent or participant ids now (see `Registry::session_for`).
    pub fn sessions_of(&self, ids: &[String]) -> Vec<String> {
        self.sessions_for(ids, None)
    }

    /// `sessions_of(ids)` plus every session that declared `true` at the
    /// capability path (see `Registry::sessions_with_capability`), read in
    /// one hold of the directory.
    pub fn sessions_for(&self, ids: &[String], capability: Option<&str>) -> Vec<String> {
        let mut reg = self.registry.lock();
        let mut sessions: Vec<String> = ids.iter().filter_map(|id| reg.session_for(id).map(|s| s.id.clone())).collect();
        if let Some(path) = capability {
            sessions.extend(reg.sessions_with_capability(path));
        }
        sessions.sort();
        sessions.dedup();
        sessions
    }

    /// The sessions that speak for these participant or agent ids now and,
    /// given a capability path, declared that group (see
    /// `registry::declares_group`), but for `skip`; each once.
    pub fn sessions_declaring(&self, ids: &[String], capability: Option<&str>, skip: Option<&str>) -> Vec<String> {
        let reg = self.registry.lock();
        let mut sessions: Vec<String> = ids
            .iter()
            .filter_map(|id| reg.participants.get(id).or_else(|| reg.agents.get(id).map(|a| &a.session)))
            .filter(|s| !s.is_empty() && Some(s.as_str()) != skip)
            .filter(|s| {
                capability.is_none_or(|path| reg.sessions.get(s.as_str()).is_some_and(|info| super::registry::declares_group(&info.capabilities, path)))
            })
            .cloned()
            .collect();
        sessions.sort();
        sessions.dedup();
        sessions
    }

    /// For each participant or agent id, since when it has been connected
    /// (see `Registry::connected_since`).
    pub fn connected_since(&self, ids: &[String]) -> Vec<Option<u64>> {
        let reg = self.registry.lock();
        ids.iter().map(|id| reg.connected_since(id)).collect()
    }

    /// An agent as `actor` may see it (as `map/agents/get` shows it), as JSON text.
    pub fn agent_as_seen_by(&self, actor: &Active, id: &str) -> Option<String> {
        let reg = self.registry.lock();
        reg.visible_agent(id, &actor.viewer()).ok().and_then(|a| serde_json::to_string(a).ok())
    }

    /// The session of a participant, if it has one.
    pub fn session_of_participant(&self, participant_id: &str) -> Option<String> {
        self.registry.lock().participants.get(participant_id).cloned()
    }

    /// The first agent a session owns.
    pub fn first_agent(&self, session_id: &str) -> Option<String> {
        self.registry.lock().sessions.get(session_id).and_then(|s| s.agents.first().cloned())
    }

    /// Queue a frame for a session; false when its queue is full or gone.
    pub fn notify(&self, session_id: &str, frame: Frame) -> bool {
        self.fabric.deliver(session_id, frame).is_ok()
    }
}

/// Each tenant's broker as a configuration says: built whole (a secret that
/// cannot be read fails them all) before any is swapped in, at start and on reload.
pub(crate) struct Brokers(Vec<(String, Option<Arc<crate::credentials::Broker>>)>);

impl Brokers {
    pub(crate) fn build(config: &map_config::Config) -> anyhow::Result<Brokers> {
        let mut brokers = Vec::new();
        for t in &config.tenants {
            let broker = t.credentials.as_ref().map(|c| crate::credentials::Broker::from_config(&t.id, c)).transpose()?;
            brokers.push((t.id.clone(), broker.map(Arc::new)));
        }
        Ok(Brokers(brokers))
    }

    pub(crate) fn install(self, tenants: &Tenants) {
        for (id, broker) in self.0 {
            if let Some(tenant) = tenants.get(&id) {
                tenant.set_credentials(broker);
            }
        }
    }
}
