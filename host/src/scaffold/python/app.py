"""The `@NAME@` extension for map-gateway, in Python on the plugin SDK
(`map_plugin`, the package map-gateway-plugin-sdk, which build.sh installs): `@NAME@/put`
stores an item and emits `@NAME@.put`, `@NAME@/get` reads one back.

componentize-py runs this module's top level once, at build time: import
everything at the top, and call the host (store, events, …) only inside
handlers."""

from dataclasses import dataclass

from map_plugin import Call, ErrorRange, Extension, RpcError, events, ids
from map_plugin.store import Collection

# The error codes this extension answers with, besides JSON-RPC's: 1000
# from 90000 up, as the MAP registry asks of extensions it does not list.
# The gateway refuses a range that overlaps another extension's in a
# tenant (and says which): move it then.
ERRORS = ErrorRange(@ERR_FIRST@, @ERR_LAST@)
ITEM_NOT_FOUND = ERRORS.code(@ERR_NOT_FOUND@)

# Outside the MAP registry: the name x-@NAME@, the URI x-@NAME@:1,
# capabilities {"enabled": true} under "x-@NAME@".
ext = Extension("x-@NAME@", "0.1.0", errors=ERRORS)

ITEMS = Collection("items")  # id -> {id, text, createdBy, createdAt}


@dataclass
class Put:
    text: str


@ext.method("@NAME@/put")
def put(call: Call, params: Put) -> dict:
    # Missing or malformed params answer -32602 naming the field.
    item_id, now = ids.new_id_at("item")
    item = {"id": item_id, "text": params.text, "createdBy": call.caller.participant_id, "createdAt": now}
    ITEMS.put(item_id, item)
    events.emit("@NAME@.put", {"itemId": item_id, "createdBy": item["createdBy"]})
    return item


@dataclass
class Get:
    item_id: str  # the JSON key itemId


@ext.method("@NAME@/get")
def get(call: Call, params: Get) -> dict:
    item = ITEMS.get(params.item_id)
    if item is None:
        raise RpcError(ITEM_NOT_FOUND, f"No item {params.item_id}", {"itemId": params.item_id})
    return item


ext.export(globals())
