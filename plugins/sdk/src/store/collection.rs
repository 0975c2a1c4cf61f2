//! Collections of typed values, and counters.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::batch::Batch;
use super::range::Range;
use crate::bindings::map_gateway::plugin::store::{self as wit, Item, KeyRef};
use crate::error::{Error, Result};

/// How values of type `T` are kept as bytes.
pub trait Codec<T> {
    fn encode(value: &T) -> Result<Vec<u8>>;
    /// `Err` carries what is wrong; the caller names the key.
    fn decode(bytes: &[u8]) -> Result<T, String>;
}

/// JSON text (the default): any `Serialize + DeserializeOwned` type.
#[derive(Debug, Clone, Copy)]
pub struct Json;

impl<T: Serialize + DeserializeOwned> Codec<T> for Json {
    fn encode(value: &T) -> Result<Vec<u8>> {
        serde_json::to_vec(value).map_err(|e| Error::internal(format!("A value cannot be written as JSON: {e}")))
    }

    fn decode(bytes: &[u8]) -> Result<T, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// UTF-8 text kept as is (what `store.put` writes).
#[derive(Debug, Clone, Copy)]
pub struct Text;

impl Codec<String> for Text {
    fn encode(value: &String) -> Result<Vec<u8>> {
        Ok(value.as_bytes().to_vec())
    }

    fn decode(bytes: &[u8]) -> Result<String, String> {
        String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())
    }
}

/// Bytes kept as is.
#[derive(Debug, Clone, Copy)]
pub struct Raw;

impl Codec<Vec<u8>> for Raw {
    fn encode(value: &Vec<u8>) -> Result<Vec<u8>> {
        Ok(value.clone())
    }

    fn decode(bytes: &[u8]) -> Result<Vec<u8>, String> {
        Ok(bytes.to_vec())
    }
}

/// A value read with its version, for a compare-and-swap
/// ([`Batch::expect_version`]). Version 0 means the key is absent.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    pub value: Option<T>,
    pub version: u64,
}

/// A named collection of `T`s under string keys, encoded with `C`.
///
/// ```
/// use map_plugin_sdk::store::{Collection, Text};
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Note { text: String }
/// const NOTES: Collection<Note> = Collection::new("notes");
/// const CHUNKS: Collection<String, Text> = Collection::new("chunks");
/// # assert_eq!(NOTES.name(), "notes");
/// ```
pub struct Collection<T, C = Json> {
    name: &'static str,
    _types: PhantomData<fn() -> (T, C)>,
}

impl<T, C> Clone for Collection<T, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, C> Copy for Collection<T, C> {}

impl<T, C> std::fmt::Debug for Collection<T, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Collection({})", self.name)
    }
}

impl<T, C> Collection<T, C> {
    /// A collection name is 1 to 128 bytes.
    pub const fn new(name: &'static str) -> Self {
        assert!(!name.is_empty() && name.len() <= 128, "a collection name is 1 to 128 bytes");
        Collection { name, _types: PhantomData }
    }

    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<T, C: Codec<T>> Collection<T, C> {
    pub(crate) fn decode(&self, key: &str, bytes: &[u8]) -> Result<T> {
        C::decode(bytes).map_err(|e| Error::damaged(self.name, key, e))
    }

    pub(crate) fn encode(&self, value: &T) -> Result<Vec<u8>> {
        C::encode(value)
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Result<Option<T>> {
        Ok(self.get_versioned(key)?.value)
    }

    /// The value under `key` with its version (0 when absent).
    pub fn get_versioned(&self, key: &str) -> Result<Versioned<T>> {
        let item = get_many(&[(self.name, key)])?.pop().flatten();
        match item {
            None => Ok(Versioned { value: None, version: 0 }),
            Some(item) => Ok(Versioned { value: Some(self.decode(key, &item.value)?), version: item.version }),
        }
    }

    /// Several values in one host call and one consistent snapshot (for up
    /// to 1,000 keys; more take one call per 1,000), in the order of `keys`.
    pub fn get_many<K: AsRef<str>>(&self, keys: &[K]) -> Result<Vec<Option<T>>> {
        let refs: Vec<(&str, &str)> = keys.iter().map(|k| (self.name, k.as_ref())).collect();
        let items = get_many(&refs)?;
        items.into_iter().zip(keys).map(|(item, key)| item.map(|i| self.decode(key.as_ref(), &i.value)).transpose()).collect()
    }

    /// Is there a value under `key`?
    pub fn exists(&self, key: &str) -> Result<bool> {
        Ok(get_many(&[(self.name, key)])?.pop().flatten().is_some())
    }

    /// Write one value now (one atomic write). To write several together,
    /// use a [`Batch`].
    pub fn put(&self, key: &str, value: &T) -> Result<()> {
        let mut batch = Batch::new();
        batch.put(self, key, value);
        batch.apply().map(drop)
    }

    /// Remove one key now; `true` when it existed.
    pub fn delete(&self, key: &str) -> Result<bool> {
        Ok(wit::delete(self.name, key)?)
    }

    /// How many keys start with `prefix` ("" for all).
    pub fn count(&self, prefix: &str) -> Result<u64> {
        Ok(wit::count(self.name, prefix)?)
    }

    /// Every key of the collection, in key order.
    pub fn all(&self) -> Range<T, C> {
        Range::new(*self, String::new())
    }

    /// The keys starting with `prefix`, in key order.
    pub fn prefix(&self, prefix: impl Into<String>) -> Range<T, C> {
        Range::new(*self, prefix.into())
    }
}

/// Read keys of any collections in one host call and one consistent
/// snapshot (up to 1,000 per call; more take several), values as bytes with
/// their versions, in the order of `keys`.
pub fn get_many(keys: &[(&str, &str)]) -> Result<Vec<Option<Item>>> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(1000) {
        let refs: Vec<KeyRef> = chunk.iter().map(|(c, k)| KeyRef { collection: c.to_string(), key: k.to_string() }).collect();
        out.extend(wit::get_many(&refs)?);
    }
    Ok(out)
}

/// Counters: values holding a decimal integer as text, changed by `add`
/// (atomically in the store, so concurrent adds are never lost).
#[derive(Debug, Clone, Copy)]
pub struct Counter {
    name: &'static str,
}

impl Counter {
    pub const fn new(name: &'static str) -> Counter {
        assert!(!name.is_empty() && name.len() <= 128, "a collection name is 1 to 128 bytes");
        Counter { name }
    }

    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The current value (0 when absent).
    pub fn get(&self, key: &str) -> Result<i64> {
        match get_many(&[(self.name, key)])?.pop().flatten() {
            None => Ok(0),
            Some(item) => {
                std::str::from_utf8(&item.value).ok().and_then(|s| s.trim().parse().ok()).ok_or_else(|| Error::damaged(self.name, key, "not a decimal counter"))
            }
        }
    }

    /// Add `delta` now and return the new value. Concurrent adds each get
    /// their own value: adding 1 hands out unique sequence numbers.
    pub fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut batch = Batch::new();
        let slot = batch.add(self, key, delta);
        let committed = batch.apply()?;
        Ok(committed.counter(slot))
    }
}
