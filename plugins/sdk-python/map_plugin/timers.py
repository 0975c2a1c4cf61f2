"""One-shot timers, delivered to the extension's `@ext.on_timer` handler
(the world must export `lifecycle`: `stateful-extension`). They are kept
by the host and survive instances, restarts and, in a cluster, nodes."""

from __future__ import annotations

from . import _wit
from .errors import RpcError


def schedule(delay_ms: int, tag: str = "") -> int:
    """Call `on_timer(id, tag)` after `delay_ms` (at most 7 days); the timer's
    id. A refusal raises RpcError with the storage code (retryable)."""
    try:
        return _wit.timers.schedule(delay_ms, tag)
    except _wit.Err as e:
        raise RpcError(None, f"The timer could not be scheduled: {e.value}", retryable=True) from None


def cancel(timer: int) -> bool:
    """True when it was pending and now will not fire."""
    return _wit.timers.cancel(timer)
