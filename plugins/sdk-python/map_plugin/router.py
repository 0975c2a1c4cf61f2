"""MAP messages and calls inside the tenant, as the current caller (or,
outside a call, as the participant `plugin:<name>`). The host's errors
raise RpcError with the host's code and message as they came."""

from __future__ import annotations

import json
from typing import Any, List, Optional, Sequence

from . import _wit
from ._json import dumps
from .errors import RpcError


def _raise(e: Any) -> RpcError:
    err = e.value
    details = None
    if err.data is not None:
        try:
            details = json.loads(err.data)
        except ValueError:
            details = err.data
    return RpcError(err.code, err.message, details)


def send(to: Any, payload: Any, meta: Optional[dict] = None) -> Any:
    """Send like `map/send`; the `map/send` result `{messageId, delivered}`."""
    try:
        return json.loads(_wit.router.send(dumps(to), dumps(payload), None if meta is None else dumps(meta)))
    except _wit.Err as e:
        raise _raise(e) from None


def notify(participant_id: str, method: str, params: Any) -> None:
    """Push a JSON-RPC notification to a participant's session."""
    try:
        _wit.router.notify(participant_id, method, dumps(params))
    except _wit.Err as e:
        raise _raise(e) from None


def call(method: str, params: Any = None) -> Any:
    """Call a method another extension of the tenant serves (e.g.
    `mail/create`); its result, or its error raised as it gave it."""
    try:
        return json.loads(_wit.router.call(method, dumps({} if params is None else params)))
    except _wit.Err as e:
        raise _raise(e) from None


def connected_since(ids: Sequence[str]) -> List[Optional[int]]:
    """For each participant or agent id: since when (Unix ms) it has been connected, or None."""
    return list(_wit.router.connected_since(list(ids)))


def agent(agent_id: str) -> Optional[dict]:
    """An agent as `map/agents/get` shows it to the caller, or None."""
    text = _wit.router.agent(agent_id)
    return None if text is None else json.loads(text)
