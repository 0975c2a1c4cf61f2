"""Events in the tenant's MAP event stream (numbered, kept for
`map/replay`, pushed to matching subscriptions).

An event usually reports a write that is already durable, so these do not
fail the call: a refused event (an empty type, `data` that is not an
object) is logged as a warning and False returned.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from . import _wit, log
from ._json import dumps


def _emit(event_type: str, send: Any, *args: Any) -> bool:
    try:
        send(*args)
        return True
    except _wit.Err as e:
        log.warn(f"could not emit {event_type}: {e.value}")
    except (TypeError, ValueError) as e:
        log.warn(f"could not emit {event_type}: its data cannot be written as JSON: {e}")
    return False


def emit(event_type: str, data: Any) -> bool:
    """Emit to everyone allowed to see the tenant's events; `data` is an object."""
    return _emit(event_type, lambda: _wit.events.emit(event_type, dumps(data)))


def emit_to(event_type: str, data: Any, audience: Sequence[str]) -> bool:
    """Emit only to these participant and agent ids; an empty audience reaches no one."""
    return _emit(event_type, lambda: _wit.events.emit_to(event_type, dumps(data), list(audience)))


def emit_for(event_type: str, data: Any, ids: Sequence[str] = (), capability: Optional[str] = None) -> bool:
    """Emit to these ids and to every session whose declared capabilities
    hold `true` at the dotted path `capability` (e.g. `mail.canObserve`)."""
    audience = _wit.events.Audience(ids=list(ids), capability=capability)
    return _emit(event_type, lambda: _wit.events.emit_for(event_type, dumps(data), audience))
