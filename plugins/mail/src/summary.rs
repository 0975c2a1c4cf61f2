//! `mail/summary`: an extractive summary of the turns a reader may see.
//!
//! No model is involved: the digest counts turns, participants and content
//! types, ranks sentences by how many of the conversation's frequent words
//! they carry (key points), picks sentences with decision cues (key
//! decisions) and questions nobody replied to (open questions). Digests are
//! cached per reader and scope until the conversation changes.

use std::collections::{HashMap, HashSet};

use map_plugin_sdk::store::Batch;
use map_plugin_sdk::{ids, Call, Error, Reply, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::access::{self, Actor};
use crate::error;
use crate::events;
use crate::model::{Conversation, Participant, Turn};
use crate::params;
use crate::repo::{self, Ahead};
use crate::turns::{ThreadScope, TurnQuery};

/// At most this many of the newest turns go into one digest (bounds the work per call).
const MAX_TURNS: usize = 2000;
const KEY_POINTS: usize = 5;
const MAX_LISTED: usize = 10;
const MAX_SENTENCE_CHARS: usize = 200;

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

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    pub id: String,
    pub turn_count: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct Digest {
    pub summary: String,
    pub key_points: Vec<String>,
    pub key_decisions: Vec<String>,
    pub open_questions: Vec<String>,
    pub participants: Vec<Activity>,
    pub turn_count: u64,
}

/// A digest as `summaries` keeps it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cached {
    digest: Digest,
    cached_at: u64,
    /// The conversation's state when the digest was made.
    version: String,
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

// ---------------------------------------------------------------------------
// The digest itself (pure)
// ---------------------------------------------------------------------------

const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was", "one", "our", "out", "has", "have",
    "this", "that", "with", "from", "they", "will", "would", "there", "their", "what", "when", "where", "which", "who", "why",
    "how", "about", "into", "than", "then", "them", "these", "those", "some", "such", "only", "also", "just", "like", "been",
    "being", "were", "its", "your", "yours", "his", "she", "him", "let", "lets", "should", "could", "does", "did", "doing",
    "done", "here", "more", "most", "very", "each", "other", "over", "under", "again", "same", "too", "own", "now", "yes",
    "okay", "sure", "thanks", "please", "get", "got", "use", "using", "may", "might", "must", "shall", "onto", "upon",
];

const DECISION_CUES: &[&str] = &[
    "decided", "decide to", "decision", "agreed", "agree to", "we will", "we'll", "let's", "approved", "approve ",
    "going with", "go with", "settled on", "conclusion", "resolved", "we chose", "chosen", "final answer",
];

struct Sentence {
    turn: usize,
    text: String,
    question: bool,
    first_in_turn: bool,
}

/// The readable text of a turn, and whether it is structured data (not split into sentences).
fn turn_text(t: &Turn) -> (String, bool) {
    match &t.content {
        Value::String(s) => (s.clone(), false),
        Value::Object(o) => {
            for k in ["text", "message", "summary", "description", "title"] {
                if let Some(Value::String(s)) = o.get(k) {
                    return (s.clone(), false);
                }
            }
            match (t.content_type.as_str(), o.get("event"), o.get("uri")) {
                ("event", Some(Value::String(e)), _) => (format!("Event: {e}"), true),
                ("reference", _, Some(Value::String(u))) => (format!("Reference: {u}"), true),
                _ => (clip(&t.content.to_string()), true),
            }
        }
        Value::Null => (String::new(), true),
        other => (clip(&other.to_string()), true),
    }
}

fn clip(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= MAX_SENTENCE_CHARS {
        return s.to_string();
    }
    let cut: String = s.chars().take(MAX_SENTENCE_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            out.push(std::mem::take(&mut current));
            continue;
        }
        current.push(c);
        if matches!(c, '.' | '!' | '?') && chars.peek().is_none_or(|n| n.is_whitespace()) {
            out.push(std::mem::take(&mut current));
        }
    }
    out.push(current);
    out.into_iter().map(|s| clip(&s)).filter(|s| !s.is_empty()).collect()
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()) && !STOPWORDS.contains(&w.as_str()))
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Summarise turns given in chronological order.
pub fn digest(subject: Option<&str>, turns: &[Turn]) -> Digest {
    let title = subject.map(|s| format!("\"{}\"", s.trim())).unwrap_or_else(|| "The conversation".into());
    if turns.is_empty() {
        return Digest { summary: format!("{title} has no turns to summarize yet."), ..Digest::default() };
    }

    // Who spoke how often, in order of first appearance; content types likewise.
    let mut participants: Vec<Activity> = Vec::new();
    let mut types: Vec<(String, u64)> = Vec::new();
    for t in turns {
        match participants.iter_mut().find(|a| a.id == t.participant) {
            Some(a) => a.turn_count += 1,
            None => participants.push(Activity { id: t.participant.clone(), turn_count: 1 }),
        }
        match types.iter_mut().find(|(ct, _)| *ct == t.content_type) {
            Some((_, n)) => *n += 1,
            None => types.push((t.content_type.clone(), 1)),
        }
    }

    let mut all: Vec<Sentence> = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let (text, structured) = turn_text(t);
        let parts = if structured { vec![text].into_iter().filter(|s| !s.is_empty()).collect() } else { sentences(&text) };
        for (j, s) in parts.into_iter().enumerate() {
            all.push(Sentence { turn: i, question: !structured && s.ends_with('?'), first_in_turn: j == 0, text: s });
        }
    }

    let mut freq: HashMap<String, f64> = HashMap::new();
    for s in &all {
        for w in words(&s.text) {
            *freq.entry(w).or_default() += 1.0;
        }
    }
    let by = |s: &Sentence| format!("{}: {}", turns[s.turn].participant, s.text);

    // Key points: the best-scoring statements, shown in conversation order.
    let mut scored: Vec<(f64, usize)> = all
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.question)
        .filter_map(|(i, s)| {
            let unique: HashSet<String> = words(&s.text).collect();
            if unique.is_empty() {
                return None;
            }
            let weight: f64 = unique.iter().map(|w| freq[w]).sum::<f64>() / (unique.len() as f64).sqrt();
            Some((if s.first_in_turn { weight * 1.2 } else { weight }, i))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut seen = HashSet::new();
    let mut picked: Vec<usize> = scored.into_iter().map(|(_, i)| i).filter(|i| seen.insert(all[*i].text.to_lowercase())).take(KEY_POINTS).collect();
    picked.sort_unstable();
    let key_points: Vec<String> = picked.iter().map(|i| by(&all[*i])).collect();

    let key_decisions: Vec<String> = all
        .iter()
        .filter(|s| !s.question)
        .filter(|s| {
            let lower = s.text.to_lowercase();
            DECISION_CUES.iter().any(|cue| lower.contains(cue))
        })
        .map(by)
        .take(MAX_LISTED)
        .collect();

    // A question is open while no turn replies to the turn that asked it.
    let answered: HashSet<&str> = turns.iter().filter_map(|t| t.in_reply_to.as_deref()).collect();
    let open_questions: Vec<String> =
        all.iter().filter(|s| s.question && !answered.contains(turns[s.turn].id.as_str())).map(by).take(MAX_LISTED).collect();

    let (first, last) = (turns[0].timestamp, turns[turns.len() - 1].timestamp);
    let who: Vec<String> = participants.iter().map(|a| format!("{} ×{}", a.id, a.turn_count)).collect();
    let kinds: Vec<String> = types.iter().map(|(ct, n)| format!("{ct} ×{n}")).collect();
    let mut summary = format!(
        "{title}: {} from {} ({}) between {} and {}. Content: {}.",
        plural(turns.len(), "turn"),
        plural(participants.len(), "participant"),
        who.join(", "),
        ids::iso8601(first),
        ids::iso8601(last),
        kinds.join(", "),
    );
    let threads: HashSet<&str> = turns.iter().filter_map(|t| t.thread_id.as_deref()).collect();
    if !threads.is_empty() {
        summary.push_str(&format!(" Discussed in {}.", plural(threads.len(), "thread")));
    }
    let listed = |label: &str, items: &[String]| {
        if items.is_empty() {
            String::new()
        } else {
            format!(" {label}: {}.", items.iter().take(3).map(|s| s.trim_end_matches('.')).collect::<Vec<_>>().join("; "))
        }
    };
    summary.push_str(&listed("Key points", &key_points));
    summary.push_str(&listed("Decisions", &key_decisions));
    summary.push_str(&listed("Open questions", &open_questions));

    Digest { summary, key_points, key_decisions, open_questions, participants, turn_count: turns.len() as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(id: &str, who: &str, text: &str, reply_to: Option<&str>) -> Turn {
        Turn { timestamp: 1_706_745_600_000, content: json!({ "text": text }), in_reply_to: reply_to.map(String::from), ..Turn::sample(id, who) }
    }

    #[test]
    fn digest_extracts_points_decisions_and_open_questions() {
        let turns = vec![
            turn("turn-1", "alice", "The cache layer is slow. The cache misses double the latency.", None),
            turn("turn-2", "bob", "Should we shard the cache?", None),
            turn("turn-3", "carol", "We decided to add a second cache tier.", None),
            turn("turn-4", "alice", "What about eviction?", None),
            turn("turn-5", "bob", "LRU eviction works.", Some("turn-4")),
        ];
        let d = digest(Some("Latency"), &turns);
        assert_eq!(d.turn_count, 5);
        assert_eq!(d.participants[0], Activity { id: "alice".into(), turn_count: 2 });
        assert!(d.key_points.iter().any(|k| k.contains("cache")), "{:?}", d.key_points);
        assert_eq!(d.key_decisions, vec!["carol: We decided to add a second cache tier."]);
        assert_eq!(d.open_questions, vec!["bob: Should we shard the cache?"]);
        assert!(d.summary.starts_with("\"Latency\": 5 turns from 3 participants"), "{}", d.summary);
        assert!(d.summary.contains("Decisions: carol: We decided to add a second cache tier"), "{}", d.summary);
    }

    #[test]
    fn empty_digest_says_so() {
        assert_eq!(digest(None, &[]).summary, "The conversation has no turns to summarize yet.");
    }
}
