//! The storage layout. The host store has no secondary indexes, so each
//! listing order is a collection of its own, written in the same batch as
//! the checkpoint:
//!
//! | collection         | key                                   | value            |
//! |--------------------|---------------------------------------|------------------|
//! | `checkpoints`      | checkpoint id                         | `Record` JSON    |
//! | `by-time`          | `<pos>`                               | checkpoint JSON  |
//! | `by-agent`         | `<h(agentId)>/<pos>`                  | checkpoint JSON  |
//! | `by-session`       | `<h(sessionId)>/<pos>`                | checkpoint JSON  |
//! | `by-agent-session` | `<h(agentId)>.<h(sessionId)>/<pos>`   | checkpoint JSON  |
//! | `chunks`           | `<blob>/<artifact>/<chunk>`           | base64 of bytes  |
//! | `meta`             | `seq`                                 | last report seq (a counter) |
//!
//! `<pos>` is `<timestamp>/<seq>/<h(id)>`, zero-padded so that byte order is
//! time order, then report order. Agent and session ids are hashed (`h`) so
//! that any id fits the host's 512-byte keys and cannot forge a separator.
//! Values are JSON but for chunks (base64 text) and the counter (decimal text).

use map_plugin_sdk::store::{Collection, Counter, Text};
use sha2::{Digest, Sha256};

use crate::model::{Checkpoint, Record};

pub const CHECKPOINTS: Collection<Record> = Collection::new("checkpoints");
pub const CHUNKS: Collection<String, Text> = Collection::new("chunks");
pub const META: Counter = Counter::new("meta");
pub const SEQ: &str = "seq";

/// Hex of the first 16 bytes of SHA-256: short, fixed-size and collision-free in practice.
pub fn digest(s: &str) -> String {
    Sha256::digest(s.as_bytes())[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A checkpoint's place in every listing.
pub fn position(timestamp: u64, seq: u64, id: &str) -> String {
    format!("{}/{seq:016x}/{}", time(timestamp), digest(id))
}

fn time(timestamp: u64) -> String {
    format!("{timestamp:016}")
}

/// The listing that serves a filter on agent and/or work session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Index {
    All,
    Agent(String),
    Session(String),
    AgentSession(String, String),
}

impl Index {
    pub fn for_filter(agent: Option<&str>, session: Option<&str>) -> Index {
        match (agent, session) {
            (None, None) => Index::All,
            (Some(a), None) => Index::Agent(a.into()),
            (None, Some(s)) => Index::Session(s.into()),
            (Some(a), Some(s)) => Index::AgentSession(a.into(), s.into()),
        }
    }

    /// Every index a checkpoint appears in.
    pub fn all_for(cp: &Checkpoint) -> Vec<Index> {
        let mut v = vec![Index::All, Index::Agent(cp.agent_id.clone())];
        if let Some(s) = &cp.session_id {
            v.push(Index::Session(s.clone()));
            v.push(Index::AgentSession(cp.agent_id.clone(), s.clone()));
        }
        v
    }

    pub fn collection(&self) -> Collection<Checkpoint> {
        Collection::new(match self {
            Index::All => "by-time",
            Index::Agent(_) => "by-agent",
            Index::Session(_) => "by-session",
            Index::AgentSession(..) => "by-agent-session",
        })
    }

    /// The key prefix of this listing's entries.
    pub fn prefix(&self) -> String {
        match self {
            Index::All => String::new(),
            Index::Agent(a) => format!("{}/", digest(a)),
            Index::Session(s) => format!("{}/", digest(s)),
            Index::AgentSession(a, s) => format!("{}.{}/", digest(a), digest(s)),
        }
    }

    pub fn key(&self, position: &str) -> String {
        format!("{}{position}", self.prefix())
    }

    /// Keys below this bound have a timestamp strictly before `timestamp`.
    pub fn before_time(&self, timestamp: u64) -> String {
        format!("{}{}", self.prefix(), time(timestamp))
    }

    /// Keys above this bound have a timestamp strictly after `timestamp`.
    pub fn after_time(&self, timestamp: u64) -> String {
        // `<t+1>` sorts before every `<t+1>/…` key and after every `<t>/…` key.
        format!("{}{}", self.prefix(), time(timestamp.saturating_add(1)))
    }
}

pub fn chunk(blob: &str, artifact: usize, chunk: u32) -> String {
    format!("{blob}/{artifact:04}/{chunk:08}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_sort_by_time_then_report_order() {
        let a = position(999, 7, "zzz");
        let b = position(1000, 1, "aaa");
        let c = position(1000, 2, "000");
        assert!(a < b && b < c, "{a} {b} {c}");
    }

    #[test]
    fn time_bounds_are_strict() {
        let idx = Index::Agent("agent/with/slashes".into());
        let at = idx.key(&position(1000, 5, "x"));
        assert!(idx.after_time(999) < at, "after 999 includes t=1000");
        assert!(idx.after_time(1000) > at, "after 1000 excludes t=1000");
        assert!(idx.before_time(1001) > at, "before 1001 includes t=1000");
        assert!(idx.before_time(1000) < at, "before 1000 excludes t=1000");
        assert!(at.starts_with(&idx.prefix()));
    }

    #[test]
    fn prefixes_do_not_overlap() {
        let a = Index::Agent("a".into()).prefix();
        let ab = Index::Agent("a/b".into()).prefix();
        assert!(!ab.starts_with(&a) && !a.starts_with(&ab));
        assert_eq!(Index::AgentSession("a".repeat(5000), "s".into()).key(&position(1, 1, "i")).len(), 32 + 1 + 32 + 1 + 16 + 1 + 16 + 1 + 32);
    }

    #[test]
    fn index_follows_the_filter() {
        assert_eq!(Index::for_filter(None, None), Index::All);
        assert_eq!(Index::for_filter(Some("a"), Some("s")).collection().name(), "by-agent-session");
        let cp = Checkpoint { id: "c".into(), agent_id: "a".into(), timestamp: 1, label: None, session_id: None, metadata: None };
        assert_eq!(Index::all_for(&cp).len(), 2);
    }
}
