"""The bindings componentize-py generates for the plugin's world
(`wit_world`), imported once here so the rest of the SDK names them
through this module.

Every world imports the same interfaces; the exports depend on the world,
so an export's module is None when the world does not export it.
componentize-py runs this at build time and snapshots it: nothing may be
imported later.
"""

from __future__ import annotations

from types import ModuleType
from typing import Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import config, events, log, metrics, router, store, timers, types


def _export(name: str) -> Optional[ModuleType]:
    try:
        module = __import__(f"wit_world.exports.{name}", fromlist=[name])
    except ImportError:
        return None
    return module


rpc = _export("rpc")
send_observer = _export("send_observer")
resources = _export("resources")

__all__ = ["Err", "exports", "config", "events", "log", "metrics", "router", "store", "timers", "types",
           "rpc", "send_observer", "resources"]
