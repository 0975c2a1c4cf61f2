"""Counters and gauges of the plugin's own, exported by the gateway as
`map_plugin_<name>` with `tenant` and `plugin` labels. A refused series
(a bad name, too many series) is logged, never raised: metrics must not
fail a call."""

from __future__ import annotations

from typing import Mapping, Optional

from . import _wit, log


def _labels(labels: Optional[Mapping[str, str]]) -> list:
    return [(k, v) for k, v in (labels or {}).items()]


def count(name: str, delta: int = 1, labels: Optional[Mapping[str, str]] = None) -> None:
    """Add `delta` to the counter `name`."""
    try:
        _wit.metrics.counter_add(name, _labels(labels), delta)
    except _wit.Err as e:
        log.warn(f"metric {name} refused: {e.value}")


def gauge(name: str, value: float, labels: Optional[Mapping[str, str]] = None) -> None:
    """Set the gauge `name`."""
    try:
        _wit.metrics.gauge_set(name, _labels(labels), float(value))
    except _wit.Err as e:
        log.warn(f"metric {name} refused: {e.value}")
