//! Reloads run in the background: `POST /admin/reload` and SIGHUP start one
//! and are answered at once, and `GET /admin/reload[/ID]` tells how it went.
//! One reload runs at a time. One asked for while another runs is queued
//! behind it; one asked for while a reload is already queued is that queued
//! one (it reads the configuration when it starts, so it takes in every edit
//! made before). Until a reload swaps the new plugins in, the old ones serve.

use std::collections::VecDeque;
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
        Arc::new(Job { id: crate::ids::ulid(), requested_at: crate::ids::now_ms(), behind, state: watch::Sender::new(State::Running) })
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

/// The gateway's reloads: the one running, the one queued, recent ones.
#[derive(Default)]
pub struct Reloads {
    inner: Mutex<Inner>,
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
        let at = crate::ids::now_ms();
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
            let result = match tokio::spawn(async move { gw.reload().await }).await {
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
