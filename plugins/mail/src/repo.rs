//! Storage layout on the host's ordered key-value store.
//!
//! - every index is a collection of its own, written in the same batch as
//!   the record it points to;
//! - counts (participants, thread turns and authors) are never stored but
//!   counted from the indexes on read, so no writer can lose or double an
//!   increment (two sessions of one agent joining at once write one index
//!   entry);
//! - the conversation record is rewritten only when it is closed or
//!   reopened; activity is kept apart (`activity`) and folded into
//!   `updatedAt` on read.
//!
//! | collection       | key                                   | value                 |
//! |------------------|---------------------------------------|-----------------------|
//! | `conversations`  | `<conv>`                              | Conversation          |
//! | `activity`       | `<conv>`                              | last write (ms, text) |
//! | `rosters`        | `<conv>`                              | roster token (text)   |
//! | `participants`   | `<conv>/<pid>`                        | Participant           |
//! | `members`        | `<conv>/<pid>` (active only)          | participant id        |
//! | `memberships`    | `<pid>/<conv>` (active only)          | conversation id       |
//! | `turns`          | `<conv>/<turn>`                       | Turn                  |
//! | `thread-turns`   | `<conv>/<thread>/<turn>`              | Turn (copy)           |
//! | `thread-authors` | `<conv>/<thread>/<pid>`               | participant id        |
//! | `threads`        | `<conv>/<thread>`                     | Thread                |
//! | `summaries`      | `<conv>/<scope>/<pid>`                | cached summary        |
//!
//! The roster token is a fresh random id written with every participant
//! record, so a reader that read the same token before reading the
//! participants knows they have not changed since (see
//! [`crate::events::audience_of`]).
//!
//! Values are JSON but for `activity` and `rosters`. Conversation, turn and thread ids are
//! ULID-like and sort by creation time; participant ids come from clients
//! and are escaped (`%`, `/`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::thread::LocalKey;

use map_plugin_sdk::store::raw::Item;
use map_plugin_sdk::store::{self, keys, Batch, Codec, Collection, Range, Text};
use map_plugin_sdk::{ids, Error, Result};

use crate::model::{Cached, Conversation, Participant, Thread, Turn};

pub const CONVERSATIONS: Collection<Conversation> = Collection::new("conversations");
pub const ACTIVITY: Collection<String, Text> = Collection::new("activity");
pub const ROSTERS: Collection<String, Text> = Collection::new("rosters");
pub const PARTICIPANTS: Collection<Participant> = Collection::new("participants");
pub const MEMBERS: Collection<String> = Collection::new("members");
pub const MEMBERSHIPS: Collection<String> = Collection::new("memberships");
pub const TURNS: Collection<Turn> = Collection::new("turns");
pub const THREAD_TURNS: Collection<Turn> = Collection::new("thread-turns");
pub const THREAD_AUTHORS: Collection<String> = Collection::new("thread-authors");
pub const THREADS: Collection<Thread> = Collection::new("threads");
pub const SUMMARIES: Collection<Cached> = Collection::new("summaries");

/// A participant id made safe for use inside a key.
pub fn esc(id: &str) -> String {
    keys::escape(id)
}

pub fn participant_key(conv: &str, pid: &str) -> String {
    format!("{conv}/{}", esc(pid))
}

pub fn membership_key(pid: &str, conv: &str) -> String {
    format!("{}/{conv}", esc(pid))
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

/// Can the store take `key`? (At most 512 bytes, without U+10FFFF.) A key
/// it cannot take fails a whole `get-many`, so such keys are not read
/// ahead but on their own, where the failure is reported as before.
fn storable(key: &str) -> bool {
    key.len() <= 512 && !key.contains('\u{10FFFF}')
}

/// A value of `collection` read by a `get-many` across collections.
fn decoded<T, C: Codec<T>>(collection: Collection<T, C>, key: &str, item: Option<Item>) -> Result<Option<T>> {
    item.map(|i| C::decode(&i.value).map_err(|e| Error::damaged(collection.name(), key, e))).transpose()
}

/// Records decoded recently, by key and store version. A version names one
/// value of its key for good (every write gives a greater one), so a record
/// read again at the version it had is cloned instead of decoded: decoding
/// JSON in wasm is most of what a turn's first read costs in the plugin.
struct Recent<T> {
    kept: HashMap<String, (u64, T)>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent { kept: HashMap::new() }
    }
}

/// Records kept per collection; all are dropped when one more would not fit.
const RECENT_KEPT: usize = 256;
/// Larger values are decoded every time (they bound the memory kept).
const RECENT_MAX_BYTES: usize = 2048;

impl<T: Clone> Recent<T> {
    fn get(&self, key: &str, version: u64) -> Option<T> {
        self.kept.get(key).filter(|(v, _)| *v == version).map(|(_, value)| value.clone())
    }

    fn keep(&mut self, key: &str, version: u64, value: &T) {
        if self.kept.len() >= RECENT_KEPT && !self.kept.contains_key(key) {
            self.kept.clear();
        }
        self.kept.insert(key.to_string(), (version, value.clone()));
    }
}

thread_local! {
    static RECENT_CONVERSATIONS: RefCell<Recent<Conversation>> = RefCell::default();
    static RECENT_PARTICIPANTS: RefCell<Recent<Participant>> = RefCell::default();
}

/// [`decoded`] through `recent`.
fn decoded_recent<T: Clone, C: Codec<T>>(
    recent: &'static LocalKey<RefCell<Recent<T>>>,
    collection: Collection<T, C>,
    key: &str,
    item: Option<Item>,
) -> Result<Option<T>> {
    let Some(item) = item else { return Ok(None) };
    if let Some(value) = recent.with(|r| r.borrow().get(key, item.version)) {
        return Ok(Some(value));
    }
    let (version, small) = (item.version, item.value.len() <= RECENT_MAX_BYTES);
    let value = decoded(collection, key, Some(item))?.expect("an item was given");
    if small {
        recent.with(|r| r.borrow_mut().keep(key, version, &value));
    }
    Ok(Some(value))
}

/// Every value of a range, read up to 1,000 entries per call.
fn every<T, C: Codec<T>>(range: Range<T, C>) -> Result<Vec<T>> {
    Ok(range.take(usize::MAX)?.into_iter().map(|e| e.value).collect())
}

// ---------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------

/// Mail's records with their indexes, added to a batch.
pub trait Writes {
    /// Record activity on a conversation (folded into its `updatedAt`).
    fn touch(&mut self, conv: &str, now: u64) -> &mut Self;
    /// A participant record, active or not, with its membership indexes
    /// and a new roster token for its conversation.
    fn participant(&mut self, p: &Participant) -> &mut Self;
    /// A new or changed turn, with its thread indexes.
    fn turn(&mut self, t: &Turn) -> &mut Self;
    /// [`Writes::turn`] with the turn already written as JSON.
    fn turn_json(&mut self, t: &Turn, json: &str) -> &mut Self;
}

impl Writes for Batch {
    fn touch(&mut self, conv: &str, now: u64) -> &mut Self {
        self.put(&ACTIVITY, conv, &now.to_string())
    }

    fn participant(&mut self, p: &Participant) -> &mut Self {
        let (conv, pid) = (&p.conversation_id, &p.id);
        self.put(&PARTICIPANTS, participant_key(conv, pid), p).put(&ROSTERS, conv, &ids::ulid());
        if p.is_active() {
            self.put(&MEMBERS, participant_key(conv, pid), pid).put(&MEMBERSHIPS, membership_key(pid, conv), conv)
        } else {
            self.delete(&MEMBERS, participant_key(conv, pid)).delete(&MEMBERSHIPS, membership_key(pid, conv))
        }
    }

    fn turn(&mut self, t: &Turn) -> &mut Self {
        match serde_json::to_string(t) {
            Ok(json) => self.turn_json(t, &json),
            // The batch fails as a whole, as `put` would.
            Err(_) => self.put(&TURNS, turn_key(&t.conversation_id, &t.id), t),
        }
    }

    fn turn_json(&mut self, t: &Turn, json: &str) -> &mut Self {
        let conv = &t.conversation_id;
        self.put_bytes(TURNS.name(), turn_key(conv, &t.id), json.as_bytes().to_vec());
        if let Some(thread) = &t.thread_id {
            let prefix = thread_turn_prefix(conv, thread);
            self.put_bytes(THREAD_TURNS.name(), format!("{prefix}{}", t.id), json.as_bytes().to_vec());
            self.put(&THREAD_AUTHORS, format!("{prefix}{}", esc(&t.participant)), &t.participant);
        }
        self
    }
}

// ---------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------

/// What a method reads of a conversation first, in one `get-many`: the
/// conversation (with `updatedAt` brought up to date but `participantCount`
/// left at 0, see [`count_participants`]), its roster token, one
/// participant's record, and the threads and turns the request names.
pub struct Snapshot {
    pub conversation: Option<Conversation>,
    /// Absent for conversations whose participants were last written before
    /// tokens were kept.
    pub roster: Option<String>,
    pub participant: Option<Participant>,
    pub ahead: Ahead,
}

/// Threads and turns of one conversation read ahead with it; any other is
/// read from the store when asked for.
pub struct Ahead {
    conv: String,
    threads: Vec<(String, Option<Thread>)>,
    turns: Vec<(String, Option<Turn>)>,
}

impl Ahead {
    /// Nothing read ahead: every lookup reads the store.
    pub fn none(conv: &str) -> Ahead {
        Ahead { conv: conv.to_string(), threads: Vec::new(), turns: Vec::new() }
    }

    pub fn has_thread(&self, id: &str) -> Result<bool> {
        match self.threads.iter().find(|(t, _)| t == id) {
            Some((_, thread)) => Ok(thread.is_some()),
            None => THREADS.exists(&thread_key(&self.conv, id)),
        }
    }

    pub fn thread(&self, id: &str) -> Result<Option<Thread>> {
        match self.threads.iter().find(|(t, _)| t == id) {
            Some((_, thread)) => Ok(thread.clone()),
            None => THREADS.get(&thread_key(&self.conv, id)),
        }
    }

    pub fn turn(&self, id: &str) -> Result<Option<Turn>> {
        match self.turns.iter().find(|(t, _)| t == id) {
            Some((_, turn)) => Ok(turn.clone()),
            None => TURNS.get(&turn_key(&self.conv, id)),
        }
    }
}

/// Read a conversation, its activity and roster token, `pid`'s participant
/// record, and the threads and turns named (absent or not), in one store call.
pub fn snapshot(conv: &str, pid: Option<&str>, threads: &[&str], turns: &[&str]) -> Result<Snapshot> {
    let ahead = |ids: &[&str], key: fn(&str, &str) -> String| -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for id in ids {
            let k = key(conv, id);
            if storable(&k) && !out.iter().any(|(seen, _)| seen == id) {
                out.push((id.to_string(), k));
            }
        }
        out
    };
    let (thread_keys, turn_keys) = (ahead(threads, thread_key), ahead(turns, turn_key));
    let member_key = pid.map(|p| participant_key(conv, p));
    let member_ahead = member_key.as_deref().filter(|k| storable(k));

    let mut refs: Vec<(&str, &str)> = vec![(CONVERSATIONS.name(), conv), (ACTIVITY.name(), conv), (ROSTERS.name(), conv)];
    refs.extend(member_ahead.map(|k| (PARTICIPANTS.name(), k)));
    refs.extend(thread_keys.iter().map(|(_, k)| (THREADS.name(), k.as_str())));
    refs.extend(turn_keys.iter().map(|(_, k)| (TURNS.name(), k.as_str())));
    let mut items = store::get_many(&refs)?.into_iter();

    let conversation = decoded_recent(&RECENT_CONVERSATIONS, CONVERSATIONS, conv, items.next().flatten())?;
    let activity = decoded(ACTIVITY, conv, items.next().flatten())?.and_then(|v| v.trim().parse::<u64>().ok());
    let roster = decoded(ROSTERS, conv, items.next().flatten())?;
    let participant = match (member_ahead, &member_key) {
        (Some(k), _) => decoded_recent(&RECENT_PARTICIPANTS, PARTICIPANTS, k, items.next().flatten())?,
        // Read on its own once the conversation is known to exist, so the
        // store's refusal of the key comes after a missing conversation.
        (None, Some(k)) if conversation.is_some() => PARTICIPANTS.get(k)?,
        _ => None,
    };
    let mut read_ahead = Ahead::none(conv);
    for (id, k) in thread_keys {
        let thread = decoded(THREADS, &k, items.next().flatten())?;
        read_ahead.threads.push((id, thread));
    }
    for (id, k) in turn_keys {
        let turn = decoded(TURNS, &k, items.next().flatten())?;
        read_ahead.turns.push((id, turn));
    }
    let conversation = conversation.map(|mut c| {
        c.updated_at = c.updated_at.max(activity.unwrap_or(0));
        c
    });
    Ok(Snapshot { conversation, roster, participant, ahead: read_ahead })
}

/// Conversations in one store call, with `updatedAt` brought up to date
/// (`participantCount` left at 0), and for each whether `pid` is one of its
/// current participants (`false` when no `pid` is given, or when no key
/// could hold that).
pub fn conversations(ids: &[String], pid: Option<&str>) -> Result<Vec<(Option<Conversation>, bool)>> {
    let member_keys: Vec<Option<String>> = ids.iter().map(|id| pid.map(|p| participant_key(id, p)).filter(|k| storable(k))).collect();
    let mut refs: Vec<(&str, &str)> = Vec::with_capacity(ids.len() * 3);
    for (id, member_key) in ids.iter().zip(&member_keys) {
        refs.push((CONVERSATIONS.name(), id));
        refs.push((ACTIVITY.name(), id));
        refs.extend(member_key.as_deref().map(|k| (MEMBERS.name(), k)));
    }
    let mut items = store::get_many(&refs)?.into_iter();
    let mut out = Vec::with_capacity(ids.len());
    for (id, member_key) in ids.iter().zip(&member_keys) {
        let conv = decoded(CONVERSATIONS, id, items.next().flatten())?;
        let activity = decoded(ACTIVITY, id, items.next().flatten())?.and_then(|v| v.trim().parse::<u64>().ok());
        let member = member_key.is_some() && items.next().flatten().is_some();
        let conv = conv.map(|mut c| {
            c.updated_at = c.updated_at.max(activity.unwrap_or(0));
            c
        });
        out.push((conv, member));
    }
    Ok(out)
}

/// How many current participants a conversation has (from the `members` index).
pub fn count_participants(conv: &str) -> Result<u64> {
    MEMBERS.count(&format!("{conv}/"))
}

pub fn participant(conv: &str, pid: &str) -> Result<Option<Participant>> {
    PARTICIPANTS.get(&participant_key(conv, pid))
}

/// Every participant record of a conversation (also those who left), by join time.
pub fn participants(conv: &str) -> Result<Vec<Participant>> {
    let mut all = every(PARTICIPANTS.prefix(format!("{conv}/")))?;
    all.sort_by(|a, b| a.joined_at.cmp(&b.joined_at).then_with(|| a.id.cmp(&b.id)));
    Ok(all)
}

/// The newest turn key of a conversation: a cheap "has anything changed" token.
pub fn latest_turn_id(conv: &str) -> Result<Option<String>> {
    let newest = TURNS.prefix(format!("{conv}/")).reverse().first()?;
    Ok(newest.map(|e| e.key[conv.len() + 1..].to_string()))
}

/// A thread with its turn and author counts brought up to date.
pub fn with_counts(mut t: Thread) -> Result<Thread> {
    let prefix = thread_turn_prefix(&t.conversation_id, &t.id);
    t.turn_count = THREAD_TURNS.count(&prefix)?;
    t.participant_count = THREAD_AUTHORS.count(&prefix)?;
    if let Some(last) = THREAD_TURNS.prefix(prefix).reverse().first()? {
        t.updated_at = t.updated_at.max(last.value.updated_at.unwrap_or(last.value.timestamp));
    }
    Ok(t)
}

/// All threads of a conversation in creation order (without derived counts).
pub fn threads(conv: &str) -> Result<Vec<Thread>> {
    every(THREADS.prefix(format!("{conv}/")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;

    fn turn(id: &str, thread: Option<&str>) -> Turn {
        Turn { thread_id: thread.map(String::from), ..Turn::sample(id, "a/b") }
    }

    #[test]
    fn keys_keep_the_stored_layout() {
        assert_eq!(participant_key("conv-1", "a/b%c"), "conv-1/a%2Fb%25c");
        assert_eq!(membership_key("a/b", "conv-1"), "a%2Fb/conv-1");
        assert_eq!(turn_key("conv-1", "turn-2"), "conv-1/turn-2");
        assert_eq!(thread_key("conv-1", "thread-3"), "conv-1/thread-3");
        assert_eq!(thread_turn_prefix("conv-1", "thread-3"), "conv-1/thread-3/");
        assert_eq!(<Text as Codec<String>>::encode(&"1706745600000".to_string()).unwrap(), b"1706745600000");
    }

    #[test]
    fn only_keys_the_store_takes_are_read_ahead() {
        assert!(storable(&"x".repeat(512)));
        assert!(!storable(&"x".repeat(513)));
        assert!(!storable("a\u{10FFFF}"));
    }

    #[test]
    fn a_record_is_reused_only_at_the_version_it_was_read() {
        let mut r: Recent<String> = Recent::default();
        r.keep("conv-1", 7, &"seven".to_string());
        assert_eq!(r.get("conv-1", 7).as_deref(), Some("seven"));
        assert!(r.get("conv-1", 8).is_none(), "written since");
        assert!(r.get("conv-2", 7).is_none());
        r.keep("conv-1", 8, &"eight".to_string());
        assert_eq!(r.get("conv-1", 8).as_deref(), Some("eight"));
        assert_eq!(r.kept.len(), 1);
        for i in 0..RECENT_KEPT + 1 {
            r.keep(&format!("k{i}"), 1, &String::new());
        }
        assert!(r.kept.len() <= RECENT_KEPT, "bounded");
    }

    #[test]
    fn read_ahead_records_are_served_without_the_store() {
        let mut ahead = Ahead::none("conv-1");
        ahead.threads.push(("thread-1".into(), None));
        ahead.turns.push(("turn-1".into(), Some(turn("turn-1", None))));
        ahead.turns.push(("turn-2".into(), None));
        assert!(!ahead.has_thread("thread-1").unwrap());
        assert!(ahead.thread("thread-1").unwrap().is_none());
        assert_eq!(ahead.turn("turn-1").unwrap().map(|t| t.id).as_deref(), Some("turn-1"));
        assert!(ahead.turn("turn-2").unwrap().is_none(), "read ahead and absent");
    }

    #[test]
    fn writes_carry_their_indexes() {
        let mut b = Batch::new();
        b.turn(&turn("turn-1", None)).touch("conv-1", 5);
        assert_eq!(b.len(), 2, "the turn and the activity");
        let mut b = Batch::new();
        b.turn(&turn("turn-1", Some("thread-1")));
        assert_eq!(b.len(), 3, "the turn, its thread copy and the thread's author");
        let mut p = Participant::sample("a", Role::Worker);
        let mut b = Batch::new();
        b.participant(&p);
        p.left_at = Some(1);
        b.participant(&p);
        assert_eq!(b.len(), 8, "record, roster token, members and memberships, put then deleted");
        assert!(!b.has_conditions());
    }
}
