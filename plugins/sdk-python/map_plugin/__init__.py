"""The Python SDK for map-gateway plugins, built with componentize-py.

It wraps the bindings componentize-py generates for the plugin's world
(`wit_world`, from the gateway's `wit/`) and adds what every plugin would
otherwise write again:

- `Extension`: the descriptor (name, version, URI, capabilities, error
  range, event filters) and decorators for methods (`@ext.method`), the
  `map/send` observer (`@ext.on_send`), `@ext.on_init`, `@ext.on_timer` and
  resource types (`ext.resource`); `ext.export(globals())` makes the
  classes componentize-py exports.
- params checked against a dataclass or TypedDict (`params`), -32602 when
  they do not fit;
- `RpcError` and its kinds, codes of the extension's `ErrorRange`; any
  other exception answers the range's internal code instead of trapping;
- `store`: collections, paged ranges, one-snapshot reads, atomic batches
  with compare-and-swap and counters, a retry loop;
- `events`, `router`, `config`, `metrics`, `log`, `timers`, `ids`.

The worlds import no `wasi:http`, so there is no outbound HTTP helper:
a plugin that needs it is written in Rust (the Rust SDK's `http`).
"""

from . import config, events, ids, log, metrics, router, store, timers
from ._contract import CONTRACT_VERSION
from .call import Call, SentMessage
from .errors import ErrorRange, InternalError, InvalidParams, MethodNotFound, RpcError, StorageError, codes
from .extension import EventFilter, Extension
from .params import Range, json_key
from .resources import Resource, ResourcePage

__all__ = [
    "CONTRACT_VERSION", "Call", "ErrorRange", "EventFilter", "Extension", "InternalError", "InvalidParams",
    "MethodNotFound", "Range", "Resource", "ResourcePage", "RpcError", "SentMessage", "StorageError", "codes",
    "config", "events", "ids", "json_key", "log", "metrics", "router", "store", "timers",
]
