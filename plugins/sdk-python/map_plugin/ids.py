"""Time-ordered ids: `prefix-<ULID>` (26 Crockford base-32 characters, the
first 10 the time in milliseconds), unique and increasing within an instance."""

from __future__ import annotations

import os
import time
from typing import Tuple

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_last = [0, 0]  # the last id's (milliseconds, random part)


def now_ms() -> int:
    """Unix milliseconds."""
    return int(time.time() * 1000)


def new_id_at(prefix: str) -> Tuple[str, int]:
    """A new id and the millisecond it carries. Within one millisecond the
    random part grows by one, so ids keep their order."""
    ms = now_ms()
    if ms <= _last[0]:
        ms, rand = _last[0], _last[1] + 1
    else:
        rand = int.from_bytes(os.urandom(10), "big") >> 1
    _last[0], _last[1] = ms, rand
    n = (ms << 80) | rand
    return prefix + "-" + "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26))), ms


def new_id(prefix: str) -> str:
    return new_id_at(prefix)[0]
