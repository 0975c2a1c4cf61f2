# The `@NAME@` extension for map-gateway, in Python (componentize-py):
# `@NAME@/put` stores an item and emits `@NAME@.put`, `@NAME@/get` reads one
# back. World `extension` of wit/ (map-gateway:plugin): it exports `rpc`.
#
# componentize-py runs this module's top level once, at build time:
# - import every module you need here, at the top (modules imported later
#   are missing when the component runs);
# - call no host import at the top level (only inside calls).
# An exception that escapes `handle` traps the instance (the client gets
# -32603 and the instance is discarded): answer errors with `Err(RpcError)`.

import json
import os
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import rpc
from wit_world.imports import events, store
from wit_world.imports.types import Caller, RpcError

NAME = "@NAME@"
# The error codes this extension answers with, besides JSON-RPC's: 1000
# from 90000 up, as the MAP registry asks of extensions it does not list
# (the gateway refuses overlapping ranges).
ERROR_RANGE = (@ERR_FIRST@, @ERR_LAST@)
ITEM_NOT_FOUND = @ERR_NOT_FOUND@
INTERNAL = @ERR_LAST@
ITEMS = "items"

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_last = [0, 0]  # the last id's (milliseconds, random part), for ordered ids


def new_id(prefix):
    """`prefix-<ULID>`: time-ordered, unique (random part bumped within one millisecond)."""
    ms = int(time.time() * 1000)
    if ms <= _last[0]:
        ms, rand = _last[0], _last[1] + 1
    else:
        rand = int.from_bytes(os.urandom(10), "big") >> 1
    _last[0], _last[1] = ms, rand
    n = (ms << 80) | rand
    return prefix + "-" + "".join(CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))


class Failure(Exception):
    def __init__(self, code, message, details=None):
        super().__init__(message)
        self.error = RpcError(code=code, message=message, data=None if details is None else json.dumps({"details": details}))


def field(params, name):
    if not isinstance(params, dict) or not isinstance(params.get(name), str):
        raise Failure(-32602, f"Invalid params: missing field `{name}` (a string)")
    return params[name]


def put(caller: Caller, params):
    item = {"id": new_id("item"), "text": field(params, "text"), "createdBy": caller.participant_id, "createdAt": int(time.time() * 1000)}
    store.put(ITEMS, item["id"], json.dumps(item))
    events.emit(f"{NAME}.put", json.dumps({"itemId": item["id"], "createdBy": item["createdBy"]}))
    return item


def get(caller: Caller, params):
    item_id = field(params, "itemId")
    stored = store.get(ITEMS, item_id)
    if stored is None:
        raise Failure(ITEM_NOT_FOUND, f"No item {item_id}", {"itemId": item_id})
    return json.loads(stored)


METHODS = {f"{NAME}/put": put, f"{NAME}/get": get}


class Rpc(exports.Rpc):
    def describe(self) -> rpc.Descriptor:
        return rpc.Descriptor(
            # Outside the MAP registry: the x- form.
            name=f"x-{NAME}", version="0.1.0", uri=f"x-{NAME}:1", capability_group=f"x-{NAME}",
            capabilities=json.dumps({"enabled": True}), methods=list(METHODS),
            error_range=ERROR_RANGE, event_filters=[],
        )

    def handle(self, caller: Caller, method: str, params: str) -> str:
        try:
            return json.dumps(METHODS[method](caller, json.loads(params)))
        except Failure as f:
            raise Err(f.error)
        except Err as e:
            raise Err(RpcError(code=INTERNAL, message=f"{method}: the store answered {e.value}", data=None))
        except Exception as e:
            raise Err(RpcError(code=INTERNAL, message=f"{method} failed: {e!r}", data=None))
