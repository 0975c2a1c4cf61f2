//! Storage layout on the host's ordered key-value store.
//!
//! The store has no secondary indexes and no compare-and-swap, so:
//! - every index is a collection of its own, written in the same `batch` as
//!   the record it points to;
//! - counters (participants, thread turns and authors) are never stored but
//!   counted from the indexes on read, so concurrent writers from different
//!   instances cannot lose an increment;
//! - the conversation record is rewritten only when it is closed; activity
//!   is kept apart (`activity`) and folded into `updatedAt` on read.
//!
//! | collection       | key                                   | value            |
//! |------------------|---------------------------------------|------------------|
//! | `conversations`  | `<conv>`                              | Conversation     |
//! | `activity`       | `<conv>`                              | last write (ms)  |
//! | `participants`   | `<conv>/<pid>`                        | Participant      |
//! | `members`        | `<conv>/<pid>` (active only)          | participant id   |
//! | `memberships`    | `<pid>/<conv>` (active only)          | conversation id  |
//! | `turns`          | `<conv>/<turn>`                       | Turn             |
//! | `thread-turns`   | `<conv>/<thread>/<turn>`              | Turn (copy)      |
//! | `thread-authors` | `<conv>/<thread>/<pid>`               | participant id   |
//! | `threads`        | `<conv>/<thread>`                     | Thread           |
//! | `summaries`      | `<conv>/<scope>/<pid>`                | cached summary   |
//!
//! Conversation, turn and thread ids are ULID-like and sort by creation
//! time; participant ids come from clients and are escaped (`%`, `/`).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{MailError, MailResult};
use crate::map_gateway::plugin::store::{self, Entry, KeyRef, ScanOptions, StoreError, Write};
use crate::model::{Conversation, Participant, Thread, Turn};

pub const CONVERSATIONS: &str = "conversations";
pub const ACTIVITY: &str = "activity";
pub const PARTICIPANTS: &str = "participants";
pub const MEMBERS: &str = "members";
pub const MEMBERSHIPS: &str = "memberships";
pub const TURNS: &str = "turns";
pub const THREAD_TURNS: &str = "thread-turns";
pub const THREAD_AUTHORS: &str = "thread-authors";
pub const THREADS: &str = "threads";
pub const SUMMARIES: &str = "summaries";

/// Entries read per `scan` call.
const PAGE: u32 = 256;

fn storage(e: StoreError) -> MailError {
    match e {
        StoreError::Invalid(m) => MailError::storage(format!("invalid request: {m}")),
        StoreError::Unavailable(m) => MailError::storage(m),
    }
}

/// A participant id made safe for use inside a key.
pub fn esc(id: &str) -> String {
    id.replace('%', "%25").replace('/', "%2F")
}

pub fn participant_key(conv: &str, pid: &str) -> String {
    format!("{conv}/{}", esc(pid))
}

pub fn turn_key(conv: &str, turn: &str) -> String {
    format!("{conv}/{turn}")
}

pub fn thread_key(conv: &str, thread: &str) -> String {
    format!("{conv}/{thread}")
}

pub fn thread_turn_prefix(conv: &str, thread: &str) -> String {
    format!("{conv}/{thread}/")
}

fn decode<T: DeserializeOwned>(collection: &str, key: &str, text: &str) -> MailResult<T> {
    serde_json::from_str(text).map_err(|e| MailError::storage(format!("corrupt record {collection}/{key}: {e}")))
}

pub fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("mail records serialise")
}

pub fn get<T: DeserializeOwned>(collection: &str, key: &str) -> MailResult<Option<T>> {
    match store::get(collection, key).map_err(storage)? {
        Some(text) => decode(collection, key, &text).map(Some),
        None => Ok(None),
    }
}

pub fn exists(collection: &str, key: &str) -> MailResult<bool> {
    Ok(store::get(collection, key).map_err(storage)?.is_some())
}

pub fn count(collection: &str, prefix: &str) -> MailResult<u64> {
    store::count(collection, prefix).map_err(storage)
}

/// A key range of one collection, read in pages.
pub struct Range<'a> {
    pub collection: &'a str,
    pub prefix: String,
    /// Exclusive lower bound (a full key).
    pub after: Option<String>,
    /// Exclusive upper bound (a full key).
    pub before: Option<String>,
    pub reverse: bool,
}

impl<'a> Range<'a> {
    pub fn prefix(collection: &'a str, prefix: impl Into<String>) -> Self {
        Range { collection, prefix: prefix.into(), after: None, before: None, reverse: false }
    }

    /// Visit entries in order until `visit` returns `false`.
    pub fn each(&self, mut visit: impl FnMut(Entry) -> MailResult<bool>) -> MailResult<()> {
        let (mut after, mut before) = (self.after.clone(), self.before.clone());
        loop {
            let opts = ScanOptions { prefix: self.prefix.clone(), after: after.clone(), before: before.clone(), limit: PAGE, reverse: self.reverse };
            let page = store::scan(self.collection, &opts).map_err(storage)?;
            let full = page.len() as u32 == PAGE;
            let last = page.last().map(|e| e.key.clone());
            for entry in page {
                if !visit(entry)? {
                    return Ok(());
                }
            }
            match last {
                Some(k) if full => {
                    if self.reverse {
                        before = Some(k);
                    } else {
                        after = Some(k);
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// The first entry in order, if any.
    pub fn first(&self) -> MailResult<Option<Entry>> {
        let opts = ScanOptions { prefix: self.prefix.clone(), after: self.after.clone(), before: self.before.clone(), limit: 1, reverse: self.reverse };
        Ok(store::scan(self.collection, &opts).map_err(storage)?.into_iter().next())
    }

    /// Every record of the range, decoded.
    pub fn all<T: DeserializeOwned>(&self) -> MailResult<Vec<T>> {
        let mut out = Vec::new();
        self.each(|e| {
            out.push(decode(self.collection, &e.key, &e.value)?);
            Ok(true)
        })?;
        Ok(out)
    }
}

/// Writes applied together or not at all.
#[derive(Default)]
pub struct Batch(Vec<Write>);

impl Batch {
    pub fn put<T: Serialize>(&mut self, collection: &str, key: String, value: &T) -> &mut Self {
        self.put_raw(collection, key, encode(value))
    }

    pub fn put_raw(&mut self, collection: &str, key: String, value: String) -> &mut Self {
        self.0.push(Write { collection: collection.into(), key, value: Some(value) });
        self
    }

    pub fn delete(&mut self, collection: &str, key: String) -> &mut Self {
        self.0.push(Write { collection: collection.into(), key, value: None });
        self
    }

    /// Record activity on a conversation (folded into its `updatedAt`).
    pub fn touch(&mut self, conv: &str, now: u64) -> &mut Self {
        self.put_raw(ACTIVITY, conv.into(), now.to_string())
    }

    /// A participant record, active or not, with its membership indexes.
    pub fn participant(&mut self, p: &Participant) -> &mut Self {
        let (conv, pid) = (&p.conversation_id, &p.id);
        self.put(PARTICIPANTS, participant_key(conv, pid), p);
        let member_key = participant_key(conv, pid);
        let membership_key = format!("{}/{conv}", esc(pid));
        if p.is_active() {
            self.put(MEMBERS, member_key, pid);
            self.put(MEMBERSHIPS, membership_key, conv)
        } else {
            self.delete(MEMBERS, member_key);
            self.delete(MEMBERSHIPS, membership_key)
        }
    }

    /// A new or changed turn, with its thread indexes.
    pub fn turn(&mut self, t: &Turn) -> &mut Self {
        let conv = &t.conversation_id;
        self.put(TURNS, turn_key(conv, &t.id), t);
        if let Some(thread) = &t.thread_id {
            let prefix = thread_turn_prefix(conv, thread);
            self.put(THREAD_TURNS, format!("{prefix}{}", t.id), t);
            self.put(THREAD_AUTHORS, format!("{prefix}{}", esc(&t.participant)), &t.participant);
        }
        self
    }

    pub fn commit(self) -> MailResult<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        store::batch(&self.0).map_err(storage)
    }
}

// ---------------------------------------------------------------------------
// Reads with derived fields
// ---------------------------------------------------------------------------

/// A conversation with `participantCount` and `updatedAt` brought up to date.
pub fn conversation(id: &str) -> MailResult<Option<Conversation>> {
    let Some(mut c) = conversation_and(id, None)?.0 else { return Ok(None) };
    c.participant_count = count(MEMBERS, &format!("{id}/"))?;
    Ok(Some(c))
}

/// In one store round trip: a conversation (with `updatedAt` brought up to
/// date but `participantCount` left at 0, for callers that do not answer
/// with it) and, when `pid` is given, that participant's record.
pub fn conversation_and(id: &str, pid: Option<&str>) -> MailResult<(Option<Conversation>, Option<Participant>)> {
    let key = |collection: &str, key: String| KeyRef { collection: collection.into(), key };
    let mut keys = vec![key(CONVERSATIONS, id.into()), key(ACTIVITY, id.into())];
    keys.extend(pid.map(|p| key(PARTICIPANTS, participant_key(id, p))));
    let mut found = store::get_many(&keys).map_err(storage)?.into_iter();
    let mut text = |collection: &str| -> MailResult<Option<String>> {
        match found.next().flatten() {
            Some(item) => String::from_utf8(item.value).map(Some).map_err(|_| MailError::storage(format!("corrupt record in {collection}: not UTF-8"))),
            None => Ok(None),
        }
    };
    let conv = text(CONVERSATIONS)?.map(|t| decode::<Conversation>(CONVERSATIONS, id, &t)).transpose()?;
    let activity = text(ACTIVITY)?.and_then(|v| v.parse::<u64>().ok());
    let member = match pid {
        Some(p) => text(PARTICIPANTS)?.map(|t| decode::<Participant>(PARTICIPANTS, p, &t)).transpose()?,
        None => None,
    };
    let conv = conv.map(|mut c| {
        c.updated_at = c.updated_at.max(activity.unwrap_or(0));
        c
    });
    Ok((conv, member))
}

pub fn participant(conv: &str, pid: &str) -> MailResult<Option<Participant>> {
    get(PARTICIPANTS, &participant_key(conv, pid))
}

/// Every participant record of a conversation (also those who left), by join time.
pub fn participants(conv: &str) -> MailResult<Vec<Participant>> {
    let mut all: Vec<Participant> = Range::prefix(PARTICIPANTS, format!("{conv}/")).all()?;
    all.sort_by(|a, b| a.joined_at.cmp(&b.joined_at).then_with(|| a.id.cmp(&b.id)));
    Ok(all)
}

pub fn turn(conv: &str, turn_id: &str) -> MailResult<Option<Turn>> {
    get(TURNS, &turn_key(conv, turn_id))
}

/// The newest turn key of a conversation: a cheap "has anything changed" token.
pub fn latest_turn_id(conv: &str) -> MailResult<Option<String>> {
    let range = Range { reverse: true, ..Range::prefix(TURNS, format!("{conv}/")) };
    Ok(range.first()?.map(|e| e.key[conv.len() + 1..].to_string()))
}

/// A thread with its turn and author counts brought up to date.
pub fn with_counts(mut t: Thread) -> MailResult<Thread> {
    let prefix = thread_turn_prefix(&t.conversation_id, &t.id);
    t.turn_count = count(THREAD_TURNS, &prefix)?;
    t.participant_count = count(THREAD_AUTHORS, &prefix)?;
    let newest = Range { reverse: true, ..Range::prefix(THREAD_TURNS, prefix.clone()) }.first()?;
    if let Some(e) = newest {
        let last: Turn = decode(THREAD_TURNS, &e.key, &e.value)?;
        t.updated_at = t.updated_at.max(last.updated_at.unwrap_or(last.timestamp));
    }
    Ok(t)
}

/// All threads of a conversation in creation order (without derived counts).
pub fn threads(conv: &str) -> MailResult<Vec<Thread>> {
    Range::prefix(THREADS, format!("{conv}/")).all()
}

pub fn decode_entry<T: DeserializeOwned>(collection: &str, e: &Entry) -> MailResult<T> {
    decode(collection, &e.key, &e.value)
}
