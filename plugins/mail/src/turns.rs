//! Turns: recording (explicit and intercepted), updating, listing, replay.

use map_plugin_sdk::store::{Batch, Json, Range};
use map_plugin_sdk::{ids, Call, Error, Reply, Result};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::access::{self, Actor, Reader, Sees, Visit};
use crate::error;
use crate::events;
use crate::model::{valid_content_type, Conversation, Participant, Turn, TurnSource, TurnStatus, Visibility};
use crate::params::{self, OneOrMany};
use crate::received;
use crate::repo::{self, Ahead, Writes};

/// Turns returned per page unless the request says otherwise.
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 500;

// ---------------------------------------------------------------------------
// Recording
// ---------------------------------------------------------------------------

/// What a new turn says, before it gets an id.
pub struct TurnSpec {
    pub content_type: String,
    pub content: Value,
    pub thread_id: Option<String>,
    pub in_reply_to: Option<String>,
    pub visibility: Option<Visibility>,
    pub metadata: Map<String, Value>,
    pub status: TurnStatus,
}

/// Check a turn against the conversation and build it. The author must be
/// an active participant allowed to send; the thread and the turn replied
/// to must exist (and the latter be visible to the author), looked up in
/// `ahead` when they were read with the conversation.
pub fn build(conv: &Conversation, ahead: &Ahead, author: &Participant, spec: TurnSpec, source: TurnSource) -> Result<Turn> {
    access::require_open(conv)?;
    access::require_permission(author.permissions.can_send, author, "canSend", "send turns")?;
    if !valid_content_type(&spec.content_type) {
        return Err(error::invalid_content_type(&spec.content_type));
    }
    if let Some(thread) = &spec.thread_id {
        if !ahead.has_thread(thread)? {
            return Err(error::thread_not_found(&conv.id, thread));
        }
    }
    if let Some(reply_to) = &spec.in_reply_to {
        access::visible_turn(&conv.id, ahead, reply_to, author)?;
    }
    let (id, timestamp) = ids::new_id_at("turn");
    Ok(Turn {
        id,
        conversation_id: conv.id.clone(),
        participant: author.id.clone(),
        timestamp,
        content_type: spec.content_type,
        content: spec.content,
        thread_id: spec.thread_id,
        in_reply_to: spec.in_reply_to,
        source,
        visibility: spec.visibility,
        status: spec.status,
        metadata: spec.metadata,
        updated_at: None,
    })
}

/// A turn written as JSON once, for the store, its event and the answer.
pub fn to_json(turn: &Turn) -> Result<Box<RawValue>> {
    serde_json::value::to_raw_value(turn).map_err(|e| Error::internal(format!("turn {} cannot be written as JSON: {e}", turn.id)))
}

/// Store a built turn with its thread indexes and the conversation's
/// activity in one commit (it is durable once this returns), and announce
/// it (to the audience, read unless `roster`, the token read with the
/// conversation, says the one this instance kept is current). Returns the
/// turn's JSON.
pub fn store(turn: &Turn, roster: Option<&str>) -> Result<Box<RawValue>> {
    let json = to_json(turn)?;
    let mut batch = Batch::new();
    batch.turn_json(turn, json.get()).touch(&turn.conversation_id, turn.timestamp);
    batch.apply()?;
    announce_to(&events::audience_of(&turn.conversation_id, roster, turn.timestamp), turn, &json);
    Ok(json)
}

/// The data of `mail.turn.added` and `mail.turn.updated`, written straight
/// from the turn (a turn is the hot path: no intermediate JSON tree).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TurnEvent<'a> {
    conversation_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    turn_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<TurnStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    participant_id: Option<&'a str>,
    turn: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread_id: Option<&'a str>,
}

impl<'a> TurnEvent<'a> {
    fn added(turn: &'a Turn, json: &'a RawValue) -> TurnEvent<'a> {
        TurnEvent {
            conversation_id: &turn.conversation_id,
            turn_id: None,
            status: None,
            participant_id: None,
            turn: json,
            thread_id: turn.thread_id.as_deref(),
        }
    }

    fn updated(turn: &'a Turn, json: &'a RawValue) -> TurnEvent<'a> {
        TurnEvent { turn_id: Some(&turn.id), status: Some(turn.status), participant_id: Some(&turn.participant), ..TurnEvent::added(turn, json) }
    }
}

/// A result holding one turn: `{"turn": …}`.
fn turn_result(json: &RawValue) -> Reply {
    Reply::raw(format!(r#"{{"turn":{}}}"#, json.get()))
}

/// `mail.turn.added` and `mail/turn.received`, for participants already
/// known to be the current ones.
pub fn announce_to(current: &[Participant], turn: &Turn, json: &RawValue) {
    events::emit_turn_to(events::TURN_ADDED, current, turn, &TurnEvent::added(turn, json));
    received::notify(current, turn);
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TurnParams {
    conversation_id: String,
    /// Present: update this turn (its status, and content) instead of adding one.
    turn_id: Option<String>,
    content_type: Option<String>,
    content: Option<Value>,
    thread_id: Option<String>,
    in_reply_to: Option<String>,
    visibility: Option<Visibility>,
    metadata: Option<Map<String, Value>>,
    status: Option<TurnStatus>,
}

/// `mail/turn`: record a turn explicitly, or update one of the caller's own
/// turns (e.g. `streaming` → `complete`) when `turnId` is given.
///
/// Three store calls: one `get-many` (the conversation, its activity, the
/// author's participant record, and the thread and the turn the request
/// names), one commit, and the event's audience.
pub fn record(call: &Call) -> Result<Reply> {
    let actor = Actor::from_caller(call.caller);
    let p: TurnParams = call.params()?;
    let conv_id = params::id("conversationId", &p.conversation_id)?;
    let visit = match &p.turn_id {
        Some(turn_id) => access::visit(conv_id, &actor, &[], &[turn_id])?,
        None => access::visit(conv_id, &actor, p.thread_id.as_deref().as_slice(), p.in_reply_to.as_deref().as_slice())?,
    };
    let author = visit.member(&actor)?;
    if let Some(turn_id) = &p.turn_id {
        return update(&visit, &author, turn_id, p.status, p.content, p.metadata);
    }
    let content_type = p.content_type.ok_or_else(|| Error::invalid_params("contentType is required"))?;
    let content = p.content.ok_or_else(|| Error::invalid_params("content is required"))?;
    let spec = TurnSpec {
        content_type,
        content,
        thread_id: p.thread_id,
        in_reply_to: p.in_reply_to,
        visibility: p.visibility,
        metadata: p.metadata.unwrap_or_default(),
        status: p.status.unwrap_or_default(),
    };
    let turn = build(&visit.conv, &visit.ahead, &author, spec, TurnSource::Explicit { method: "mail/turn".into() })?;
    let json = store(&turn, visit.roster.as_deref())?;
    Ok(turn_result(&json))
}

fn update(
    visit: &Visit,
    author: &Participant,
    turn_id: &str,
    status: Option<TurnStatus>,
    content: Option<Value>,
    metadata: Option<Map<String, Value>>,
) -> Result<Reply> {
    let conv = &visit.conv;
    access::require_open(conv)?;
    let mut turn = visit.visible_turn(turn_id, author)?;
    if turn.participant != author.id {
        return Err(error::permission_denied(format!("{} may only update its own turns; {turn_id} is by {}", author.id, turn.participant), "author"));
    }
    if status.is_none() && content.is_none() && metadata.is_none() {
        return Err(Error::invalid_params("an update needs status, content or metadata"));
    }
    let now = ids::now_ms();
    if let Some(s) = status {
        turn.status = s;
    }
    if let Some(c) = content {
        turn.content = c;
    }
    if let Some(m) = metadata {
        turn.metadata.extend(m);
    }
    turn.updated_at = Some(now);
    let json = to_json(&turn)?;
    let mut batch = Batch::new();
    batch.turn_json(&turn, json.get()).touch(&conv.id, now);
    batch.apply()?;
    events::emit_turn(events::TURN_UPDATED, &turn, &TurnEvent::updated(&turn, &json));
    Ok(turn_result(&json))
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

/// Which threads a query covers.
pub enum ThreadScope {
    Any,
    One(String),
    /// A thread and its descendants.
    Among(Vec<String>),
}

/// A filtered walk over a conversation's turns, as one reader sees them.
pub struct TurnQuery {
    pub conv: String,
    pub threads: ThreadScope,
    pub content_types: Vec<String>,
    pub participant: Option<String>,
    /// Exclusive id bounds.
    pub after_id: Option<String>,
    pub before_id: Option<String>,
    /// Inclusive id bounds.
    pub from_id: Option<String>,
    pub to_id: Option<String>,
    /// Exclusive timestamp bounds.
    pub after_ts: Option<u64>,
    pub before_ts: Option<u64>,
    pub descending: bool,
}

pub struct Page {
    pub turns: Vec<Turn>,
    pub has_more: bool,
    /// Every matching turn from the start position on (only when counted).
    pub matched: u64,
}

impl TurnQuery {
    pub fn new(conv: &str) -> TurnQuery {
        TurnQuery {
            conv: conv.to_string(),
            threads: ThreadScope::Any,
            content_types: Vec::new(),
            participant: None,
            after_id: None,
            before_id: None,
            from_id: None,
            to_id: None,
            after_ts: None,
            before_ts: None,
            descending: false,
        }
    }

    fn range(&self) -> Range<Turn, Json> {
        let (collection, prefix) = match &self.threads {
            ThreadScope::One(t) => (repo::THREAD_TURNS, repo::thread_turn_prefix(&self.conv, t)),
            _ => (repo::TURNS, format!("{}/", self.conv)),
        };
        // Ids carry their timestamp, so time filters become key bounds too.
        let after = [self.after_id.clone(), self.after_ts.map(|ts| ids::bounds_of_ms("turn", ts).1)].into_iter().flatten().max();
        let before = [self.before_id.clone(), self.before_ts.map(|ts| ids::bounds_of_ms("turn", ts).0)].into_iter().flatten().min();
        let mut range = collection.prefix(prefix.clone());
        if let Some(id) = after {
            range = range.after(format!("{prefix}{id}"));
        }
        if let Some(id) = before {
            range = range.before(format!("{prefix}{id}"));
        }
        if self.descending {
            range = range.reverse();
        }
        range
    }

    fn matches(&self, t: &Turn, reader: &impl Sees) -> bool {
        if let ThreadScope::Among(set) = &self.threads {
            if !t.thread_id.as_ref().is_some_and(|id| set.contains(id)) {
                return false;
            }
        }
        (self.content_types.is_empty() || self.content_types.contains(&t.content_type))
            && self.participant.as_ref().is_none_or(|p| *p == t.participant)
            && self.from_id.as_ref().is_none_or(|f| t.id >= *f)
            && self.to_id.as_ref().is_none_or(|to| t.id <= *to)
            && self.after_ts.is_none_or(|ts| t.timestamp > ts)
            && self.before_ts.is_none_or(|ts| t.timestamp < ts)
            && reader.sees(t)
    }

    /// Whether the walk has passed the inclusive bounds and can stop.
    fn past_end(&self, t: &Turn) -> bool {
        if self.descending {
            self.from_id.as_ref().is_some_and(|f| t.id < *f)
        } else {
            self.to_id.as_ref().is_some_and(|to| t.id > *to)
        }
    }

    /// Up to `limit` turns; with `count_rest`, keep walking to count every match.
    pub fn page(&self, reader: &impl Sees, limit: usize, count_rest: bool) -> Result<Page> {
        let mut page = Page { turns: Vec::new(), has_more: false, matched: 0 };
        self.range().each(|entry| {
            let t = entry.value;
            if self.past_end(&t) {
                return Ok(false);
            }
            if !self.matches(&t, reader) {
                return Ok(true);
            }
            page.matched += 1;
            if page.turns.len() < limit {
                page.turns.push(t);
                Ok(true)
            } else {
                page.has_more = true;
                Ok(count_rest)
            }
        })?;
        Ok(page)
    }

    /// Every matching turn, oldest first.
    pub fn all(&self, reader: &impl Sees) -> Result<Vec<Turn>> {
        Ok(self.page(reader, usize::MAX, false)?.turns)
    }
}

/// A thread and all threads nested below it.
pub fn thread_and_descendants(conv: &str, root: &str) -> Result<Vec<String>> {
    let threads = repo::threads(conv)?;
    let mut set = vec![root.to_string()];
    let mut i = 0;
    while i < set.len() {
        let parent = set[i].clone();
        set.extend(threads.iter().filter(|t| t.parent_thread_id.as_deref() == Some(parent.as_str())).map(|t| t.id.clone()));
        i += 1;
    }
    Ok(set)
}

fn require_turn(visit: &Visit, turn: &str, reader: &Reader) -> Result<String> {
    visit.visible_turn(turn, reader).map(|t| t.id)
}

/// The caller as a reader of a conversation's turns (a participant with
/// `canObserve`, or an observer client), the conversation read with the
/// threads and turns the request names.
fn reader(actor: &Actor, conversation_id: &str, method: &str, threads: &[&str], turns: &[&str]) -> Result<(Visit, Reader)> {
    actor.require_capability("canViewHistory", method)?;
    let visit = access::visit(params::id("conversationId", conversation_id)?, actor, threads, turns)?;
    let reader = visit.reader(actor)?;
    reader.require_turns()?;
    Ok((visit, reader))
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct TurnsFilter {
    thread_id: Option<String>,
    include_all_threads: bool,
    content_types: Option<OneOrMany<String>>,
    participant_id: Option<String>,
    after_turn_id: Option<String>,
    before_turn_id: Option<String>,
    after_timestamp: Option<u64>,
    before_timestamp: Option<u64>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
enum Order {
    #[default]
    Asc,
    Desc,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TurnsListParams {
    conversation_id: String,
    #[serde(default)]
    filter: TurnsFilter,
    limit: Option<u64>,
    #[serde(default)]
    order: Order,
    cursor: Option<String>,
}

fn page_result(page: Page) -> Value {
    let mut out = json!({ "turns": page.turns, "hasMore": page.has_more });
    if page.has_more {
        out["nextCursor"] = json!(page.turns.last().map(|t| t.id.clone()));
    }
    out
}

/// `mail/turns/list`: the turns the caller may see, filtered and paged.
pub fn list(call: &Call) -> Result<Reply> {
    let actor = Actor::from_caller(call.caller);
    let p: TurnsListParams = call.params()?;
    let f = p.filter;
    let named: Vec<&str> = [&f.after_turn_id, &f.before_turn_id].into_iter().flatten().map(String::as_str).collect();
    let (visit, reader) = reader(&actor, &p.conversation_id, "mail/turns/list", f.thread_id.as_deref().as_slice(), &named)?;
    let conv = &visit.conv;
    let mut q = TurnQuery::new(&conv.id);
    if let Some(thread) = &f.thread_id {
        visit.require_thread(thread)?;
        q.threads = if f.include_all_threads { ThreadScope::Among(thread_and_descendants(&conv.id, thread)?) } else { ThreadScope::One(thread.clone()) };
    }
    q.content_types = f.content_types.map(OneOrMany::into_vec).unwrap_or_default();
    q.participant = f.participant_id;
    q.after_id = f.after_turn_id.map(|t| require_turn(&visit, &t, &reader)).transpose()?;
    q.before_id = f.before_turn_id.map(|t| require_turn(&visit, &t, &reader)).transpose()?;
    q.after_ts = f.after_timestamp;
    q.before_ts = f.before_timestamp;
    q.descending = p.order == Order::Desc;
    // The cursor is the last turn of the previous page, in this order.
    if let Some(c) = &p.cursor {
        let c = params::cursor(c, "turn-")?.to_string();
        if q.descending {
            q.before_id = Some(q.before_id.map_or(c.clone(), |b| b.min(c)));
        } else {
            q.after_id = Some(q.after_id.map_or(c.clone(), |a| a.max(c)));
        }
    }
    let page = q.page(&reader, params::limit(p.limit, DEFAULT_LIMIT, MAX_LIMIT), false)?;
    Ok(page_result(page).into())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplayParams {
    conversation_id: String,
    from_turn_id: Option<String>,
    from_timestamp: Option<u64>,
    thread_id: Option<String>,
    limit: Option<u64>,
    content_types: Option<OneOrMany<String>>,
    cursor: Option<String>,
}

/// `mail/replay`: the turns after a point, oldest first, for catching up.
/// `missedCount` counts every visible turn from that point on, including
/// those beyond this page.
pub fn replay(call: &Call) -> Result<Reply> {
    let actor = Actor::from_caller(call.caller);
    let p: ReplayParams = call.params()?;
    let (visit, reader) = reader(&actor, &p.conversation_id, "mail/replay", p.thread_id.as_deref().as_slice(), p.from_turn_id.as_deref().as_slice())?;
    let mut q = TurnQuery::new(&visit.conv.id);
    if let Some(thread) = &p.thread_id {
        visit.require_thread(thread)?;
        q.threads = ThreadScope::One(thread.clone());
    }
    q.content_types = p.content_types.map(OneOrMany::into_vec).unwrap_or_default();
    q.after_id = p.from_turn_id.map(|t| require_turn(&visit, &t, &reader)).transpose()?;
    if let Some(c) = &p.cursor {
        let c = params::cursor(c, "turn-")?.to_string();
        q.after_id = Some(q.after_id.map_or(c.clone(), |a| a.max(c)));
    }
    q.after_ts = p.from_timestamp.map(|ts| ts.saturating_sub(1));
    let page = q.page(&reader, params::limit(p.limit, DEFAULT_LIMIT, MAX_LIMIT), true)?;
    let missed = page.matched;
    let mut out = page_result(page);
    out["missedCount"] = json!(missed);
    Ok(out.into())
}
