//! Jobs as MAP resources of the type `x-uap/job` (`map/resources/list` and
//! `get`), under the hub's own rule: every session of the tenant sees every
//! job of the tenant, as with `uap/list` and `uap/get`. Newest first, in
//! `uap/list`'s pages; the filter is `{status?, kind?}` (`status` one or
//! several). A job's result and history stay with `uap/get`.

use map_plugin_sdk::params::OneOrMany;
use map_plugin_sdk::resources::{Page, Query, Resource, Resources};
use map_plugin_sdk::{ids, Caller, Error, ErrorRange, Result};
use serde::Deserialize;
use serde_json::{json, Map};

use crate::model::{Job, Kind, Status};
use crate::repo::{self, JOBS};
use crate::{error, hub};

pub const KIND: &str = "x-uap/job";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Filter {
    status: Option<OneOrMany<Status>>,
    kind: Option<Kind>,
}

/// Whether `id` has the shape of a job id (`job-<ulid>`), as cursors do:
/// anything else names no job, and is no key to read.
fn is_job_id(id: &str) -> bool {
    id.strip_prefix("job-").is_some_and(|u| u.len() == ids::ULID_LEN && u.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Unix milliseconds of a stored ISO 8601 time.
fn millis(iso: &str) -> Option<u64> {
    chrono::DateTime::parse_from_rfc3339(iso).ok().and_then(|t| u64::try_from(t.timestamp_millis()).ok())
}

/// A job as a resource: named by its type, owned by whoever submitted it;
/// its kind, type, target format, agent, session and error in `metadata`.
pub fn resource(job: Job) -> Resource {
    // The id holds the creation time to the millisecond; the stored times are to the second.
    let created = ids::time_of(&job.id).or_else(|| millis(&job.created_at)).unwrap_or(0);
    let updated = millis(&job.updated_at).map_or(created, |at| at.max(created));
    let mut metadata = Map::new();
    metadata.insert("kind".into(), json!(job.kind));
    metadata.insert("type".into(), json!(job.job_type));
    for (key, value) in [("targetFormat", &job.target_format), ("agent", &job.agent), ("sessionId", &job.session_id), ("error", &job.error)] {
        if let Some(v) = value {
            metadata.insert(key.into(), json!(v));
        }
    }
    let name = format!("{} job", job.job_type);
    let owner = job.submitted_by.unwrap_or_default();
    Resource::new(job.id, name, job.status.name(), owner, created).updated_at(updated).metadata(metadata)
}

pub struct JobResources;

impl Resources for JobResources {
    const ERRORS: ErrorRange = error::ERRORS;

    fn kinds() -> Vec<String> {
        vec![KIND.into()]
    }

    fn list(_caller: &Caller, query: &Query) -> Result<Page> {
        let filter: Filter = query.filter()?;
        if let Some(cursor) = query.cursor.as_deref().filter(|c| !is_job_id(c)) {
            return Err(Error::invalid_params(format!("Invalid cursor {cursor:?}: pass the cursor of a previous page")));
        }
        let statuses = filter.status.map(OneOrMany::into_vec);
        let wanted = |job: &Job| statuses.as_ref().is_none_or(|s| s.contains(&job.status)) && filter.kind.is_none_or(|k| k == job.kind);
        // The hub settles what an earlier instance left open before anything is read.
        hub::with(|_| ())?;
        let (jobs, cursor) = repo::newest_first(wanted, query.cursor.clone(), query.limit as usize)?;
        Ok(Page { resources: jobs.into_iter().map(resource).collect(), cursor, total: None })
    }

    fn get(_caller: &Caller, _kind: &str, id: &str) -> Result<Option<Resource>> {
        if !is_job_id(id) {
            return Ok(None);
        }
        Ok(hub::with(|_| JOBS.get(id))??.map(resource))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: Status) -> Job {
        Job {
            id: ids::new_id("job"),
            kind: Kind::Test,
            job_type: "unit".into(),
            status,
            target_format: None,
            agent: Some("runner".into()),
            session_id: None,
            error: None,
            result: Some(json!({"passed": true})),
            declined_by: Vec::new(),
            submitted_by: Some("alice".into()),
            created_at: "2026-01-02T03:04:05Z".into(),
            updated_at: "2026-01-02T03:04:09Z".into(),
        }
    }

    #[test]
    fn a_job_as_a_resource() {
        let j = job(Status::Completed);
        let created = ids::time_of(&j.id).unwrap();
        let r = resource(j.clone());
        assert_eq!((r.id.as_str(), r.name.as_str(), r.status.as_str(), r.owner_id.as_str()), (j.id.as_str(), "unit job", "completed", "alice"));
        assert_eq!(r.created_at, created);
        // Stored to the second, and before the id's time here: never before creation.
        assert_eq!(r.updated_at, created.max(1_767_323_049_000));
        assert_eq!(r.metadata.get("kind"), Some(&json!("test")));
        assert_eq!(r.metadata.get("agent"), Some(&json!("runner")));
        assert!(r.metadata.get("result").is_none() && r.metadata.get("sessionId").is_none());
    }

    #[test]
    fn times_and_ids() {
        assert_eq!(millis("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(millis(&ids::iso8601(1_767_323_049_000)), Some(1_767_323_049_000));
        assert_eq!(millis("yesterday"), None);
        assert!(is_job_id(&ids::new_id("job")));
        assert!(!is_job_id("job-") && !is_job_id(&ids::new_id("task")) && !is_job_id(&format!("job-{}", "é".repeat(13))));
    }
}
