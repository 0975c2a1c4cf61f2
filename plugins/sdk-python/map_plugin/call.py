"""What a handler gets: one `Call`, or one delivered `SentMessage`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List


@dataclass
class Call:
    """One call: who calls (`caller`: tenant, participant_id,
    participant_type, session_id, agent_ids, capabilities as JSON text),
    the method, and the params as decoded JSON (`{}` when absent)."""

    caller: Any
    method: str
    params: Any

    def capabilities(self) -> Any:
        """The caller's declared capabilities (None when none or malformed)."""
        try:
            return json.loads(self.caller.capabilities)
        except (ValueError, TypeError):
            return None

    def declined(self, path: str) -> bool:
        """Did the caller declare `false` at this dotted path (e.g. `notes.canWrite`)?"""
        value = self.capabilities()
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
        return value is False


@dataclass
class SentMessage:
    """A delivered `map/send` message, its JSON decoded. `payload_json` is
    the payload's text as the host passed it."""

    id: str
    sender: str
    to: Any
    timestamp: int
    payload: Any
    meta: Dict[str, Any]
    delivered: List[str]
    payload_json: str

    @staticmethod
    def from_wit(m: Any) -> "SentMessage":
        meta = json.loads(m.meta)
        return SentMessage(m.id, m.from_, json.loads(m.to), m.timestamp, json.loads(m.payload),
                           meta if isinstance(meta, dict) else {}, list(m.delivered), m.payload)
