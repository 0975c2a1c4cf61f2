//! Atomic units of work: one `commit` applies every write of a [`Batch`] or
//! none, after checking its conditions.

use super::collection::{Codec, Collection, Counter};
use crate::bindings::map_gateway::plugin::store::{self as wit, AddOp, KeyRef, Op, PutOp, ValueCheck, VersionCheck};
use crate::error::{Error, Result};

/// Writes and conditions applied together by one `commit`: when every
/// condition holds, every put, delete and add is applied, in order;
/// otherwise nothing is. At most 10,000 operations and 32 MiB of keys and
/// values (the store refuses bigger ones as `invalid`).
#[derive(Debug, Default, Clone)]
pub struct Batch {
    ops: Vec<Op>,
    conditions: usize,
    counters: usize,
    /// A value that could not be encoded; reported by `commit`.
    error: Option<Error>,
}

/// Where the new value of a counter `add` is in [`Committed::counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterSlot(usize);

/// An applied batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The version every key the batch wrote now has.
    pub version: u64,
    /// The new value of each `add`, in order.
    pub counters: Vec<i64>,
}

impl Committed {
    /// The new value of the counter `add` that returned `slot`.
    pub fn counter(&self, slot: CounterSlot) -> i64 {
        self.counters[slot.0]
    }
}

/// A batch that was not applied: the condition at `index` did not hold (or,
/// on PostgreSQL, a concurrent transaction touched the same keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The operation's index in the batch.
    pub index: u32,
    /// The key that operation names.
    pub collection: String,
    pub key: String,
}

/// What a [`Batch::commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Committed(Committed),
    Conflict(Conflict),
}

impl Outcome {
    /// For a [`retry`] loop: `Done(f(committed))`, or `Retry` after a conflict.
    pub fn then<R>(self, f: impl FnOnce(Committed) -> R) -> Attempt<R> {
        match self {
            Outcome::Committed(c) => Attempt::Done(f(c)),
            Outcome::Conflict(_) => Attempt::Retry,
        }
    }

    pub fn committed(self) -> Option<Committed> {
        match self {
            Outcome::Committed(c) => Some(c),
            Outcome::Conflict(_) => None,
        }
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, Outcome::Conflict(_))
    }
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Write `value` under `key`, replacing any previous value.
    pub fn put<T, C: Codec<T>>(&mut self, collection: &Collection<T, C>, key: impl Into<String>, value: &T) -> &mut Self {
        match collection.encode(value) {
            Ok(bytes) => self.put_bytes(collection.name(), key, bytes),
            Err(e) => {
                self.error.get_or_insert(e);
                self
            }
        }
    }

    /// Write bytes under a key of a collection named at run time.
    pub fn put_bytes(&mut self, collection: &str, key: impl Into<String>, value: Vec<u8>) -> &mut Self {
        self.ops.push(Op::Put(PutOp { collection: collection.into(), key: key.into(), value }));
        self
    }

    /// Remove `key` (nothing happens when it is absent).
    pub fn delete<T, C>(&mut self, collection: &Collection<T, C>, key: impl Into<String>) -> &mut Self {
        self.delete_key(collection.name(), key)
    }

    /// Remove a key of a collection named at run time.
    pub fn delete_key(&mut self, collection: &str, key: impl Into<String>) -> &mut Self {
        self.ops.push(Op::Delete(KeyRef { collection: collection.into(), key: key.into() }));
        self
    }

    /// Add `delta` to a counter (an absent key counts as 0); its new value is
    /// in the [`Committed`] result at the returned slot.
    pub fn add(&mut self, counter: &Counter, key: impl Into<String>, delta: i64) -> CounterSlot {
        self.ops.push(Op::Add(AddOp { collection: counter.name().into(), key: key.into(), delta }));
        self.counters += 1;
        CounterSlot(self.counters - 1)
    }

    /// Apply only if `key` still has `version` (from
    /// [`get_versioned`](Collection::get_versioned); 0: only if it is absent).
    pub fn expect_version<T, C>(&mut self, collection: &Collection<T, C>, key: impl Into<String>, version: u64) -> &mut Self {
        self.ops.push(Op::ExpectVersion(VersionCheck { collection: collection.name().into(), key: key.into(), version }));
        self.conditions += 1;
        self
    }

    /// Apply only if `key` is absent.
    pub fn expect_absent<T, C>(&mut self, collection: &Collection<T, C>, key: impl Into<String>) -> &mut Self {
        self.expect_version(collection, key, 0)
    }

    /// Apply only if `key` holds exactly the encoding of `value` (`None`:
    /// only if it is absent). The bytes are compared, so the codec must
    /// encode equal values alike (JSON of structs and ordered maps does).
    pub fn expect_value<T, C: Codec<T>>(&mut self, collection: &Collection<T, C>, key: impl Into<String>, value: Option<&T>) -> &mut Self {
        let bytes = match value.map(|v| collection.encode(v)).transpose() {
            Ok(b) => b,
            Err(e) => {
                self.error.get_or_insert(e);
                return self;
            }
        };
        self.ops.push(Op::ExpectValue(ValueCheck { collection: collection.name().into(), key: key.into(), value: bytes }));
        self.conditions += 1;
        self
    }

    /// Operations so far (conditions included).
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Keep only the first `len` operations: a read-modify-write that keeps
    /// a large unconditional part (new values) rebuilds only what follows
    /// it (the conditions and what depends on the read) for another attempt.
    pub fn truncate(&mut self, len: usize) {
        self.ops.truncate(len);
        self.conditions = self.ops.iter().filter(|op| matches!(op, Op::ExpectVersion(_) | Op::ExpectValue(_))).count();
        self.counters = self.ops.iter().filter(|op| matches!(op, Op::Add(_))).count();
    }

    /// Does the batch hold any `expect_*` condition?
    pub fn has_conditions(&self) -> bool {
        self.conditions > 0
    }

    /// Commit: every condition is checked as the transaction applies, then
    /// every write is applied, or nothing is and the failed condition is
    /// named. `Ok` means durable. An empty batch commits without a host call.
    pub fn commit(&self) -> Result<Outcome> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.ops.is_empty() {
            return Ok(Outcome::Committed(Committed { version: 0, counters: Vec::new() }));
        }
        Ok(match wit::commit(&self.ops)? {
            wit::Outcome::Committed(c) => Outcome::Committed(Committed { version: c.version, counters: c.counters }),
            wit::Outcome::Conflict(index) => {
                let (collection, key) = self.ops.get(index as usize).map(op_key).unwrap_or_default();
                Outcome::Conflict(Conflict { index, collection, key })
            }
        })
    }

    /// Commit a batch whose conflicts are not expected. Without conditions a
    /// conflict only comes from concurrent transactions on PostgreSQL, and
    /// the same writes are committed again (up to [`RETRIES`] times). A
    /// failed condition is a retryable storage error naming the key.
    pub fn apply(&self) -> Result<Committed> {
        let unconditional = !self.has_conditions();
        let mut last = None;
        for _ in 0..RETRIES {
            match self.commit()? {
                Outcome::Committed(c) => return Ok(c),
                Outcome::Conflict(c) if unconditional => last = Some(c),
                Outcome::Conflict(c) => return Err(conflict_error(&c)),
            }
        }
        Err(last.map(|c| conflict_error(&c)).unwrap_or_else(contended))
    }
}

fn op_key(op: &Op) -> (String, String) {
    match op {
        Op::Put(p) => (p.collection.clone(), p.key.clone()),
        Op::Delete(k) => (k.collection.clone(), k.key.clone()),
        Op::Add(a) => (a.collection.clone(), a.key.clone()),
        Op::ExpectVersion(c) => (c.collection.clone(), c.key.clone()),
        Op::ExpectValue(c) => (c.collection.clone(), c.key.clone()),
    }
}

fn conflict_error(c: &Conflict) -> Error {
    Error::storage_unavailable(format!("A concurrent update changed {}/{}; retry", c.collection, c.key))
}

fn contended() -> Error {
    Error::storage_unavailable("Too many concurrent updates of the same data; retry")
}

/// How often [`retry`] runs an attempt that keeps conflicting.
pub const RETRIES: u32 = 10;

/// One run of a read-modify-write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt<R> {
    /// Committed (or nothing to write): the result.
    Done(R),
    /// A condition failed: read again and run once more.
    Retry,
}

/// Run `attempt` (read, decide, commit a conditional batch) until it is
/// done, at most [`RETRIES`] times; then a retryable storage error.
///
/// ```no_run
/// use map_plugin_sdk::store::{retry, Batch, Collection};
/// const LIKES: Collection<u64> = Collection::new("likes");
/// # fn main() -> map_plugin_sdk::Result<()> {
/// let total = retry(|| {
///     let current = LIKES.get_versioned("note-1")?;
///     let next = current.value.unwrap_or(0) + 1;
///     let mut batch = Batch::new();
///     batch.expect_version(&LIKES, "note-1", current.version).put(&LIKES, "note-1", &next);
///     Ok(batch.commit()?.then(|_| next))
/// })?;
/// # Ok(()) }
/// ```
pub fn retry<R>(attempt: impl FnMut() -> Result<Attempt<R>>) -> Result<R> {
    retry_times(RETRIES, attempt)
}

/// [`retry`] with another bound on the number of attempts.
pub fn retry_times<R>(attempts: u32, mut attempt: impl FnMut() -> Result<Attempt<R>>) -> Result<R> {
    for _ in 0..attempts.max(1) {
        if let Attempt::Done(r) = attempt()? {
            return Ok(r);
        }
    }
    Err(contended())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTES: Collection<String> = Collection::new("notes");
    const SEQ: Counter = Counter::new("meta");

    #[test]
    fn batches_collect_operations_in_order() {
        let mut b = Batch::new();
        b.expect_absent(&NOTES, "a").put(&NOTES, "a", &"x".to_string()).delete(&NOTES, "b");
        let slot = b.add(&SEQ, "seq", 1);
        let second = b.add(&SEQ, "other", 5);
        assert_eq!(b.len(), 5);
        assert!(b.has_conditions());
        assert_eq!((slot, second), (CounterSlot(0), CounterSlot(1)));
        assert!(matches!(&b.ops[1], Op::Put(p) if p.value == br#""x""# && p.collection == "notes"));
        assert_eq!(op_key(&b.ops[2]), ("notes".to_string(), "b".to_string()));
        assert_eq!(Committed { version: 3, counters: vec![7, 9] }.counter(second), 9);
        b.truncate(2);
        assert_eq!(b.len(), 2);
        assert!(b.has_conditions());
        assert_eq!(b.add(&SEQ, "seq", 1), CounterSlot(0), "slots count the adds that are left");
        b.truncate(0);
        assert!(b.is_empty() && !b.has_conditions());
    }

    #[test]
    fn an_empty_batch_commits_without_the_host() {
        assert_eq!(Batch::new().commit().unwrap(), Outcome::Committed(Committed { version: 0, counters: vec![] }));
    }

    #[test]
    fn retry_runs_until_done_or_gives_up() {
        let mut runs = 0;
        let r = retry(|| {
            runs += 1;
            Ok(if runs < 3 { Attempt::Retry } else { Attempt::Done(runs) })
        });
        assert_eq!(r.unwrap(), 3);
        let mut runs = 0;
        let e = retry_times(4, || {
            runs += 1;
            Ok(Attempt::<()>::Retry)
        })
        .unwrap_err();
        assert_eq!(runs, 4);
        assert!(e.is_storage() && e.is_retryable());
        let outcome = Outcome::Conflict(Conflict { index: 0, collection: "c".into(), key: "k".into() });
        assert_eq!(outcome.then(|_| 1), Attempt::Retry);
    }
}
