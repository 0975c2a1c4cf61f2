//! The digest behind `mail/summary`, from turns alone (pure): no model is
//! involved. It counts turns, participants and content types, ranks
//! sentences by how many of the conversation's frequent words they carry
//! (key points), picks sentences with decision cues (key decisions) and
//! questions nobody replied to (open questions).

use std::collections::{HashMap, HashSet};

use map_plugin_sdk::ids;
use serde_json::Value;

use crate::model::{Activity, Digest, Turn};

const KEY_POINTS: usize = 5;
const MAX_LISTED: usize = 10;
const MAX_SENTENCE_CHARS: usize = 200;

const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was", "one", "our", "out", "has", "have", "this", "that", "with",
    "from", "they", "will", "would", "there", "their", "what", "when", "where", "which", "who", "why", "how", "about", "into", "than", "then", "them", "these",
    "those", "some", "such", "only", "also", "just", "like", "been", "being", "were", "its", "your", "yours", "his", "she", "him", "let", "lets", "should",
    "could", "does", "did", "doing", "done", "here", "more", "most", "very", "each", "other", "over", "under", "again", "same", "too", "own", "now", "yes",
    "okay", "sure", "thanks", "please", "get", "got", "use", "using", "may", "might", "must", "shall", "onto", "upon",
];

const DECISION_CUES: &[&str] = &[
    "decided",
    "decide to",
    "decision",
    "agreed",
    "agree to",
    "we will",
    "we'll",
    "let's",
    "approved",
    "approve ",
    "going with",
    "go with",
    "settled on",
    "conclusion",
    "resolved",
    "we chose",
    "chosen",
    "final answer",
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
    let (participants, types) = activity(turns);
    let all = split(turns);
    let key_points = key_points(turns, &all);
    let key_decisions = key_decisions(turns, &all);
    let open_questions = open_questions(turns, &all);
    let mut summary = overview(&title, turns, &participants, &types);
    summary.push_str(&listed("Key points", &key_points));
    summary.push_str(&listed("Decisions", &key_decisions));
    summary.push_str(&listed("Open questions", &open_questions));
    Digest { summary, key_points, key_decisions, open_questions, participants, turn_count: turns.len() as u64 }
}

/// Who spoke how often, in order of first appearance; content types likewise.
fn activity(turns: &[Turn]) -> (Vec<Activity>, Vec<(String, u64)>) {
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
    (participants, types)
}

/// Every turn's sentences, in order (structured content is one sentence).
fn split(turns: &[Turn]) -> Vec<Sentence> {
    let mut all: Vec<Sentence> = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let (text, structured) = turn_text(t);
        let parts = if structured { vec![text].into_iter().filter(|s| !s.is_empty()).collect() } else { sentences(&text) };
        for (j, s) in parts.into_iter().enumerate() {
            all.push(Sentence { turn: i, question: !structured && s.ends_with('?'), first_in_turn: j == 0, text: s });
        }
    }
    all
}

/// A sentence as listed: `participant: text`.
fn attributed(turns: &[Turn], s: &Sentence) -> String {
    format!("{}: {}", turns[s.turn].participant, s.text)
}

/// The best-scoring statements, shown in conversation order.
fn key_points(turns: &[Turn], all: &[Sentence]) -> Vec<String> {
    let mut freq: HashMap<String, f64> = HashMap::new();
    for s in all {
        for w in words(&s.text) {
            *freq.entry(w).or_default() += 1.0;
        }
    }
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
    picked.iter().map(|i| attributed(turns, &all[*i])).collect()
}

/// Statements with a decision cue.
fn key_decisions(turns: &[Turn], all: &[Sentence]) -> Vec<String> {
    all.iter()
        .filter(|s| !s.question)
        .filter(|s| {
            let lower = s.text.to_lowercase();
            DECISION_CUES.iter().any(|cue| lower.contains(cue))
        })
        .map(|s| attributed(turns, s))
        .take(MAX_LISTED)
        .collect()
}

/// A question is open while no turn replies to the turn that asked it.
fn open_questions(turns: &[Turn], all: &[Sentence]) -> Vec<String> {
    let answered: HashSet<&str> = turns.iter().filter_map(|t| t.in_reply_to.as_deref()).collect();
    all.iter().filter(|s| s.question && !answered.contains(turns[s.turn].id.as_str())).map(|s| attributed(turns, s)).take(MAX_LISTED).collect()
}

/// The first sentences of the summary: how many turns from whom, when,
/// which content types, and in how many threads.
fn overview(title: &str, turns: &[Turn], participants: &[Activity], types: &[(String, u64)]) -> String {
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
    summary
}

/// ` Label: the first three items.`, or nothing when there are none.
fn listed(label: &str, items: &[String]) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!(" {label}: {}.", items.iter().take(3).map(|s| s.trim_end_matches('.')).collect::<Vec<_>>().join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
