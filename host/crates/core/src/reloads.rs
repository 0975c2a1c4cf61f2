//! Reloads run in the background: `POST /admin/reload` and SIGHUP start one
//! and are answered at once, and `GET /admin/reload[/ID]` tells how it went.
//! One reload runs at a time. One asked for while another runs is queued
//! behind it; one asked for while a reload is already queued is that queued
//! one (it reads the configuration when it starts, so it takes in every edit
//! made before). Until a reload swaps the new plugins in, the old ones serve.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::Gateway;

/// Reloads remembered for `GET /admin/reload/ID`, newest kept.
const KEPT: usize = 16;

/// How a reload stands.
#[derive(Clone, Debug)]
pub enum State {
    /// Running, or queued behind the one running.
    Running,
    /// Swapped in: the plugin status then.
    Done { at: u64, status: Value },
    /// Nothing was swapped: why.
    Failed { at: u64, error: String },
}

/// One reload.
pub struct Job {
    pub id: String,
    requested_at: u64,
    /// The reload it was queued behind.
    behind: Option<String>,
    state: watch::Sender<State>,
}

impl Job {
    fn new(behind: Option<String>) -> Arc<Job> {
        Arc::new(Job { id: map_protocol::ids::ulid(), requested_at: map_protocol::ids::now_ms(), behind, state: watch::Sender::new(State::Running) })
    }

    /// Wait until it is done or failed.
    pub async fn ended(&self) -> State {
        let mut rx = self.state.subscribe();
        let ended = rx.wait_for(|s| !matches!(s, State::Running)).await.map(|s| s.clone());
        // The sender lives in `self`, so the channel cannot close.
        ended.unwrap_or(State::Running)
    }

    /// `{id, state, requestedAt, queuedBehind?, finishedAt?, error? | status?}`.
    pub fn view(&self) -> Value {
        self.view_of(&self.state.borrow())
    }

    /// As it was when asked for (running), however soon it ended.
    pub fn accepted(&self) -> Value {
        self.view_of(&State::Running)
    }

    fn view_of(&self, state: &State) -> Value {
        let mut v = json!({"id": self.id, "requestedAt": self.requested_at});
        if let Some(b) = &self.behind {
            v["queuedBehind"] = json!(b);
        }
        match state {
            State::Running => v["state"] = json!("running"),
            State::Done { at, status } => {
                v["state"] = json!("done");
                v["finishedAt"] = json!(at);
                v["status"] = status.clone();
            }
            State::Failed { at, error } => {
                v["state"] = json!("failed");
                v["finishedAt"] = json!(at);
                v["error"] = json!(error);
            }
        }
        v
    }
}

/// Component digests by plugin (or `name source` for a tenant's own version).
pub type Pins = BTreeMap<String, String>;

/// Where a reload's outcome goes beyond this gateway: in a cluster, to
/// every node, which then loads the same digests (see `cluster::rollout`).
pub trait Rollout: Send + Sync {
    /// This node reloaded (a rollout, or a `rollback`) and now serves
    /// `pins`, having served `previous`: tell the others; the rollout's id.
    fn announce(&self, kind: &'static str, pins: Pins, previous: Pins) -> String;
    /// A rollout with every node's report, the latest or by id.
    fn view(&self, id: Option<&str>) -> Option<Value>;
    /// The digests the latest rollout replaced (what a rollback goes back to).
    fn previous(&self) -> Option<Pins>;
}

/// The gateway's reloads: the one running, the one queued, recent ones.
#[derive(Default)]
pub struct Reloads {
    inner: Mutex<Inner>,
    rollout: std::sync::OnceLock<Arc<dyn Rollout>>,
}

#[derive(Default)]
struct Inner {
    recent: VecDeque<Arc<Job>>,
    running: Option<Arc<Job>>,
    queued: Option<Arc<Job>>,
}

impl Reloads {
    /// The job for a new request, and whether the caller starts it now.
    fn request(&self) -> (Arc<Job>, bool) {
        let mut inner = self.inner.lock();
        if let Some(q) = &inner.queued {
            return (q.clone(), false);
        }
        let job = Job::new(inner.running.as_ref().map(|r| r.id.clone()));
        if inner.recent.len() == KEPT {
            inner.recent.pop_front();
        }
        inner.recent.push_back(job.clone());
        let start = inner.running.is_none();
        match start {
            true => inner.running = Some(job.clone()),
            false => inner.queued = Some(job.clone()),
        }
        (job, start)
    }

    /// `job` ended so: the queued job, now running, if there is one.
    fn finish(&self, job: &Job, result: Result<Value, String>) -> Option<Arc<Job>> {
        let at = map_protocol::ids::now_ms();
        job.state.send_replace(match result {
            Ok(status) => State::Done { at, status },
            Err(error) => State::Failed { at, error },
        });
        let mut inner = self.inner.lock();
        inner.running = inner.queued.take();
        inner.running.clone()
    }

    /// A job by id, or the latest one.
    fn find(&self, id: Option<&str>) -> Option<Arc<Job>> {
        let inner = self.inner.lock();
        match id {
            Some(id) => inner.recent.iter().find(|j| j.id == id).cloned(),
            None => inner.recent.back().cloned(),
        }
    }
}

impl Gateway {
    /// Send every reload's outcome to `rollout` from now on (once).
    pub fn set_rollout(&self, rollout: Arc<dyn Rollout>) {
        let _ = self.reloads.rollout.set(rollout);
    }

    /// Re-read the configuration file and swap in its extensions, now (see
    /// `start_reload` for one in the background). Connections stay open;
    /// calls in flight finish on the extensions they started with.
    pub async fn reload(&self) -> anyhow::Result<Value> {
        self.reload_pinned(Pins::new(), Pins::new()).await
    }

    /// `reload`, loading for each plugin in `pins` the component with that
    /// digest (from its file or source, else from the components this node
    /// kept): how a cluster node follows a rollout. The components a
    /// rollback would pin (`rollback`) stay kept.
    pub async fn reload_pinned(&self, pins: Pins, rollback: Pins) -> anyhow::Result<Value> {
        let Some(host) = &self.extensions else { anyhow::bail!("this gateway runs without plugins") };
        let mut config = match &self.config_path {
            Some(p) => map_config::Config::load(p)?,
            None => self.config.clone(),
        };
        config.keep_digests = rollback.into_values().collect();
        config.pins = pins;
        let brokers = super::tenant::Brokers::build(&config).inspect_err(|e| host.note_error(e))?;
        let policies = super::agent_permissions::Policies::build(&config).inspect_err(|e| host.note_error(e))?;
        if let Err(e) = host.apply(&config, &self.tenants).await {
            host.note_error(&e);
            return Err(e);
        }
        brokers.install(&self.tenants);
        policies.install(&self.tenants);
        Ok(host.status().await)
    }

    /// The digests this gateway serves now.
    pub async fn digests(&self) -> Pins {
        match &self.extensions {
            Some(host) => host.digests(),
            None => Pins::new(),
        }
    }

    /// A reload (pinned or not), told to the cluster when it succeeds: the
    /// plugin status, with the rollout's id in a cluster.
    pub async fn reload_and_announce(&self, kind: &'static str, pins: Pins) -> anyhow::Result<Value> {
        let previous = self.digests().await;
        // In a cluster, a rollback may return to what served before.
        let rollback = if self.reloads.rollout.get().is_some() { previous.clone() } else { Pins::new() };
        let mut status = self.reload_pinned(pins, rollback).await?;
        if let Some(rollout) = self.reloads.rollout.get() {
            status["rollout"] = serde_json::json!(rollout.announce(kind, self.digests().await, previous));
        }
        Ok(status)
    }

    /// A rollout across the cluster, the latest or by id (none outside a cluster).
    pub fn rollout_view(&self, id: Option<&str>) -> Option<Value> {
        self.reloads.rollout.get()?.view(id)
    }

    /// Go back, on every node, to the digests the latest rollout replaced: the rollout's view.
    pub async fn rollback(&self) -> anyhow::Result<Value> {
        let Some(rollout) = self.reloads.rollout.get() else { anyhow::bail!("not a cluster: there is no rollout to roll back") };
        let Some(previous) = rollout.previous() else { anyhow::bail!("no rollout to roll back since this node started") };
        let status = self.reload_and_announce("rollback", previous).await?;
        let id = status["rollout"].as_str().unwrap_or_default().to_string();
        Ok(rollout.view(Some(&id)).unwrap_or(status))
    }

    /// Reload in the background (or queued behind the reload running): its job.
    pub fn start_reload(self: &Arc<Self>) -> Arc<Job> {
        let (job, start) = self.reloads.request();
        if start {
            tokio::spawn(self.clone().run_reloads(job.clone()));
        }
        job
    }

    /// A reload by id, or the latest one.
    pub fn reload_job(&self, id: Option<&str>) -> Option<Arc<Job>> {
        self.reloads.find(id)
    }

    /// Run `job`, then each reload queued meanwhile.
    async fn run_reloads(self: Arc<Self>, mut job: Arc<Job>) {
        loop {
            let gw = self.clone();
            // A task of its own: a panic fails this reload, not the ones after it.
            let result = match tokio::spawn(async move { gw.reload_and_announce("rollout", Pins::new()).await }).await {
                Ok(r) => r.map_err(|e| format!("{e:#}")),
                Err(e) => Err(format!("the reload stopped: {e}")),
            };
            match &result {
                Ok(_) => tracing::info!(reload = %job.id, "configuration reloaded"),
                Err(e) => tracing::error!(reload = %job.id, error = %e, "reload failed; the previous plugins stay"),
            }
            match self.reloads.finish(&job, result) {
                Some(next) => job = next,
                None => return,
            }
        }
    }
}
