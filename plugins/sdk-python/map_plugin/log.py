"""Lines in the gateway's log, tagged by the host with tenant and plugin."""

from __future__ import annotations

from . import _wit


def _write(level: str, message: str) -> None:
    try:
        _wit.log.log(getattr(_wit.log.Level, level), message)
    except Exception:  # logging must never be why a call fails
        pass


def trace(message: str) -> None:
    _write("TRACE", message)


def debug(message: str) -> None:
    _write("DEBUG", message)


def info(message: str) -> None:
    _write("INFO", message)


def warn(message: str) -> None:
    _write("WARN", message)


def error(message: str) -> None:
    _write("ERROR", message)
