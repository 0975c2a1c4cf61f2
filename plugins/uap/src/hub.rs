//! The hub's live state and the life of a job. The plugin runs as a
//! singleton, so one instance holds the open streams, the proposals waiting
//! for an answer and the accepted sessions; what must outlive it (jobs,
//! their history, the queue, registered agents) is in the store, and a new
//! instance settles what the old one left open ([`recover`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use map_plugin_sdk::grpc::{self, Status};
use map_plugin_sdk::prelude::*;
use map_plugin_sdk::timers;
use prost::Message;
use serde_json::json;

use crate::model::{Agent, Job, Kind, Status as JobStatus};
use crate::proto;
use crate::repo::{self, ACTIVE, JOBS, QUEUE};
use crate::settings::Settings;

/// gRPC status codes the hub answers with.
pub mod code {
    pub const OK: u32 = 0;
    pub const CANCELLED: u32 = 1;
    pub const INVALID_ARGUMENT: u32 = 3;
    pub const NOT_FOUND: u32 = 5;
    pub const ALREADY_EXISTS: u32 = 6;
    pub const FAILED_PRECONDITION: u32 = 9;
    pub const ABORTED: u32 = 10;
    pub const INTERNAL: u32 = 13;
    pub const UNAVAILABLE: u32 = 14;
}

pub fn status(code: u32, message: impl Into<String>) -> Status {
    Status { code, message: message.into() }
}

/// What an open gRPC call is.
#[derive(Clone, Debug)]
pub enum Stream {
    Listen { agent: String },
    Run { session: String },
}

struct Proposal {
    job: String,
    agent: String,
    timer: Option<u64>,
}

struct Session {
    job: String,
    agent: String,
    kind: Kind,
    /// The `Execute` / `Translate` call, once the agent opened it.
    call: Option<u64>,
}

/// What the dispatcher needs of a queued job without reading it.
struct Queued {
    kind: Kind,
    job_type: String,
    declined_by: Vec<String>,
}

#[derive(Default)]
pub struct Hub {
    recovered: bool,
    settings: Settings,
    calls: HashMap<u64, Stream>,
    /// The open `Listen` call of each available agent.
    listeners: HashMap<String, u64>,
    /// Registered agents that are listening.
    agents: HashMap<String, Agent>,
    proposals: HashMap<String, Proposal>,
    sessions: HashMap<String, Session>,
    /// Proposals and sessions each agent holds.
    load: HashMap<String, usize>,
    /// Queued jobs in submission order.
    queue: BTreeMap<String, Queued>,
}

thread_local! {
    static HUB: RefCell<Hub> = RefCell::new(Hub::default());
}

/// Run `f` on the hub, settling what an earlier instance left first (`Err`
/// only when that fails).
pub fn with<R>(f: impl FnOnce(&mut Hub) -> R) -> Result<R> {
    HUB.with(|hub| {
        let mut hub = hub.borrow_mut();
        if !hub.recovered {
            hub.recover()?;
        }
        Ok(f(&mut hub))
    })
}

/// A new instance starts with no streams: jobs an earlier one had proposed
/// go back to the queue, runs it had accepted fail (their streams are gone;
/// agents reconnect and register again), and the queue is read back.
pub fn recover() -> Result<()> {
    with(|_| ())
}

impl Hub {
    fn recover(&mut self) -> Result<()> {
        self.settings = Settings::load();
        let mut active = Vec::new();
        ACTIVE.all().each(|e| {
            active.push(e.key);
            Ok(true)
        })?;
        for id in active {
            let Some(mut job) = JOBS.get(&id)? else { continue };
            match job.status {
                JobStatus::Proposed => {
                    job.status = JobStatus::Queued;
                    job.session_id = None;
                    self.record(&mut job, Some("the hub restarted before the agent answered".into()))?;
                }
                JobStatus::Running => self.finish_job(&mut job, JobStatus::Failed, "the hub restarted while the job ran".into(), None)?,
                _ => {}
            }
        }
        let mut queued = Vec::new();
        QUEUE.all().each(|e| {
            queued.push(e.key);
            Ok(true)
        })?;
        for job in JOBS.get_many(&queued)?.into_iter().flatten() {
            self.queue.insert(job.id.clone(), Queued { kind: job.kind, job_type: job.job_type.clone(), declined_by: job.declined_by.clone() });
        }
        self.recovered = true;
        Ok(())
    }

    pub fn stream(&self, call: u64) -> Option<Stream> {
        self.calls.get(&call).cloned()
    }

    pub fn session_kind(&self, session: &str) -> Option<Kind> {
        self.sessions.get(session).map(|s| s.kind)
    }

    pub fn is_available(&self, agent: &str) -> bool {
        self.listeners.contains_key(agent)
    }

    // ------------------------------------------------------------ jobs

    /// Save the job with a history entry; it is durable when this returns.
    fn record(&mut self, job: &mut Job, message: Option<String>) -> Result<()> {
        job.updated_at = repo::now();
        repo::save(job, repo::entry(job, message))?;
        self.count(job.status);
        Ok(())
    }

    /// The operator's view (`/metrics`): jobs that reached `status`, and the
    /// queue, proposals, sessions and listening agents now.
    fn count(&self, status: JobStatus) {
        metrics::count("uap_jobs_total", &[("status", status.name())], 1);
        metrics::gauge("uap_jobs_queued", &[], self.queue.len() as f64);
        metrics::gauge("uap_jobs_proposed", &[], self.proposals.len() as f64);
        metrics::gauge("uap_jobs_running", &[], self.sessions.len() as f64);
        metrics::gauge("uap_agents_listening", &[], self.listeners.len() as f64);
    }

    /// A new job: stored as queued, announced, then offered if someone can take it.
    pub fn submit(&mut self, mut job: Job, init: Vec<u8>) -> Result<Job> {
        let mut batch = Batch::new();
        batch.put(&repo::INITS, job.id.clone(), &init);
        repo::save_with(&job, repo::entry(&job, None), batch)?;
        events::emit("uap.job.submitted", &json!({"jobId": job.id, "job": job}));
        self.queue.insert(job.id.clone(), Queued { kind: job.kind, job_type: job.job_type.clone(), declined_by: Vec::new() });
        self.count(JobStatus::Queued);
        self.drain()?;
        Ok(JOBS.get(&job.id)?.unwrap_or_else(|| {
            job.status = JobStatus::Queued;
            job
        }))
    }

    /// Offer queued jobs, oldest first, to capable agents with room.
    fn drain(&mut self) -> Result<()> {
        let ids: Vec<String> = self.queue.keys().cloned().collect();
        for id in ids {
            if !self.listeners.keys().any(|a| self.has_room(a)) {
                break;
            }
            let Some(q) = self.queue.get(&id) else { continue };
            let Some(agent) = self.pick(q.kind, &q.job_type, &q.declined_by) else { continue };
            let Some(mut job) = JOBS.get(&id)? else {
                self.queue.remove(&id);
                continue;
            };
            self.propose(&mut job, agent)?;
        }
        Ok(())
    }

    fn has_room(&self, agent: &str) -> bool {
        self.load.get(agent).copied().unwrap_or(0) < self.settings.sessions_per_agent
    }

    /// The least busy available agent that can take the job and has not declined it.
    fn pick(&self, kind: Kind, job_type: &str, declined: &[String]) -> Option<String> {
        self.listeners
            .keys()
            .filter(|a| self.has_room(a) && !declined.contains(a))
            .filter(|a| self.agents.get(*a).is_some_and(|agent| agent.can_take(kind, job_type)))
            .min_by_key(|a| (self.load.get(*a).copied().unwrap_or(0), (*a).clone()))
            .cloned()
    }

    fn propose(&mut self, job: &mut Job, agent: String) -> Result<()> {
        let session = format!("{}-{}", job.kind.session_prefix(), ids::ulid());
        let details = match job.kind {
            Kind::Test => proto::session_proposal::Details::Test(proto::TestProposalDetails { r#type: job.job_type.clone() }),
            Kind::Translation => proto::session_proposal::Details::Translation(proto::TranslationProposalDetails { r#type: job.job_type.clone() }),
        };
        let proposal = proto::ListenResponse {
            event: Some(proto::listen_response::Event::SessionProposal(proto::SessionProposal { session_id: session.clone(), details: Some(details) })),
        };
        let listener = self.listeners[&agent];
        if let Err(e) = grpc::write(listener, &proposal.encode_to_vec()) {
            // Its stream is going away; `closed` will follow. Leave the job queued.
            log::warn(&format!("could not propose {} to {agent}: {e}", job.id));
            return Ok(());
        }
        let timer = timers::schedule(self.settings.acceptance_timeout_ms, &format!("accept/{session}"))
            .map_err(|e| log::warn(&format!("no acceptance timer for {session}: {e}")))
            .ok();
        self.queue.remove(&job.id);
        *self.load.entry(agent.clone()).or_default() += 1;
        self.proposals.insert(session.clone(), Proposal { job: job.id.clone(), agent: agent.clone(), timer });
        job.status = JobStatus::Proposed;
        job.agent = Some(agent.clone());
        job.session_id = Some(session.clone());
        self.record(job, None)?;
        events::emit("uap.job.proposed", &json!({"jobId": job.id, "agent": agent, "sessionId": session}));
        Ok(())
    }

    fn unload(&mut self, agent: &str) {
        if let Some(n) = self.load.get_mut(agent) {
            *n = n.saturating_sub(1);
        }
    }

    /// End a job for good: stored, announced (`uap.job.<status>`), and no
    /// longer queued, proposed or running anywhere.
    fn finish_job(&mut self, job: &mut Job, status: JobStatus, reason: String, result: Option<serde_json::Value>) -> Result<()> {
        self.queue.remove(&job.id);
        job.status = status;
        if status != JobStatus::Completed {
            job.error = Some(reason.clone());
        }
        if result.is_some() {
            job.result = result;
        }
        self.record(job, Some(reason.clone()))?;
        let mut data = json!({"jobId": job.id, "status": status.name(), "job": job});
        if status != JobStatus::Completed {
            data["reason"] = json!(reason);
        }
        events::emit(&format!("uap.job.{}", status.name()), &data);
        Ok(())
    }

    /// Put a proposed job back in the queue (the agent said no, did not
    /// answer, or went away) and offer it again.
    fn requeue(&mut self, session: &str, declined: bool, reason: String) -> Result<()> {
        let Some(p) = self.proposals.remove(session) else { return Ok(()) };
        if let Some(t) = p.timer {
            timers::cancel(t);
        }
        self.unload(&p.agent);
        let Some(mut job) = JOBS.get(&p.job)? else { return Ok(()) };
        if declined && !job.declined_by.contains(&p.agent) {
            job.declined_by.push(p.agent.clone());
        }
        job.status = JobStatus::Queued;
        job.session_id = None;
        self.record(&mut job, Some(reason.clone()))?;
        events::emit("uap.job.status", &json!({"jobId": job.id, "status": "queued", "agent": p.agent, "reason": reason}));
        self.queue.insert(job.id.clone(), Queued { kind: job.kind, job_type: job.job_type.clone(), declined_by: job.declined_by.clone() });
        self.drain()
    }

    /// `uap/cancel`: a queued or proposed job is never offered again; a running one is ended.
    pub fn cancel(&mut self, id: &str, by: &str) -> Result<Job> {
        let mut job = JOBS.get(id)?.ok_or_else(|| crate::error::job_not_found(id))?;
        if job.status.is_terminal() {
            return Err(crate::error::job_finished(id, job.status.name()));
        }
        if let Some(session) = job.session_id.clone() {
            if let Some(p) = self.proposals.remove(&session) {
                if let Some(t) = p.timer {
                    timers::cancel(t);
                }
                self.unload(&p.agent);
            }
            if let Some(s) = self.sessions.remove(&session) {
                self.unload(&s.agent);
                if let Some(call) = s.call {
                    self.calls.remove(&call);
                    let _ = grpc::finish(call, &status(code::CANCELLED, format!("job {id} was cancelled by {by}")));
                }
            }
        }
        self.finish_job(&mut job, JobStatus::Cancelled, format!("cancelled by {by}"), None)?;
        self.drain()?;
        Ok(job)
    }

    // ------------------------------------------------------------ agents

    /// An agent opened `Listen`: it is available, and queued work may go to it.
    pub fn listen(&mut self, call: u64, agent: Agent) -> Result<()> {
        let id = agent.client_id.clone();
        // A newer stream of the same agent takes over; the older one is ended.
        if let Some(old) = self.listeners.insert(id.clone(), call) {
            self.calls.remove(&old);
            let _ = grpc::finish(old, &status(code::ABORTED, "a newer Listen stream of this agent replaced this one"));
        }
        self.calls.insert(call, Stream::Listen { agent: id.clone() });
        self.agents.insert(id.clone(), agent);
        events::emit("uap.agent.available", &json!({"clientId": id, "available": true}));
        self.drain()
    }

    /// One `ListenRequest` from `agent`.
    pub fn listen_message(&mut self, agent: &str, body: &[u8]) -> Result<(), Status> {
        let req = proto::ListenRequest::decode(body).map_err(|e| status(code::INVALID_ARGUMENT, format!("undecodable ListenRequest: {e}")))?;
        match req.event {
            None => Err(status(code::INVALID_ARGUMENT, "a ListenRequest needs `ready` or `session_acceptance`")),
            Some(proto::listen_request::Event::Ready(_)) => Ok(()),
            Some(proto::listen_request::Event::SessionAcceptance(a)) => self.answer(agent, a),
        }
    }

    fn answer(&mut self, agent: &str, a: proto::SessionAcceptance) -> Result<(), Status> {
        if self.proposals.get(&a.session_id).is_none_or(|p| p.agent != agent) {
            return Err(status(code::NOT_FOUND, format!("session {:?} was not proposed to this agent, or its proposal lapsed", a.session_id)));
        }
        let done = if a.accepted {
            self.accept(agent, &a.session_id)
        } else {
            let reason = if a.reason.is_empty() { format!("{agent} declined") } else { format!("{agent} declined: {}", a.reason) };
            self.requeue(&a.session_id, true, reason)
        };
        done.map_err(|e| status(code::INTERNAL, format!("the hub could not record the answer: {}", e.message())))
    }

    fn accept(&mut self, agent: &str, session: &str) -> Result<()> {
        let p = self.proposals.remove(session).expect("checked by the caller");
        if let Some(t) = p.timer {
            timers::cancel(t);
        }
        let Some(mut job) = JOBS.get(&p.job)? else { return Ok(()) };
        self.sessions.insert(session.to_string(), Session { job: job.id.clone(), agent: agent.to_string(), kind: job.kind, call: None });
        job.status = JobStatus::Running;
        self.record(&mut job, Some(format!("accepted by {agent}")))?;
        let ready = proto::ListenResponse { event: Some(proto::listen_response::Event::SessionReady(proto::SessionReady { session_id: session.to_string() })) };
        if let Some(&listener) = self.listeners.get(agent) {
            let _ = grpc::write(listener, &ready.encode_to_vec());
        }
        events::emit("uap.job.status", &json!({"jobId": job.id, "status": "running", "agent": agent, "sessionId": session}));
        Ok(())
    }

    /// The acceptance timer of a proposal fired.
    pub fn lapse(&mut self, session: &str) -> Result<()> {
        let Some(p) = self.proposals.get(session) else { return Ok(()) };
        let reason = format!("{} did not answer within {} ms", p.agent, self.settings.acceptance_timeout_ms);
        self.requeue(session, true, reason)
    }

    /// A call ended, however it ended.
    pub fn closed(&mut self, call: u64) -> Result<()> {
        match self.calls.remove(&call) {
            Some(Stream::Listen { agent }) if self.listeners.get(&agent) == Some(&call) => self.gone(&agent),
            Some(Stream::Run { session }) => match self.sessions.get(&session) {
                Some(s) if s.call == Some(call) => self.fail_session(&session, "the session stream ended before a result".into()),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// An agent's `Listen` closed: its proposals go to others, its runs fail.
    fn gone(&mut self, agent: &str) -> Result<()> {
        self.listeners.remove(agent);
        self.agents.remove(agent);
        events::emit("uap.agent.available", &json!({"clientId": agent, "available": false}));
        let proposed: Vec<String> = self.proposals.iter().filter(|(_, p)| p.agent == agent).map(|(s, _)| s.clone()).collect();
        for session in proposed {
            self.requeue(&session, false, format!("{agent} disconnected before answering"))?;
        }
        let running: Vec<String> = self.sessions.iter().filter(|(_, s)| s.agent == agent).map(|(s, _)| s.clone()).collect();
        for session in running {
            if let Some(call) = self.sessions.get(&session).and_then(|s| s.call) {
                self.calls.remove(&call);
                let _ = grpc::finish(call, &status(code::UNAVAILABLE, "the agent disconnected"));
            }
            self.fail_session(&session, format!("agent disconnected: {agent}'s Listen stream closed"))?;
        }
        self.load.remove(agent);
        Ok(())
    }

    fn fail_session(&mut self, session: &str, reason: String) -> Result<()> {
        let Some(s) = self.sessions.remove(session) else { return Ok(()) };
        self.unload(&s.agent);
        if let Some(mut job) = JOBS.get(&s.job)? {
            if !job.status.is_terminal() {
                self.finish_job(&mut job, JobStatus::Failed, reason, None)?;
            }
        }
        self.drain()
    }

    // ------------------------------------------------------------ sessions

    /// The agent opened `Execute` / `Translate` for an accepted session: it
    /// gets the job's init message at once, as submitted.
    pub fn run(&mut self, call: u64, kind: Kind, session: &str) -> Result<(), Status> {
        let s =
            self.sessions.get_mut(session).filter(|s| s.kind == kind).ok_or_else(|| {
                status(code::NOT_FOUND, format!("no accepted {} session {session:?}", if kind == Kind::Test { "test" } else { "translation" }))
            })?;
        if s.call.is_some() {
            return Err(status(code::ALREADY_EXISTS, format!("session {session} already has its stream open")));
        }
        let init = repo::INITS.get(&s.job).map_err(|e| status(code::INTERNAL, e.message().to_string()))?;
        let init = init.ok_or_else(|| status(code::INTERNAL, format!("the payloads of job {} are missing", s.job)))?;
        s.call = Some(call);
        self.calls.insert(call, Stream::Run { session: session.to_string() });
        grpc::write(call, &init).map_err(|e| status(code::UNAVAILABLE, e))
    }

    /// One `TestResponse` / `TranslationResponse` of a session.
    pub fn report(&mut self, session: &str, report: Report) -> Result<Option<Status>> {
        let Some(s) = self.sessions.get(session) else { return Ok(Some(status(code::NOT_FOUND, format!("session {session} is over")))) };
        let Some(mut job) = JOBS.get(&s.job)? else { return Ok(Some(status(code::NOT_FOUND, "the job is gone"))) };
        let agent = s.agent.clone();
        match report {
            Report::Status { state, message } => {
                let mut entry = repo::entry(&job, (!message.is_empty()).then(|| message.clone()));
                entry.state = Some(state.clone());
                job.updated_at = repo::now();
                repo::save(&job, entry)?;
                events::emit("uap.job.status", &json!({"jobId": job.id, "status": job.status.name(), "agent": agent, "state": state, "message": message}));
                Ok(None)
            }
            Report::Telemetry(t) => {
                let mut entry = repo::entry(&job, None);
                entry.telemetry = Some(t.clone());
                repo::save(&job, entry)?;
                events::emit("uap.job.telemetry", &json!({"jobId": job.id, "agent": agent, "telemetry": t}));
                Ok(None)
            }
            Report::Result { passed, message, result } => {
                let s = self.sessions.remove(session).expect("looked up above");
                self.unload(&s.agent);
                if let Some(call) = s.call {
                    self.calls.remove(&call);
                    let _ = grpc::finish(call, &status(code::OK, ""));
                }
                let (status, reason) = match passed {
                    true => (JobStatus::Completed, if message.is_empty() { "completed".to_string() } else { message }),
                    false => (JobStatus::Failed, if message.is_empty() { "the agent reported failure".to_string() } else { message }),
                };
                self.finish_job(&mut job, status, reason, Some(result))?;
                self.drain()?;
                Ok(None)
            }
        }
    }

    /// The agent closed its side of a session without a result.
    pub fn ended_early(&mut self, session: &str) -> Result<Status> {
        if let Some(call) = self.sessions.get(session).and_then(|s| s.call) {
            self.calls.remove(&call);
        }
        self.fail_session(session, "the agent ended the session without a result".into())?;
        Ok(status(code::FAILED_PRECONDITION, "the session ended without a result"))
    }
}

/// What an agent reports in a session, decoded.
pub enum Report {
    Status {
        state: String,
        message: String,
    },
    Telemetry(serde_json::Value),
    /// `passed`: its status says COMPLETED.
    Result {
        passed: bool,
        message: String,
        result: serde_json::Value,
    },
}
