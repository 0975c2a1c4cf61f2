//! `mail/summary`: an extractive summary of the turns a reader may see (see
//! `digest`). Digests are cached per reader and scope until the
//! conversation changes.

use map_plugin_sdk::store::Batch;
use map_plugin_sdk::{ids, Call, Error, Reply, Result};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::access::{self, Actor};
use crate::digest::digest;
use crate::error;
use crate::events;
use crate::model::{Cached, Conversation, Digest, Participant, Turn};
use crate::params;
use crate::repo::{self, Ahead};
use crate::turns::{ThreadScope, TurnQuery};

/// At most this many of the newest turns go into one digest (bounds the work per call).
const MAX_TURNS: usize = 2000;

/// Which turns a summary covers.
#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
pub struct Scope {
    pub thread_id: Option<String>,
    /// Inclusive.
    pub from_turn_id: Option<String>,
    /// Inclusive.
    pub to_turn_id: Option<String>,
}

impl Scope {
    fn cache_key(&self) -> String {
        let part = |x: &Option<String>| x.as_deref().map(repo::esc).unwrap_or_default();
        format!("t={};f={};u={}", part(&self.thread_id), part(&self.from_turn_id), part(&self.to_turn_id))
    }
}

pub struct Outcome {
    pub digest: Digest,
    pub generated: bool,
    pub cached_at: u64,
}

/// Changes whenever anything is written to the conversation.
fn version(conv: &Conversation) -> Result<String> {
    Ok(format!("{}:{}", conv.updated_at, repo::latest_turn_id(&conv.id)?.unwrap_or_default()))
}

/// The digest `reader` gets for `scope`: from the cache unless stale or
/// `regenerate`; a new digest is cached and announced. The scope's thread
/// and turns are looked up in `ahead` when they were read with the
/// conversation.
pub fn for_reader(conv: &Conversation, ahead: &Ahead, reader: &Participant, scope: &Scope, regenerate: bool) -> Result<Outcome> {
    let mut q = TurnQuery::new(&conv.id);
    if let Some(thread) = &scope.thread_id {
        if !ahead.has_thread(thread)? {
            return Err(error::thread_not_found(&conv.id, thread));
        }
        q.threads = ThreadScope::One(thread.clone());
    }
    let visible = |t: &str| access::visible_turn(&conv.id, ahead, t, reader).map(|t| t.id);
    q.from_id = scope.from_turn_id.as_deref().map(visible).transpose()?;
    q.to_id = scope.to_turn_id.as_deref().map(visible).transpose()?;

    let key = format!("{}/{}/{}", conv.id, scope.cache_key(), repo::esc(&reader.id));
    let version = version(conv)?;
    if !regenerate {
        if let Some(c) = repo::SUMMARIES.get(&key)? {
            if c.version == version {
                return Ok(Outcome { digest: c.digest, generated: false, cached_at: c.cached_at });
            }
        }
    }

    // Newest turns first, bounded, then back to chronological order.
    q.descending = true;
    let mut turns = q.page(reader, MAX_TURNS, false)?.turns;
    turns.reverse();
    let digest = digest(conv.subject.as_deref(), &turns);
    let now = ids::now_ms();
    let cached = Cached { digest: digest.clone(), cached_at: now, version };
    let mut batch = Batch::new();
    batch.put(&repo::SUMMARIES, key, &cached);
    batch.apply()?;

    // The event reaches every subscriber: it carries the summary of the
    // turns everyone may see, never this reader's restricted ones.
    let public = if turns.iter().all(Turn::is_public) {
        digest.summary.clone()
    } else {
        let open: Vec<Turn> = turns.iter().filter(|t| t.is_public()).cloned().collect();
        self::digest(conv.subject.as_deref(), &open).summary
    };
    let mut data = json!({"conversationId": conv.id, "summary": public, "participantId": reader.id, "turnCount": digest.turn_count});
    if let Some(thread) = &scope.thread_id {
        data["threadId"] = json!(thread);
    }
    events::emit(events::SUMMARY_GENERATED, &conv.id, data, None);
    Ok(Outcome { digest, generated: true, cached_at: now })
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase", default)]
struct Include {
    key_points: bool,
    key_decisions: bool,
    open_questions: bool,
    participants: bool,
}

impl Default for Include {
    fn default() -> Self {
        Include { key_points: true, key_decisions: true, open_questions: true, participants: true }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SummaryParams {
    conversation_id: String,
    #[serde(default)]
    scope: Scope,
    #[serde(default)]
    regenerate: bool,
    /// Absent: every part. Given: only the parts set to true.
    include: Option<Value>,
}

/// `mail/summary`.
pub fn summarize(call: &Call) -> Result<Reply> {
    let actor = &Actor::from_caller(call.caller);
    actor.require_capability("canViewHistory", "mail/summary")?;
    let p: SummaryParams = call.params()?;
    let include: Include = match p.include {
        None => Include::default(),
        Some(v) => {
            let only = json!({"keyPoints": false, "keyDecisions": false, "openQuestions": false, "participants": false});
            let mut merged = only.as_object().cloned().unwrap_or_default();
            if let Value::Object(given) = v {
                merged.extend(given);
            }
            serde_json::from_value(Value::Object(merged)).map_err(|e| Error::invalid_params(format!("Invalid include: {e}")))?
        }
    };
    let s = &p.scope;
    let named: Vec<&str> = [&s.from_turn_id, &s.to_turn_id].into_iter().flatten().map(String::as_str).collect();
    let visit = access::visit(params::id("conversationId", &p.conversation_id)?, actor, s.thread_id.as_deref().as_slice(), &named)?;
    let reader = visit.member(actor)?;
    access::require_observer(&reader)?;
    let outcome = for_reader(&visit.conv, &visit.ahead, &reader, &p.scope, p.regenerate)?;
    let d = outcome.digest;
    let mut out = json!({"summary": d.summary, "generated": outcome.generated, "turnCount": d.turn_count});
    if !outcome.generated {
        out["cachedAt"] = json!(outcome.cached_at);
    }
    if include.key_points {
        out["keyPoints"] = json!(d.key_points);
    }
    if include.key_decisions {
        out["keyDecisions"] = json!(d.key_decisions);
    }
    if include.open_questions {
        out["openQuestions"] = json!(d.open_questions);
    }
    if include.participants {
        out["participants"] = json!(d.participants);
    }
    Ok(out.into())
}
