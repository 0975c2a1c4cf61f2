"""Typed access to the host's store: ordered keys in named collections,
scoped by the host to (tenant, plugin).

- `Collection(name)`: values under string keys, kept as JSON (dataclasses
  as objects with their JSON keys), or as `TEXT` or `BYTES`: `get`, `get_versioned`, `get_many` (one snapshot), `put`,
  `delete`, `count`, `page` (one page and its cursor) and `scan` (every
  entry, page by page).
- `Counter(name)`: decimal counters changed by `add`, so concurrent writers
  lose no increment.
- `Batch`: puts, deletes, counter adds and conditions (expected versions or
  values) applied by one atomic `commit`, which answers `Committed` or
  `Conflict` (which condition failed). `retry` runs a read-modify-write
  until it commits.

Failures raise `StorageError` (answered with the range's storage code;
`unavailable` ones are retryable). What the store guarantees is in
`wit/store.wit`: every write call is one durable transaction, a call reads
its own writes, and a `get_many` or a page is one consistent snapshot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _wit
from ._json import dumps
from .errors import StorageError

T = TypeVar("T")
W = _wit.store

# How values are kept: JSON text (the default), UTF-8 text, or bytes as is.
JSON = "json"
TEXT = "text"
BYTES = "bytes"

PAGE = 1000  # the host's cap on one page
RETRIES = 10  # attempts of `retry` and of an unconditional `Batch.apply`


def call(what: str, fn: Callable[..., T], *args: Any) -> T:
    """Run a store import; its `store-error` becomes a StorageError."""
    try:
        return fn(*args)
    except _wit.Err as e:
        err = e.value
        if isinstance(err, W.StoreError_Unavailable):
            raise StorageError(f"Storage is unavailable ({what}): {err.value}", retryable=True) from None
        raise StorageError(f"Storage refused the request ({what}): {getattr(err, 'value', err)}") from None


def _encode(codec: str, value: Any) -> bytes:
    if codec == BYTES:
        return bytes(value)
    if codec == TEXT:
        return str(value).encode("utf-8")
    return dumps(value).encode("utf-8")


def _decode(codec: str, collection: str, key: str, data: bytes) -> Any:
    if codec == BYTES:
        return bytes(data)
    try:
        text = bytes(data).decode("utf-8")
        return text if codec == TEXT else json.loads(text)
    except ValueError as e:
        raise StorageError(f"Stored value {collection}/{key} is unreadable: {e}") from None


@dataclass
class Versioned(Generic[T]):
    """A value and its version; version 0 (and value None) when absent."""

    value: Optional[T]
    version: int


@dataclass
class Entry(Generic[T]):
    key: str
    value: T
    version: int


@dataclass
class Page(Generic[T]):
    """One page of a range; `next` is the cursor to read on (None when done)."""

    entries: List[Entry[T]]
    next: Optional[str]

    def values(self) -> List[T]:
        return [e.value for e in self.entries]


class Collection(Generic[T]):
    """Values of one kind in the collection `name`."""

    def __init__(self, name: str, codec: str = JSON) -> None:
        if codec not in (JSON, TEXT, BYTES):
            raise ValueError(f"unknown codec {codec!r}")
        self.name = name
        self.codec = codec

    def encode(self, value: T) -> bytes:
        return _encode(self.codec, value)

    def get(self, key: str) -> Optional[T]:
        return self.get_versioned(key).value

    def get_versioned(self, key: str) -> Versioned[T]:
        (item,) = get_many([(self.name, key)])
        if item is None:
            return Versioned(None, 0)
        return Versioned(_decode(self.codec, self.name, key, item.value), item.version)

    def get_many(self, keys: Sequence[str]) -> List[Optional[T]]:
        """Several keys in one consistent snapshot, in the order given."""
        items = get_many([(self.name, k) for k in keys])
        return [None if i is None else _decode(self.codec, self.name, k, i.value) for k, i in zip(keys, items)]

    def exists(self, key: str) -> bool:
        return get_many([(self.name, key)])[0] is not None

    def put(self, key: str, value: T) -> None:
        Batch().put(self, key, value).apply()

    def delete(self, key: str) -> bool:
        """True when the key existed."""
        return call(f"delete {self.name}/{key}", W.delete, self.name, key)

    def count(self, prefix: str = "") -> int:
        return call(f"count {self.name}", W.count, self.name, prefix)

    def page(self, prefix: str = "", after: Optional[str] = None, before: Optional[str] = None,
             limit: int = 100, reverse: bool = False, max_bytes: int = 0) -> Page[T]:
        """At most `limit` entries (the host caps it at 1000) in key order,
        `after` / `before` a cursor, and the cursor of the next page."""
        options = W.PageOptions(prefix=prefix, after=after, before=before, limit=max(0, min(limit, PAGE)),
                                max_bytes=max_bytes, reverse=reverse)
        page = call(f"scan {self.name}", W.scan_page, self.name, options)
        entries = [Entry(e.key, _decode(self.codec, self.name, e.key, e.item.value), e.item.version)
                   for e in page.entries]
        return Page(entries, page.next)

    def scan(self, prefix: str = "", after: Optional[str] = None, before: Optional[str] = None,
             reverse: bool = False) -> Iterator[Entry[T]]:
        """Every entry of the range, read page by page (each page is a
        snapshot; the whole range is not)."""
        while True:
            page = self.page(prefix, after, before, PAGE, reverse)
            yield from page.entries
            if page.next is None or not page.entries:
                return
            if reverse:
                before = page.next
            else:
                after = page.next


def get_many(keys: Sequence[Tuple[str, str]]) -> List[Optional[Any]]:
    """(collection, key) pairs read in one snapshot: the WIT `item`s
    (`value` bytes, `version`) or None, in order. At most 1000 keys."""
    refs = [W.KeyRef(collection=c, key=k) for c, k in keys]
    return call("get-many", W.get_many, refs) if refs else []


class Counter:
    """Decimal counters in the collection `name` (an absent key counts 0)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def get(self, key: str) -> int:
        (item,) = get_many([(self.name, key)])
        return 0 if item is None else _counter(self.name, key, item.value)

    def add(self, key: str, delta: int) -> int:
        """Add `delta` atomically; the new value."""
        batch = Batch()
        batch.add(self, key, delta)
        return batch.apply().counters[0]

    def scan(self, prefix: str = "") -> Iterator[Tuple[str, int]]:
        for entry in Collection(self.name, BYTES).scan(prefix):
            yield entry.key, _counter(self.name, entry.key, entry.value)


def _counter(collection: str, key: str, data: bytes) -> int:
    try:
        return int(bytes(data).decode("utf-8").strip())
    except ValueError:
        raise StorageError(f"Stored counter {collection}/{key} is not a number") from None


@dataclass
class Committed:
    """The version every written key now has, and each `add`'s new value in order."""

    version: int
    counters: List[int] = field(default_factory=list)


@dataclass
class Conflict:
    """Nothing was applied: the operation at `index` (on `collection`/`key`) did not hold."""

    index: int
    collection: str
    key: str


Outcome = Union[Committed, Conflict]
_Target = Union[Collection, Counter, str]


def _name(target: _Target) -> str:
    return target if isinstance(target, str) else target.name


class Batch:
    """Operations applied atomically by `commit`: all of them, or none.
    Methods return the batch, so calls chain; `add` returns the counter's
    index in `Committed.counters`."""

    def __init__(self) -> None:
        self.ops: List[Any] = []
        self._keys: List[Tuple[str, str]] = []
        self._adds = 0
        self.conditions = 0

    def _push(self, op: Any, collection: str, key: str) -> "Batch":
        self.ops.append(op)
        self._keys.append((collection, key))
        return self

    def put(self, collection: Union[Collection, str], key: str, value: Any) -> "Batch":
        """A value of a Collection (encoded by it), or bytes/str into a collection named by a string."""
        data = collection.encode(value) if isinstance(collection, Collection) else _raw(value)
        name = _name(collection)
        return self._push(W.Op_Put(W.PutOp(collection=name, key=key, value=data)), name, key)

    def delete(self, collection: _Target, key: str) -> "Batch":
        name = _name(collection)
        return self._push(W.Op_Delete(W.KeyRef(collection=name, key=key)), name, key)

    def add(self, counter: _Target, key: str, delta: int) -> int:
        name = _name(counter)
        self._push(W.Op_Add(W.AddOp(collection=name, key=key, delta=delta)), name, key)
        self._adds += 1
        return self._adds - 1

    def expect_version(self, collection: _Target, key: str, version: int) -> "Batch":
        """Commit only if the key still has `version` (0: is absent)."""
        name = _name(collection)
        self.conditions += 1
        return self._push(W.Op_ExpectVersion(W.VersionCheck(collection=name, key=key, version=version)), name, key)

    def expect_absent(self, collection: _Target, key: str) -> "Batch":
        return self.expect_version(collection, key, 0)

    def expect_value(self, collection: Union[Collection, str], key: str, value: Any) -> "Batch":
        """Commit only if the key holds `value` (None: is absent)."""
        name = _name(collection)
        data = None if value is None else (
            collection.encode(value) if isinstance(collection, Collection) else _raw(value))
        self.conditions += 1
        return self._push(W.Op_ExpectValue(W.ValueCheck(collection=name, key=key, value=data)), name, key)

    def __len__(self) -> int:
        return len(self.ops)

    def commit(self) -> Outcome:
        """Check every condition and apply every write, or nothing. An empty
        batch commits without a host call."""
        if not self.ops:
            return Committed(0, [])
        outcome = call("commit", W.commit, self.ops)
        if isinstance(outcome, W.Outcome_Committed):
            return Committed(outcome.value.version, list(outcome.value.counters))
        index = outcome.value
        collection, key = self._keys[index] if index < len(self._keys) else ("", "")
        return Conflict(index, collection, key)

    def apply(self) -> Committed:
        """Commit a batch that should not conflict. Without conditions a
        conflict only comes from a concurrent transaction (PostgreSQL), and
        the same writes are committed again; a failed condition is a
        retryable StorageError naming the key."""
        for _ in range(RETRIES):
            outcome = self.commit()
            if isinstance(outcome, Committed):
                return outcome
            if self.conditions:
                break
        raise StorageError(f"A concurrent update changed {outcome.collection}/{outcome.key}; retry", retryable=True)


def _raw(value: Union[bytes, str]) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


class Retry(Exception):
    """Raised (or returned as `RETRY`) by an attempt of `retry` to run it again."""


RETRY = Retry()


def retry(attempt: Callable[[], Any], attempts: int = RETRIES) -> Any:
    """Run `attempt` (read, decide, commit) until it returns something other
    than a `Conflict` or `RETRY`, at most `attempts` times; then a retryable
    StorageError. An attempt usually ends with `return batch.commit()` or
    with the value it computed once the commit went through."""
    for _ in range(max(1, attempts)):
        try:
            result = attempt()
        except Retry:
            continue
        if not isinstance(result, Conflict) and result is not RETRY:
            return result
    raise StorageError("Too many concurrent updates of the same data; retry", retryable=True)
