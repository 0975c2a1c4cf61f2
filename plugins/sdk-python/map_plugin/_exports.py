"""The classes componentize-py instantiates for the world's exports, made
from an Extension. Which ones the world has is read from the generated
`wit_world.exports`; a world and an extension that do not match are
refused when the plugin is built."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from . import _wit
from .call import Call

# Exports this SDK does not serve yet: build those components without it.
_UNSERVED = {"HttpHandler": "http-handler", "GrpcHandler": "grpc-handler", "GrpcUnary": "grpc-unary"}


def classes(ext: Any) -> Dict[str, type]:
    world = _wit.exports
    made: Dict[str, type] = {}
    for name, interface in _UNSERVED.items():
        if hasattr(world, name):
            raise ValueError(f"the world exports {interface}, which the Python SDK does not serve")
    _match(world, "Rpc", "rpc", bool(ext.methods), "methods (@ext.method)")
    _match(world, "SendObserver", "send-observer", ext.observer is not None, "an observer (@ext.on_send)")
    _match(world, "Resources", "resources", bool(ext.kinds), "resource types (ext.resource)")
    _match(world, "Lifecycle", "lifecycle", ext.init_handler is not None or ext.timer_handler is not None,
           "@ext.on_init or @ext.on_timer", required=False)
    for kind in ext.kinds.values():
        if kind.list_handler is None or kind.get_handler is None:
            raise ValueError(f"resource type {kind.kind} needs both a .list and a .get handler")
    if hasattr(world, "Rpc"):
        made["Rpc"] = _rpc(world, ext)
    if hasattr(world, "SendObserver"):
        made["SendObserver"] = _observer(world, ext)
    if hasattr(world, "Lifecycle"):
        made["Lifecycle"] = _lifecycle(world, ext)
    if hasattr(world, "Resources"):
        made["Resources"] = _resources(world, ext)
    return made


def _match(world: Any, cls: str, interface: str, has: bool, what: str, required: bool = True) -> None:
    exported = hasattr(world, cls)
    if has and not exported:
        raise ValueError(f"the extension has {what}, but the world does not export {interface}: pick a world that does")
    if exported and not has and required:
        raise ValueError(f"the world exports {interface}, but the extension has no {what}")


def _rpc(world: Any, ext: Any) -> type:
    class Rpc(world.Rpc):
        def describe(self) -> Any:
            return ext.describe()

        def handle(self, caller: Any, method: str, params: str) -> str:
            return ext.handle(caller, method, params)
    return Rpc


def _observer(world: Any, ext: Any) -> type:
    class SendObserver(world.SendObserver):
        def interest(self) -> List[str]:
            return list(ext.interest)

        def on_send(self, caller: Any, message: Any) -> None:
            ext.send(caller, message)
    return SendObserver


def _lifecycle(world: Any, ext: Any) -> type:
    class Lifecycle(world.Lifecycle):
        def init(self) -> None:
            ext.init()

        def on_timer(self, timer: int, tag: str) -> None:
            ext.timer(timer, tag)
    return Lifecycle


def _resources(world: Any, ext: Any) -> type:
    class Resources(world.Resources):
        def kinds(self) -> List[str]:
            return list(ext.kinds)

        def list(self, caller: Any, kind: str, filter: str, cursor: Optional[str], limit: int) -> Any:
            handler = ext.kinds[kind].list_handler
            return ext.guard(f"list {kind}", lambda: handler(Call(caller, kind, json.loads(filter)), cursor, limit).to_wit())

        def get(self, caller: Any, kind: str, id: str) -> Any:
            handler = ext.kinds[kind].get_handler
            return ext.guard(f"get {kind}", lambda: _item(handler(Call(caller, kind, {}), id)))
    return Resources


def _item(resource: Any) -> Any:
    return None if resource is None else resource.to_wit()
