# audit: a per-tenant audit log of `map/send` traffic, in Python
# (componentize-py). The same extension exists in Rust and JavaScript; the
# behaviour is specified in ../README.md and held by
# tests/interop/audit.test.mjs.
#
# World `intercepting-extension` of ../../../wit (map-gateway:plugin): exports
# `rpc` and `send-observer`. componentize-py instantiates one class per
# exported interface, named after it in PascalCase (`Rpc`, `SendObserver`).
#
#   on-send                 -> one commit: counters/total += 1,
#                              counters/from/<sender> += 1,
#                              records/<ts 13 digits>/<id> = the record;
#                              then event `audit.recorded`, metric `audit_records_total`
#   audit/list   {limit?, cursor?} -> {records, nextCursor}
#   audit/stats  {}                -> {total, bySender}
#   audit/forget {from}            -> {removed}
#
# Python specifics:
# - componentize-py runs this module's top level once, at BUILD time, and
#   snapshots the result: the component holds no Python files at run time, so
#   every stdlib module must be imported here, at the top. And the top level
#   must not call the host (there is none at build time).
# - An exception escaping handle() or on_send() traps the instance (the host
#   answers -32603 and discards it): both catch everything.

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import rpc as rpc_types
from wit_world.exports import send_observer as so_types
from wit_world.imports import events, log, metrics, store
from wit_world.imports.types import Caller, RpcError

VERSION = "1.0.0"
ERROR_RANGE = (22000, 22099)
PLUGIN_FAILURE = 22099  # an unexpected failure (the instance is kept)
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

COUNTERS = "counters"  # total, from/<sender>: decimal text (store `add`)
RECORDS = "records"  # <timestamp, 13 digits>/<message id> -> JSON record
TOTAL = "total"
FROM_PREFIX = "from/"

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
SCAN_PAGE = 1000  # the host's cap on one scan-page
ATTEMPTS = 3  # of a commit that conflicts


class RpcFailure(Exception):
    """A JSON-RPC error for the client; turned into Err(RpcError) by handle()."""

    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_err(self):
        data = None if self.data is None else json.dumps(self.data)
        return Err(RpcError(code=self.code, message=self.message, data=data))


def invalid_params(message):
    return RpcFailure(INVALID_PARAMS, message)


def dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def storage(what, fn, *args):
    """Call a store import; a store-error is an unexpected failure (22099)."""
    try:
        return fn(*args)
    except Err as e:
        err = e.value  # StoreError_Invalid | StoreError_Unavailable
        kind = "invalid" if isinstance(err, store.StoreError_Invalid) else "unavailable"
        raise RpcFailure(PLUGIN_FAILURE, f"storage failed ({what}): {err.value}",
                         {"reason": err.value, "kind": kind})


def commit(what, ops):
    """Apply ops atomically. Without expect-* ops a conflict only comes from a
    concurrent transaction (PostgreSQL): try again, ATTEMPTS times in all."""
    for _ in range(ATTEMPTS):
        outcome = storage(what, store.commit, ops)
        if isinstance(outcome, store.Outcome_Committed):
            return outcome.value  # Committed(version, counters)
    raise RpcFailure(PLUGIN_FAILURE, f"storage conflict ({what}) {ATTEMPTS} times",
                     {"index": outcome.value})


def scan_all(collection, prefix):
    """Every (key, value bytes) of a collection with a prefix, in key order."""
    after = None
    while True:
        page = storage(f"scan {collection}", store.scan_page, collection,
                       store.PageOptions(prefix=prefix, after=after, before=None,
                                         limit=SCAN_PAGE, max_bytes=0, reverse=False))
        for e in page.entries:
            yield e.key, e.item.value
        if page.next is None or not page.entries:
            return
        after = page.next


def counter(text):
    """A counter's value: decimal text (absent, or not a number, is 0)."""
    try:
        return int(text.strip()) if text is not None else 0
    except ValueError:
        return 0


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# ---- methods -------------------------------------------------------------

def audit_list(caller: Caller, params):
    limit = params.get("limit")
    if limit is None:
        limit = DEFAULT_LIMIT
    elif not is_int(limit) or not 1 <= limit <= MAX_LIMIT:
        raise invalid_params(f"`limit` must be an integer from 1 to {MAX_LIMIT}")
    cursor = params.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise invalid_params("`cursor` must be a string")
    page = storage("list records", store.scan_page, RECORDS,
                   store.PageOptions(prefix="", after=cursor, before=None, limit=limit,
                                     max_bytes=0, reverse=False))
    records = [json.loads(e.item.value.decode("utf-8")) for e in page.entries]
    return {"records": records, "nextCursor": page.next}


def audit_stats(caller: Caller, params):
    total = storage("read total", store.get, COUNTERS, TOTAL)  # Optional[str]
    by_sender = {}
    for key, value in scan_all(COUNTERS, FROM_PREFIX):
        by_sender[key[len(FROM_PREFIX):]] = counter(value.decode("utf-8"))
    return {"total": counter(total), "bySender": by_sender}


def audit_forget(caller: Caller, params):
    sender = params.get("from")
    if not isinstance(sender, str):
        raise invalid_params("`from` must be a string")
    for _ in range(ATTEMPTS):
        keys = [key for key, value in scan_all(RECORDS, "")
                if json.loads(value.decode("utf-8")).get("from") == sender]
        ops = [store.Op_Delete(store.KeyRef(RECORDS, key)) for key in keys]
        ops.append(store.Op_Delete(store.KeyRef(COUNTERS, FROM_PREFIX + sender)))
        if keys:
            ops.append(store.Op_Add(store.AddOp(COUNTERS, TOTAL, -len(keys))))
        outcome = storage("forget", store.commit, ops)
        if isinstance(outcome, store.Outcome_Committed):
            return {"removed": len(keys)}
    # A conflict: the records may have changed meanwhile, so they were read again.
    raise RpcFailure(PLUGIN_FAILURE, f"storage conflict (forget) {ATTEMPTS} times",
                     {"index": outcome.value})


METHODS = {"audit/list": audit_list, "audit/stats": audit_stats, "audit/forget": audit_forget}


# ---- exports -------------------------------------------------------------

class Rpc(exports.Rpc):
    def describe(self) -> rpc_types.Descriptor:
        return rpc_types.Descriptor(
            name="audit",
            version=VERSION,
            uri="urn:example:audit:1",
            capability_group="audit",
            capabilities=json.dumps({"enabled": True}),
            methods=list(METHODS),
            error_range=ERROR_RANGE,
            event_filters=[],
        )

    def handle(self, caller: Caller, method: str, params: str) -> str:
        try:
            fn = METHODS.get(method)
            if fn is None:
                raise RpcFailure(METHOD_NOT_FOUND, f"audit has no method {method}")
            args = json.loads(params)
            if not isinstance(args, dict):
                raise invalid_params("params must be an object")
            return dumps(fn(caller, args))
        except RpcFailure as f:
            raise f.to_err()
        except Exception as e:  # a bug: answer an error instead of trapping the instance
            try:
                log.log(log.Level.ERROR, f"audit {method} failed: {e!r}")
            except Exception:
                pass
            raise Err(RpcError(code=PLUGIN_FAILURE, message=f"audit {method} failed: {e}",
                               data=json.dumps({"exception": type(e).__name__})))


class SendObserver(exports.SendObserver):
    def interest(self):
        return []  # every message

    def on_send(self, caller: Caller, message: so_types.SentMessage) -> None:
        try:
            self.record(message)
        except Exception as e:  # never trap: the message is just not recorded
            try:
                log.log(log.Level.WARN, f"audit: {message.id} not recorded: {e!r}")
            except Exception:
                pass

    def record(self, message: so_types.SentMessage) -> None:
        sender = message.from_  # `from` is a Python keyword
        meta = json.loads(message.meta)
        protocol = meta.get("protocol") if isinstance(meta, dict) else None
        key = f"{message.timestamp:013d}/{message.id}"
        record = {
            "key": key,
            "id": message.id,
            "from": sender,
            "to": json.loads(message.to),
            "timestamp": message.timestamp,
            "payloadBytes": len(message.payload.encode("utf-8")),
            "protocol": protocol if isinstance(protocol, str) else None,
            "delivered": len(message.delivered),
        }
        commit("record", [
            store.Op_Add(store.AddOp(COUNTERS, TOTAL, 1)),
            store.Op_Add(store.AddOp(COUNTERS, FROM_PREFIX + sender, 1)),
            store.Op_Put(store.PutOp(RECORDS, key, dumps(record).encode("utf-8"))),
        ])
        try:
            events.emit("audit.recorded", dumps({"key": key, "id": message.id, "from": sender}))
        except Err as e:  # Err(str): the record is kept all the same
            log.log(log.Level.WARN, f"audit.recorded not emitted: {e.value}")
        try:
            metrics.counter_add("audit_records_total", [], 1)
        except Err as e:
            log.log(log.Level.WARN, f"metric audit_records_total refused: {e.value}")
