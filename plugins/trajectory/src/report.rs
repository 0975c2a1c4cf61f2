//! `trajectory/checkpoint`: an agent reports a checkpoint, optionally with
//! content artifacts. The record, its index entries and its chunks are
//! written in one batch; then `trajectory.checkpoint` is emitted.

use serde::Serialize;
use serde_json::json;

use crate::access::{self, Capability};
use crate::artifacts::{self, Encoded};
use crate::error::{Error, Result};
use crate::map_gateway::plugin::types::Caller;
use crate::model::{Artifact, Checkpoint, Record};
use crate::params::{self, check_id, Report, MAX_ARTIFACTS};
use crate::settings::Settings;
use crate::{host, ids, keys, repo, CHECKPOINT};

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

pub fn checkpoint(caller: &Caller, settings: &Settings, text: &str) -> Result<String> {
    access::require(caller, Capability::Report)?;
    let report: Report = params::parse_borrowed(CHECKPOINT, text)?;
    let input = report.checkpoint;

    let agent_id = access::reporting_agent(caller, input.agent_id.as_deref())?;
    if let Some(id) = &input.id {
        check_id("checkpoint.id", id)?;
    }
    if let Some(session) = &input.session_id {
        check_id("checkpoint.sessionId", session)?;
    }
    let id = input.id.unwrap_or_else(|| format!("ckpt-{}", ids::ulid(&caller.session_id)));

    // Reporting an existing id replaces that checkpoint, but only for its own agent.
    let previous = repo::load(&id)?;
    if let Some(old) = &previous {
        access::require_owner(caller, &id, &old.checkpoint.agent_id)?;
    }

    let content = report.content.unwrap_or_default();
    if content.len() > MAX_ARTIFACTS {
        return Err(Error::invalid_params(format!("A checkpoint carries at most {MAX_ARTIFACTS} artifacts")));
    }
    let mut encoded: Vec<Encoded> = Vec::with_capacity(content.len());
    for (name, value) in &content {
        check_id("artifact name", name)?;
        // `null` means "no such artifact", not an artifact holding `null`.
        if value.get().trim() == "null" {
            continue;
        }
        encoded.push(artifacts::encode(name, value, settings.chunk_bytes)?);
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
    repo::save(&record, chunks, previous.as_ref())?;

    announce(&record);
    let reply = Reported {
        checkpoint: &record.checkpoint,
        artifacts: record.artifacts.iter().map(|a| ArtifactSummary { name: &a.name, total_bytes: a.total_bytes, checksum: &a.checksum }).collect(),
    };
    Ok(serde_json::to_string(&reply).expect("a reply serialises"))
}

/// Tell subscribers: `trajectory.checkpoint` always, and
/// `trajectory.content.available` when artifacts came with it.
fn announce(record: &Record) {
    let cp = &record.checkpoint;
    host::emit("trajectory.checkpoint", &json!({ "checkpoint": cp }).to_string());
    if !record.artifacts.is_empty() {
        let mut data = json!({
            "checkpointId": cp.id,
            "agentId": cp.agent_id,
            "artifacts": record.artifacts.iter().map(|a| &a.name).collect::<Vec<_>>(),
        });
        if let Some(session) = &cp.session_id {
            data["sessionId"] = json!(session);
        }
        host::emit("trajectory.content.available", &data.to_string());
    }
}
