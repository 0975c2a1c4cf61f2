"""The plugin's configuration for the tenant: its `config` table, overlaid
by the tenant's `plugin_config`. It never changes during an instance's
life, so it is read once, on first use."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from . import _wit, log

_cache: Dict[str, Any] = {}


def all() -> Dict[str, Any]:
    """The whole configuration (`{}` when none is set, or when it is malformed: logged)."""
    if "all" not in _cache:
        text = _wit.config.all()
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            log.warn(f"ignoring malformed configuration: {text}")
            value = {}
        _cache["all"] = value
    return _cache["all"]


def get(key: str, default: Optional[Any] = None) -> Any:
    """One top-level key, or `default`."""
    return all().get(key, default)
