"""Errors answered to the client as JSON-RPC errors.

Raise an `RpcError` (or one of its kinds) from a method; the SDK turns it
into the WIT `rpc-error`. Its `data` on the wire is `{"details": …,
"retryable": true}`, each key only when set (the host adds `category`).

Codes are JSON-RPC's (-32700..-32600, see `codes`) or inside the
extension's `ErrorRange`. A storage failure has no code of its own: it takes
the range's storage code when it is answered; any other exception takes the
range's internal code, so a bug answers an error instead of trapping the
instance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional


class codes:
    """The JSON-RPC codes a plugin may answer with."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603


# Codes of JSON-RPC and the MAP core: no extension range may touch them.
_RESERVED = ((-32768, -32000), (1000, 9999), (16000, 16999))


def is_json_rpc(code: int) -> bool:
    """Codes a plugin may answer besides its range."""
    return -32700 <= code <= -32600


class RpcError(Exception):
    """An error for the client: a code, a message, optional `details` and
    a `retryable` flag. `code=None` takes the range's storage code."""

    def __init__(self, code: Optional[int], message: str, details: Any = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.retryable = retryable

    def data(self) -> Optional[dict]:
        """The JSON-RPC `data`: `{details?, retryable?}`, or None when both are absent."""
        data: dict = {}
        if self.details is not None:
            data["details"] = self.details
        if self.retryable:
            data["retryable"] = True
        return data or None

    def __str__(self) -> str:
        return f"{'storage' if self.code is None else self.code}: {self.message}"


class InvalidParams(RpcError):
    """-32602: the request's params are malformed."""

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(codes.INVALID_PARAMS, message, details)


class MethodNotFound(RpcError):
    """-32601: no such method."""

    def __init__(self, method: str) -> None:
        super().__init__(codes.METHOD_NOT_FOUND, f"Method not found: {method}")


class InternalError(RpcError):
    """-32603: a fault of the plugin itself."""

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(codes.INTERNAL_ERROR, message, details)


class StorageError(RpcError):
    """The store failed or refused a request; answered with the range's
    storage code. `unavailable` failures (and conflicts) are retryable."""

    def __init__(self, message: str, retryable: bool = False, details: Any = None) -> None:
        super().__init__(None, message, details, retryable)


@dataclass(frozen=True)
class ErrorRange:
    """The inclusive range of codes an extension answers with, as its
    descriptor declares it. Storage failures take `storage` and unexpected
    exceptions `internal`; both default to `last`. A range the host would
    refuse (empty, or overlapping JSON-RPC's or the MAP core's codes) is
    refused here, when the plugin is built."""

    first: int
    last: int
    storage: Optional[int] = None
    internal: Optional[int] = None

    def __post_init__(self) -> None:
        if self.first > self.last:
            raise ValueError(f"error range {self.first}..{self.last} is empty")
        for lo, hi in _RESERVED:
            if not (self.last < lo or self.first > hi):
                raise ValueError(f"error range {self.first}..{self.last} overlaps the reserved codes {lo}..{hi}")
        for code in (self.storage, self.internal):
            if code is not None:
                self.code(code)

    def code(self, code: int) -> int:
        """`code`, checked to lie in the range (use it for named codes)."""
        if not self.contains(code):
            raise ValueError(f"error code {code} is outside the range {self.first}..{self.last}")
        return code

    def contains(self, code: int) -> bool:
        return self.first <= code <= self.last

    @property
    def storage_code(self) -> int:
        return self.last if self.storage is None else self.storage

    @property
    def internal_code(self) -> int:
        return self.last if self.internal is None else self.internal

    def wire(self, error: RpcError) -> tuple[int, str, Optional[str]]:
        """(code, message, data as JSON text) for the WIT `rpc-error`. A code
        outside the range (JSON-RPC's aside), which the host would answer as
        -32603 and drop the instance for, becomes -32603 here, naming it."""
        data = error.data()
        text = None if data is None else json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str)
        code = self.storage_code if error.code is None else error.code
        if self.contains(code) or is_json_rpc(code):
            return code, error.message, text
        return (codes.INTERNAL_ERROR,
                f"{error.message} (error code {code} is outside the extension's range {self.first}..{self.last})", text)
