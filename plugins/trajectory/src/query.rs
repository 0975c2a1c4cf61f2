//! `trajectory/list` and `trajectory/get`.

use map_plugin_sdk::{Call, Error, Reply, Result};
use serde::Serialize;

use crate::access::{self, Capability};
use crate::error::checkpoint_not_found;
use crate::keys::Index;
use crate::model::Checkpoint;
use crate::params::{Get, List, ListFilter};
use crate::repo;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    checkpoints: Vec<Checkpoint>,
    has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// Checkpoints newest first, filtered by agent, work session and time. The
/// cursor is the id of the last checkpoint of the previous page, as in the
/// SDK's reference server; the page continues just below its position.
pub fn list(call: &Call) -> Result<Reply> {
    access::require(call.caller, Capability::Query)?;
    let req: List = call.params()?;
    let limit = req.page_size()?;
    let filter = req.filter.unwrap_or_default();
    let (checkpoints, next_cursor) = page(&filter, req.cursor.as_deref(), limit)?;
    Reply::json(&Page { checkpoints, has_more: next_cursor.is_some(), next_cursor })
}

/// Up to `limit` checkpoints that `filter` keeps, newest first, below the
/// checkpoint named by `cursor`, and the cursor of the next page when more follow.
pub fn page(filter: &ListFilter, cursor: Option<&str>, limit: u32) -> Result<(Vec<Checkpoint>, Option<String>)> {
    let index = Index::for_filter(filter.agent_id.as_deref(), filter.session_id.as_deref());
    let mut before = filter.before_timestamp.map(|t| index.before_time(t));
    if let Some(cursor) = cursor {
        let record = repo::load(cursor)?.ok_or_else(|| Error::invalid_params(format!("Unknown cursor {cursor}: no such checkpoint")))?;
        let below = repo::key_in(&index, &record);
        before = Some(match before {
            Some(b) if b < below => b,
            _ => below,
        });
    }
    let after = filter.after_timestamp.map(|t| index.after_time(t));

    let mut checkpoints = repo::newest_first(&index, after, before, limit + 1)?;
    let has_more = checkpoints.len() > limit as usize;
    checkpoints.truncate(limit as usize);
    let next_cursor = if has_more { checkpoints.last().map(|c| c.id.clone()) } else { None };
    // Index keys hash the ids; compare the real ones too.
    checkpoints
        .retain(|c| filter.agent_id.as_ref().is_none_or(|a| &c.agent_id == a) && filter.session_id.as_ref().is_none_or(|s| c.session_id.as_ref() == Some(s)));
    Ok((checkpoints, next_cursor))
}

pub fn get(call: &Call) -> Result<Reply> {
    access::require(call.caller, Capability::Query)?;
    let req: Get = call.params()?;
    let record = repo::load(&req.checkpoint_id)?.ok_or_else(|| checkpoint_not_found(&req.checkpoint_id))?;
    Ok(serde_json::json!({ "checkpoint": record.checkpoint }).into())
}
