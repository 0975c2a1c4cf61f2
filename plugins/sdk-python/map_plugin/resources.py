"""Resource types for the core's `map/resources/list` and `get` (world
export `resources`). The gateway serves those methods and calls the plugin
that declared the type; the plugin applies its own visibility rules.

    notes = ext.resource("x-notes/note")

    @notes.list
    def list_notes(call: Call, cursor: Optional[str], limit: int) -> ResourcePage: ...

    @notes.get
    def get_note(call: Call, id: str) -> Optional[Resource]: ...

`call.params` is the client's filter (an object, `{}` when none); an
`InvalidParams` raised for it reaches the client as -32003 (invalid filter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from . import _wit
from ._json import dumps


@dataclass
class Resource:
    """One resource; times in Unix milliseconds (`updated_at` defaults to `created_at`)."""

    id: str
    name: str
    status: str
    owner_id: str
    created_at: int
    updated_at: Optional[int] = None
    metadata: Dict[str, Any] = field(default_factory=dict)

    def to_wit(self) -> Any:
        updated = self.created_at if self.updated_at is None else self.updated_at
        return _wit.resources.Item(id=self.id, name=self.name, status=self.status, owner_id=self.owner_id,
                                   created_at=self.created_at, updated_at=updated, metadata=dumps(self.metadata))


@dataclass
class ResourcePage:
    """Up to `limit` items; `cursor` where the next page starts (None after
    the last), `total` the number matching when known cheaply."""

    items: List[Resource]
    cursor: Optional[str] = None
    total: Optional[int] = None

    def to_wit(self) -> Any:
        return _wit.resources.Page(items=[i.to_wit() for i in self.items], cursor=self.cursor, total=self.total)


class ResourceKind:
    """The handlers of one resource type."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.list_handler: Optional[Callable[..., ResourcePage]] = None
        self.get_handler: Optional[Callable[..., Optional[Resource]]] = None

    def list(self, fn: Callable[..., ResourcePage]) -> Callable[..., ResourcePage]:
        """`fn(call, cursor, limit)`: a ResourcePage of what the caller may see."""
        self.list_handler = fn
        return fn

    def get(self, fn: Callable[..., Optional[Resource]]) -> Callable[..., Optional[Resource]]:
        """`fn(call, id)`: the Resource, or None when it is absent or hidden from the caller."""
        self.get_handler = fn
        return fn
