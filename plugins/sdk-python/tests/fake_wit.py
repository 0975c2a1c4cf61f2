"""Stand-ins for the modules componentize-py generates (`wit_world`,
`componentize_py_types`), so the SDK's tests run with plain python3. The
record types mirror the generated ones field for field; the store keeps
versioned bytes in memory and applies commits as the host does (conditions
first, then writes, all or nothing)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, Generic, List, Optional, Tuple, TypeVar

E = TypeVar("E")


def module(name: str) -> types.ModuleType:
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


def records(m: types.ModuleType, **specs: str) -> None:
    """Dataclasses named by keyword, fields from a space-separated list."""
    for name, fields in specs.items():
        cls = dataclass(type(name, (), {"__annotations__": {f: Any for f in fields.split()}}))
        setattr(m, name, cls)


cpt = module("componentize_py_types")


@dataclass(frozen=True)
class Err(Generic[E], Exception):
    value: E


cpt.Err = Err
wit_world = module("wit_world")
imports = module("wit_world.imports")
exports = module("wit_world.exports")
wit_world.imports, wit_world.exports = imports, exports

t = module("wit_world.imports.types")
records(t, Caller="tenant participant_id participant_type session_id agent_ids capabilities",
        RpcError="code message data")

store = module("wit_world.imports.store")
records(store, StoreError_Invalid="value", StoreError_Unavailable="value", KeyRef="collection key",
        Item="value version", KeyedItem="key item", PageOptions="prefix after before limit max_bytes reverse",
        Page="entries next", PutOp="collection key value", AddOp="collection key delta",
        VersionCheck="collection key version", ValueCheck="collection key value", Op_Put="value",
        Op_Delete="value", Op_Add="value", Op_ExpectVersion="value", Op_ExpectValue="value",
        Committed="version counters", Outcome_Committed="value", Outcome_Conflict="value")


class Store:
    """The host's store, in memory."""

    def __init__(self) -> None:
        self.data: Dict[Tuple[str, str], Tuple[bytes, int]] = {}
        self.version = 0
        self.fail: Optional[Any] = None  # a StoreError the next call raises
        self.calls: List[str] = []

    def _check(self, name: str) -> None:
        self.calls.append(name)
        if self.fail is not None:
            fail, self.fail = self.fail, None
            raise Err(fail)

    def get_many(self, keys: List[Any]) -> List[Any]:
        self._check("get_many")
        return [None if (k.collection, k.key) not in self.data else store.Item(*self.data[(k.collection, k.key)])
                for k in keys]

    def delete(self, collection: str, key: str) -> bool:
        self._check("delete")
        return self.data.pop((collection, key), None) is not None

    def count(self, collection: str, prefix: str) -> int:
        self._check("count")
        return sum(1 for c, k in self.data if c == collection and k.startswith(prefix))

    def scan_page(self, collection: str, o: Any) -> Any:
        self._check("scan_page")
        keys = sorted(k for c, k in self.data if c == collection and k.startswith(o.prefix)
                      and (o.after is None or k > o.after) and (o.before is None or k < o.before))
        if o.reverse:
            keys.reverse()
        page = keys[: min(o.limit, 1000)]
        entries = [store.KeyedItem(k, store.Item(*self.data[(collection, k)])) for k in page]
        return store.Page(entries, page[-1] if len(keys) > len(page) and page else None)

    def commit(self, ops: List[Any]) -> Any:
        self._check("commit")
        for i, op in enumerate(ops):
            v = op.value
            held = self.data.get((v.collection, v.key))
            if isinstance(op, store.Op_ExpectVersion) and (held[1] if held else 0) != v.version:
                return store.Outcome_Conflict(i)
            if isinstance(op, store.Op_ExpectValue) and (held[0] if held else None) != v.value:
                return store.Outcome_Conflict(i)
        self.version += 1
        counters = []
        for op in ops:
            v = op.value
            if isinstance(op, store.Op_Put):
                self.data[(v.collection, v.key)] = (bytes(v.value), self.version)
            elif isinstance(op, store.Op_Delete):
                self.data.pop((v.collection, v.key), None)
            elif isinstance(op, store.Op_Add):
                held = self.data.get((v.collection, v.key))
                n = (int(held[0].decode()) if held else 0) + v.delta
                self.data[(v.collection, v.key)] = (str(n).encode(), self.version)
                counters.append(n)
        return store.Outcome_Committed(store.Committed(self.version, counters))


STORE = Store()
for fn in ("get_many", "delete", "count", "scan_page", "commit"):
    setattr(store, fn, getattr(STORE, fn))

events = module("wit_world.imports.events")
records(events, Audience="ids capability")
EMITTED: List[Tuple[str, str, Any]] = []


def _emit(event_type: str, data: str, audience: Any = None) -> None:
    if not event_type or not data.startswith("{"):
        raise Err("data must be a JSON object")
    EMITTED.append((event_type, data, audience))


events.emit, events.emit_to, events.emit_for = _emit, _emit, _emit

log = module("wit_world.imports.log")
log.Level = Enum("Level", "TRACE DEBUG INFO WARN ERROR")
LOGGED: List[Tuple[str, str]] = []
log.log = lambda level, message: LOGGED.append((level.name, message))

config = module("wit_world.imports.config")
CONFIG = {"text": "{}"}
config.all = lambda: CONFIG["text"]

metrics = module("wit_world.imports.metrics")
COUNTED: List[Tuple[str, list, int]] = []


def _counter_add(name: str, labels: list, delta: int) -> None:
    if not name.islower():
        raise Err(f"bad metric name {name}")
    COUNTED.append((name, labels, delta))


metrics.counter_add = _counter_add
metrics.gauge_set = lambda name, labels, value: COUNTED.append((name, labels, value))

timers = module("wit_world.imports.timers")
timers.schedule = lambda delay, tag: 7 if delay <= 604_800_000 else (_ for _ in ()).throw(Err("too long"))
timers.cancel = lambda timer: timer == 7

router = module("wit_world.imports.router")
ROUTED: List[Tuple[str, Any]] = []


def _call(method: str, params: str) -> str:
    ROUTED.append((method, params))
    if method.startswith("map/"):
        raise Err(t.RpcError(-32601, f"Method not found: {method}", '{"category":"protocol"}'))
    return '{"ok":true}'


router.call = _call
router.send = lambda to, payload, meta: '{"messageId":"m1","delivered":["a"]}'
router.notify = lambda pid, method, params: ROUTED.append((method, params))
router.connected_since = lambda ids: [1 if i == "here" else None for i in ids]
router.agent = lambda aid: '{"id":"%s"}' % aid if aid == "a1" else None

rpc = module("wit_world.exports.rpc")
records(rpc, Descriptor="name version uri capability_group capabilities methods error_range event_filters",
        EventFilter="key event_types fields", FilterField="name paths")
send_observer = module("wit_world.exports.send_observer")
records(send_observer, SentMessage="id from_ to timestamp payload meta delivered")
resources = module("wit_world.exports.resources")
records(resources, Item="id name status owner_id created_at updated_at metadata", Page="items cursor total")
for name in ("Rpc", "SendObserver", "Lifecycle", "Resources"):
    setattr(exports, name, type(name, (), {}))
for name, m in {"types": t, "store": store, "events": events, "log": log, "config": config,
                "metrics": metrics, "timers": timers, "router": router}.items():
    setattr(imports, name, m)
for name, m in {"rpc": rpc, "send_observer": send_observer, "resources": resources}.items():
    setattr(exports, name, m)


def world(*classes: str) -> types.SimpleNamespace:
    """An `exports` module of a world exporting these classes only."""
    return types.SimpleNamespace(**{c: getattr(exports, c) for c in classes})


def caller(capabilities: str = "null") -> Any:
    return t.Caller("default", "client-1", "client", "s-1", [], capabilities)
