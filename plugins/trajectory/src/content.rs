//! `trajectory/content`: small artifacts come back inline; the first one that
//! does not fit the inline budget is streamed to the caller as
//! `trajectory/content.chunk` notifications, read from storage one chunk at
//! a time; any further large ones are listed as `deferred`, to be fetched by
//! another request naming them in `include`.
//!
//! `router.notify` queues each chunk on the caller's session at once, so the
//! chunks reach the client before this call's response does: clients collect
//! chunks by `streamId` from the moment they send the request.

use std::collections::BTreeMap;

use map_plugin_sdk::{ids, router, Call, Caller, Reply, Result};
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::access::{self, Capability};
use crate::artifacts::{self, hex};
use crate::error::{checkpoint_not_found, content_unavailable, stream_failed};
use crate::model::Record;
use crate::params::Content;
use crate::repo;
use crate::settings::Settings;

pub const CHUNK: &str = "trajectory/content.chunk";
/// The well-known artifact served from the checkpoint's own `metadata`
/// when the reporter attached none by that name.
const METADATA: &str = "metadata";

/// Where a requested artifact comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Stored(usize),
    /// The checkpoint's `metadata`: part of the record, so always inline.
    Metadata,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    name: String,
    source: Source,
    bytes: u64,
}

/// How one request is answered.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    inline: Vec<Wanted>,
    stream: Option<Wanted>,
    deferred: Vec<String>,
}

#[derive(Serialize)]
struct Answer {
    content: ContentResult,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContentResult {
    streaming: bool,
    checkpoint_id: String,
    artifacts: BTreeMap<String, Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_artifact: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_info: Option<StreamInfo>,
    /// Large artifacts left for a later request (one stream per request).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    deferred: Vec<String>,
    /// Requested names this checkpoint has no artifact for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unavailable: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StreamInfo {
    total_bytes: u64,
    total_chunks: u32,
    encoding: &'static str,
    chunk_bytes: u64,
    checksum: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    stream_id: &'a str,
    index: u32,
    data: &'a str,
    #[serde(rename = "final")]
    is_final: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    checksum: Option<&'a str>,
}

pub fn content(call: &Call) -> Result<Reply> {
    let caller = call.caller;
    access::require(caller, Capability::RequestContent)?;
    let req: Content = call.params()?;
    let record = repo::load(&req.checkpoint_id)?.ok_or_else(|| checkpoint_not_found(&req.checkpoint_id))?;

    let (wanted, unavailable) = select(&record, req.include.as_deref());
    if wanted.is_empty() && (req.include.is_none() || !unavailable.is_empty()) {
        let available: Vec<&str> = available_names(&record);
        return Err(content_unavailable(format!("Checkpoint {} has no content to serve for this request", record.checkpoint.id))
            .with_details(json!({ "checkpointId": record.checkpoint.id, "unavailable": unavailable, "available": available })));
    }
    let plan = plan(wanted, Settings::load().inline_max_bytes as u64);

    let mut inline = BTreeMap::new();
    for w in &plan.inline {
        let value = match w.source {
            Source::Stored(i) => artifacts::read_inline(&record, i)?,
            Source::Metadata => RawValue::from_string(json!(record.checkpoint.metadata).to_string()).expect("metadata serialises"),
        };
        inline.insert(w.name.clone(), value);
    }
    let mut result = ContentResult {
        streaming: false,
        checkpoint_id: record.checkpoint.id.clone(),
        artifacts: inline,
        stream_id: None,
        stream_artifact: None,
        stream_info: None,
        deferred: plan.deferred,
        unavailable,
    };
    if let Some(Wanted { name, source: Source::Stored(index), .. }) = plan.stream {
        let stream_id = ids::new_id("stream");
        let artifact = &record.artifacts[index];
        let info = StreamInfo {
            total_bytes: artifact.total_bytes,
            total_chunks: artifact.total_chunks,
            encoding: "base64",
            chunk_bytes: artifact.chunk_bytes,
            checksum: artifact.checksum.clone(),
        };
        stream(caller, &record, index, &stream_id)?;
        result.streaming = true;
        result.stream_id = Some(stream_id);
        result.stream_artifact = Some(name);
        result.stream_info = Some(info);
    }
    Reply::json(&Answer { content: result })
}

fn available_names(record: &Record) -> Vec<&str> {
    let mut names: Vec<&str> = record.artifacts.iter().map(|a| a.name.as_str()).collect();
    if record.checkpoint.metadata.is_some() && record.artifact(METADATA).is_none() {
        names.insert(0, METADATA);
    }
    names
}

/// The requested artifacts that exist (in request order, without repeats),
/// and the requested names that do not. No `include`: everything.
fn select(record: &Record, include: Option<&[String]>) -> (Vec<Wanted>, Vec<String>) {
    let names: Vec<&str> = match include {
        Some(list) => list.iter().map(String::as_str).collect(),
        None => available_names(record),
    };
    let (mut wanted, mut unavailable): (Vec<Wanted>, Vec<String>) = (Vec::new(), Vec::new());
    for name in names {
        if wanted.iter().any(|w| w.name == name) || unavailable.iter().any(|u| u == name) {
            continue;
        }
        match record.artifact(name) {
            Some((i, a)) => wanted.push(Wanted { name: name.into(), source: Source::Stored(i), bytes: a.total_bytes }),
            None if name == METADATA && record.checkpoint.metadata.is_some() => wanted.push(Wanted { name: name.into(), source: Source::Metadata, bytes: 0 }),
            None => unavailable.push(name.into()),
        }
    }
    (wanted, unavailable)
}

/// Inline what fits in `budget` bytes, stream the first artifact that does
/// not, defer the rest.
fn plan(wanted: Vec<Wanted>, budget: u64) -> Plan {
    let mut plan = Plan::default();
    let mut left = budget;
    for w in wanted {
        if w.source == Source::Metadata || w.bytes <= left {
            left -= if w.source == Source::Metadata { 0 } else { w.bytes };
            plan.inline.push(w);
        } else if plan.stream.is_none() {
            plan.stream = Some(w);
        } else {
            plan.deferred.push(w.name);
        }
    }
    plan
}

/// Send one stored artifact as chunk notifications to the caller. Only one
/// chunk is held at a time; the checksum is recomputed on the way and must
/// match the stored one before the final chunk goes out.
fn stream(caller: &Caller, record: &Record, index: usize, stream_id: &str) -> Result<()> {
    let artifact = &record.artifacts[index];
    let failed = |i: u32, why: &str| {
        stream_failed(format!("Stream {stream_id} of artifact {} failed at chunk {i}: {why}", artifact.name))
            .with_details(json!({ "streamId": stream_id, "index": i }))
    };
    let mut hasher = Sha256::new();
    let mut sent_bytes = 0u64;
    for i in 0..artifact.total_chunks {
        let data = artifacts::stored_chunk(record, index, i)?.ok_or_else(|| failed(i, "the stored chunk is missing"))?;
        let bytes = artifacts::decode(&data).ok_or_else(|| failed(i, "the stored chunk is not base64"))?;
        hasher.update(&bytes);
        sent_bytes += bytes.len() as u64;
        drop(bytes);
        let is_final = i + 1 == artifact.total_chunks;
        let checksum = if is_final {
            let sum = hex(&hasher.finalize_reset());
            if sum != artifact.checksum || sent_bytes != artifact.total_bytes {
                return Err(failed(i, "the stored artifact does not match its checksum"));
            }
            Some(sum)
        } else {
            None
        };
        let chunk = Chunk { stream_id, index: i, data: &data, is_final, checksum: checksum.as_deref() };
        router::notify(&caller.participant_id, CHUNK, &chunk).map_err(|e| {
            failed(i, &format!("the session did not take it ({} {})", e.code, e.message))
                .with_details(json!({ "streamId": stream_id, "index": i, "cause": { "code": e.code, "message": e.message } }))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Artifact, ArtifactKind, Checkpoint};

    fn record(artifacts: &[(&str, u64)], metadata: bool) -> Record {
        Record {
            checkpoint: Checkpoint {
                id: "c".into(),
                agent_id: "a".into(),
                timestamp: 1,
                label: None,
                session_id: None,
                metadata: metadata.then(|| serde_json::Map::from_iter([("k".to_string(), json!(1))])),
            },
            seq: 1,
            reported_by: "p".into(),
            blob: "b".into(),
            artifacts: artifacts
                .iter()
                .map(|(n, size)| Artifact {
                    name: n.to_string(),
                    kind: ArtifactKind::Text,
                    total_bytes: *size,
                    chunk_bytes: 3072,
                    total_chunks: 1,
                    checksum: String::new(),
                })
                .collect(),
        }
    }

    fn names(ws: &[Wanted]) -> Vec<&str> {
        ws.iter().map(|w| w.name.as_str()).collect()
    }

    #[test]
    fn select_defaults_to_everything_and_reports_missing_names() {
        let r = record(&[("prompts", 10), ("transcript", 10)], true);
        let (all, missing) = select(&r, None);
        assert_eq!(names(&all), ["metadata", "prompts", "transcript"]);
        assert!(missing.is_empty());
        let include = ["transcript".to_string(), "nope".into(), "transcript".into()];
        let (some, missing) = select(&r, Some(&include));
        assert_eq!(names(&some), ["transcript"]);
        assert_eq!(missing, ["nope"]);
        let (none, _) = select(&record(&[], false), None);
        assert!(none.is_empty());
    }

    #[test]
    fn plan_inlines_what_fits_and_streams_one() {
        let r = record(&[("a", 40), ("big", 1000), ("b", 50), ("huge", 2000)], true);
        let (wanted, _) = select(&r, None);
        let p = plan(wanted, 100);
        assert_eq!(names(&p.inline), ["metadata", "a", "b"]);
        assert_eq!(p.stream.map(|w| w.name), Some("big".to_string()));
        assert_eq!(p.deferred, ["huge"]);
    }

    #[test]
    fn plan_without_large_artifacts_does_not_stream() {
        let r = record(&[("a", 40)], false);
        let (wanted, _) = select(&r, None);
        let p = plan(wanted, 40);
        assert_eq!(names(&p.inline), ["a"]);
        assert!(p.stream.is_none() && p.deferred.is_empty());
    }
}
