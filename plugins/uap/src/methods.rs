//! The MAP side: `uap/submit`, `uap/get`, `uap/list`, `uap/cancel`, `uap/agents`.

use map_plugin_sdk::prelude::*;
use prost::Message;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error;
use crate::hub;
use crate::model::{Job, Kind, Status};
use crate::proto;
use crate::repo::{self, AGENTS, HISTORY, JOBS};
use crate::values;

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubmitParams {
    kind: Kind,
    #[serde(rename = "type")]
    job_type: String,
    #[serde(default)]
    payloads: Vec<Value>,
    target_format: Option<String>,
}

/// `uap/submit`: a new job, queued until a capable agent accepts it.
pub fn submit(call: &Call) -> Result<Reply> {
    let p: SubmitParams = call.params()?;
    if p.job_type.is_empty() {
        return Err(Error::invalid_params("type must name the kind of test or translation"));
    }
    let payloads = p
        .payloads
        .into_iter()
        .enumerate()
        .map(|(i, v)| values::payload(v).map_err(|e| Error::invalid_params(format!("payloads[{i}]: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let init = match (p.kind, &p.target_format) {
        (Kind::Test, None) => proto::TestInit { test_type: p.job_type.clone(), payloads }.encode_to_vec(),
        (Kind::Test, Some(_)) => return Err(Error::invalid_params("targetFormat applies to translation jobs only")),
        (Kind::Translation, Some(f)) if !f.is_empty() => proto::TranslationInit { target_format: f.clone(), payloads }.encode_to_vec(),
        (Kind::Translation, _) => return Err(Error::invalid_params("a translation job needs targetFormat")),
    };
    let now = repo::now();
    let job = Job {
        id: ids::new_id("job"),
        kind: p.kind,
        job_type: p.job_type,
        status: Status::Queued,
        target_format: p.target_format,
        agent: None,
        session_id: None,
        error: None,
        result: None,
        declined_by: Vec::new(),
        submitted_by: Some(call.caller.participant_id.clone()),
        created_at: now.clone(),
        updated_at: now,
    };
    let job = hub::with(|h| h.submit(job, init))??;
    Reply::json(&json!({ "job": job }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JobParams {
    job_id: String,
}

/// `uap/get`: the job and its history (status changes, agent reports, telemetry).
pub fn get(call: &Call) -> Result<Reply> {
    let p: JobParams = call.params()?;
    let job = hub::with(|_| JOBS.get(&p.job_id))??.ok_or_else(|| error::job_not_found(&p.job_id))?;
    let history = HISTORY.prefix(repo::history_prefix(&job.id)).values()?;
    Reply::json(&json!({ "job": job, "history": history }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListParams {
    status: Option<Status>,
    limit: Option<u32>,
    cursor: Option<String>,
}

/// `uap/list`: jobs, newest first, optionally of one status, a page at a time.
pub fn list(call: &Call) -> Result<Reply> {
    let p: ListParams = call.params()?;
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(Error::invalid_params(format!("limit must be between 1 and {MAX_LIMIT}")));
    }
    hub::with(|_| ())?;
    let (jobs, next) = repo::newest_first(|job| p.status.is_none_or(|s| s == job.status), p.cursor, limit as usize)?;
    let mut out = json!({ "jobs": jobs, "hasMore": next.is_some() });
    if let Some(cursor) = next {
        out["nextCursor"] = json!(cursor);
    }
    Reply::json(&out)
}

/// `uap/cancel`: end a job that has not ended.
pub fn cancel(call: &Call) -> Result<Reply> {
    let p: JobParams = call.params()?;
    let job = hub::with(|h| h.cancel(&p.job_id, &call.caller.participant_id))??;
    Reply::json(&json!({ "job": job }))
}

/// `uap/agents`: registered agents, and whether each is listening now.
pub fn agents(call: &Call) -> Result<Reply> {
    let _: Value = call.params()?;
    let agents = AGENTS.all().values()?;
    let listed: Vec<Value> = hub::with(|h| {
        agents
            .into_iter()
            .map(|a| json!({"clientId": a.client_id, "displayName": a.display_name, "capabilities": a.capabilities, "available": h.is_available(&a.client_id)}))
            .collect()
    })?;
    Reply::json(&json!({ "agents": listed }))
}
