//! Typed access to the host's store, which keeps ordered keys in named
//! collections, scoped to (tenant, plugin).
//!
//! - [`Collection`]: values of one type under string keys, encoded by a
//!   [`Codec`] (JSON by default; [`Text`] and [`Raw`] keep text or bytes as is).
//!   Single reads and writes, [`get_many`](Collection::get_many) in one host
//!   call, counts, and [`Range`]s read page by page with cursors.
//! - [`Counter`]: decimal counters changed by `add`, so concurrent writers
//!   lose no increment.
//! - [`Batch`]: puts, deletes, counter adds and conditions (expected
//!   versions or values) applied atomically by one `commit`, which either
//!   applies all of it or reports which condition failed ([`Outcome`]).
//!   [`retry`] runs a read-modify-write until it commits.
//! - [`keys`]: building keys whose byte order is the order wanted.
//!
//! What the store guarantees (see `wit/store.wit`): every write call is one
//! transaction and is durable once it returns `ok`; a call reads its own
//! writes; a `get-many` or a `scan-page` is one consistent snapshot, but two
//! reads may see different states, which is why a read-modify-write goes
//! through a conditional `commit`.

mod batch;
mod collection;
pub mod keys;
mod range;

pub use batch::{retry, retry_times, Attempt, Batch, Committed, Conflict, CounterSlot, Outcome, RETRIES};
pub use collection::{get_many, Codec, Collection, Counter, Json, Raw, Text, Versioned};
pub use range::{Entry, Page, Range, PAGE};

/// The generated `store` import, for what the typed layer does not cover.
pub use crate::bindings::map_gateway::plugin::store as raw;
