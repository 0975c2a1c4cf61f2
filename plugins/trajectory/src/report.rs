//! `trajectory/checkpoint`: an agent reports a checkpoint, optionally with
//! content artifacts. The record, its index entries and its chunks are
//! written in one atomic commit; then `trajectory.checkpoint` is emitted.

use map_plugin_sdk::{events, ids, Call, Error, Reply, Result};
use serde::Serialize;
use serde_json::json;

use crate::access::{self, Capability};
use crate::artifacts::{self, Encoded};
use crate::model::{Artifact, Checkpoint, Record};
use crate::params::{check_id, Report, MAX_ARTIFACTS};
use crate::settings::Settings;
use crate::{keys, repo};

/// What the reporter gets back: the stored checkpoint, plus a summary of the
/// artifacts kept (so it can check their checksums).
#[derive(Serialize)]
struct Reported<'a> {
    checkpoint: &'a Checkpoint,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    artifacts: Vec<ArtifactSummary<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactSummary<'a> {
    name: &'a str,
    total_bytes: u64,
    checksum: &'a str,
}

pub fn checkpoint(call: &Call) -> Result<Reply> {
    let caller = call.caller;
    access::require(caller, Capability::Report)?;
    let report: Report = call.params_borrowed()?;
    let input = report.checkpoint;

    let agent_id = access::reporting_agent(caller, input.agent_id.as_deref())?;
    if let Some(id) = &input.id {
        check_id("checkpoint.id", id)?;
    }
    if let Some(session) = &input.session_id {
        check_id("checkpoint.sessionId", session)?;
    }
    let id = input.id.unwrap_or_else(|| ids::new_id("ckpt"));

    // Reporting an existing id replaces that checkpoint, but only for its own agent.
    let may_replace = |old: &Record| access::require_owner(caller, &old.checkpoint.id, &old.checkpoint.agent_id);
    let previous = repo::load_versioned(&id)?;
    if let Some(old) = &previous.value {
        may_replace(old)?;
    }

    let content = report.content.unwrap_or_default();
    if content.len() > MAX_ARTIFACTS {
        return Err(Error::invalid_params(format!("A checkpoint carries at most {MAX_ARTIFACTS} artifacts")));
    }
    let chunk_bytes = Settings::load().chunk_bytes;
    let mut encoded: Vec<Encoded> = Vec::with_capacity(content.len());
    for (name, value) in &content {
        check_id("artifact name", name)?;
        // `null` means "no such artifact", not an artifact holding `null`.
        if value.get().trim() == "null" {
            continue;
        }
        encoded.push(artifacts::encode(name, value, chunk_bytes)?);
    }

    let seq = repo::next_seq()?;
    let checkpoint = Checkpoint { id, agent_id, timestamp: ids::now_ms(), label: input.label, session_id: input.session_id, metadata: input.metadata };
    let (manifest, chunks): (Vec<Artifact>, Vec<Vec<String>>) = encoded.into_iter().map(|e| (e.artifact, e.chunks)).unzip();
    let record = Record {
        blob: format!("{seq:016x}-{}", keys::digest(&checkpoint.id)),
        checkpoint,
        seq,
        reported_by: caller.participant_id.clone(),
        artifacts: manifest,
    };
    repo::save(&record, chunks, previous, may_replace)?;

    announce(&record);
    let reply = Reported {
        checkpoint: &record.checkpoint,
        artifacts: record.artifacts.iter().map(|a| ArtifactSummary { name: &a.name, total_bytes: a.total_bytes, checksum: &a.checksum }).collect(),
    };
    Reply::json(&reply)
}

/// Tell subscribers: `trajectory.checkpoint` always, and
/// `trajectory.content.available` when artifacts came with it.
fn announce(record: &Record) {
    let cp = &record.checkpoint;
    events::emit("trajectory.checkpoint", &json!({ "checkpoint": cp }));
    if !record.artifacts.is_empty() {
        let mut data = json!({
            "checkpointId": cp.id,
            "agentId": cp.agent_id,
            "artifacts": record.artifacts.iter().map(|a| &a.name).collect::<Vec<_>>(),
        });
        if let Some(session) = &cp.session_id {
            data["sessionId"] = json!(session);
        }
        events::emit("trajectory.content.available", &data);
    }
}
