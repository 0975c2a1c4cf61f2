"""JSON text as the host wants it: compact, UTF-8 as is."""

from __future__ import annotations

import json
from typing import Any

from .params import encode


def dumps(value: Any) -> str:
    """`value` as JSON text; dataclasses become objects (see params.encode)."""
    return json.dumps(encode(value), separators=(",", ":"), ensure_ascii=False)


def loads(text: str) -> Any:
    return json.loads(text)
