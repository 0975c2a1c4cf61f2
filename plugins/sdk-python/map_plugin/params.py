"""Request params checked against a dataclass or a TypedDict.

`decode(Type, value, where)` builds a `Type` from decoded JSON, checking
each field's type hint; whatever does not fit raises `InvalidParams`
(-32602) naming the field: "missing field `text`", "`limit` must be an
integer". Keys the type does not name are ignored.

A dataclass field `item_id` reads the JSON key `itemId` (camelCase); a
trailing `_` is dropped (`from_` reads `from`); `json_key("x")` names any
other key. Hints understood: str, int, float, bool, None, Any, object, dict,
list, List[T], Dict[str, T], Optional[T] and unions, Literal[…], nested
dataclasses and TypedDicts, and `Annotated[int, Range(lo, hi)]`. A
dataclass's `__post_init__` may raise `InvalidParams` or `ValueError` for
checks of its own; both answer -32602.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from .errors import InvalidParams

_NONE = type(None)


@dataclass(frozen=True)
class Range:
    """`Annotated[int, Range(1, 200)]`: a number from `lo` to `hi` (inclusive)."""

    lo: Optional[float] = None
    hi: Optional[float] = None

    def check(self, value: Any, where: str) -> None:
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            lo = "" if self.lo is None else f" from {self.lo}"
            hi = "" if self.hi is None else f" to {self.hi}"
            raise InvalidParams(f"{_quoted(where)} must be a number{lo}{hi}")


def json_key(name: str, **field_args: Any) -> Any:
    """A dataclass field read from the JSON key `name`:
    `sender: str = json_key("from")` (pass `default=` to make it optional)."""
    return dataclasses.field(metadata={"json": name}, **field_args)


def key_of(field: dataclasses.Field) -> str:
    """The JSON key of a dataclass field."""
    if "json" in field.metadata:
        return field.metadata["json"]
    head, *rest = field.name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def is_params_type(hint: Any) -> bool:
    """A type `decode` builds: a dataclass or a TypedDict."""
    return isinstance(hint, type) and (dataclasses.is_dataclass(hint) or typing.is_typeddict(hint))


def decode(hint: Any, value: Any, where: str = "params") -> Any:
    """`value` (decoded JSON) checked against `hint`; InvalidParams when it does not fit."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        inner, *marks = typing.get_args(hint)
        out = decode(inner, value, where)
        for mark in marks:
            if isinstance(mark, Range):
                mark.check(out, where)
        return out
    if hint is Any or hint is object:
        return value
    if origin is Union or origin is types.UnionType:
        return _union(typing.get_args(hint), value, where)
    if origin is Literal:
        if any(value == v and type(value) is type(v) for v in typing.get_args(hint)):
            return value
        raise InvalidParams(f"{where} must be one of {', '.join(map(repr, typing.get_args(hint)))}")
    if origin in (list, typing.List):
        items = _expect(list, value, where, "an array")
        (item,) = typing.get_args(hint) or (Any,)
        return [decode(item, v, f"{where}[{i}]") for i, v in enumerate(items)]
    if origin in (dict, typing.Dict):
        obj = _expect(dict, value, where, "an object")
        _, item = typing.get_args(hint) or (str, Any)
        return {k: decode(item, v, f"{where}.{k}") for k, v in obj.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(hint, value, where)
    if isinstance(hint, type) and typing.is_typeddict(hint):
        return _typeddict(hint, value, where)
    return _scalar(hint, value, where)


def _name(where: str, key: str) -> str:
    return key if where == "params" else f"{where}.{key}"


def _expect(kind: type, value: Any, where: str, what: str) -> Any:
    if not isinstance(value, kind):
        raise InvalidParams(f"{_quoted(where)} must be {what}")
    return value


def _quoted(where: str) -> str:
    return where if where == "params" else f"`{where}`"


def _scalar(hint: Any, value: Any, where: str) -> Any:
    if hint is _NONE or hint is None:
        if value is None:
            return None
        raise InvalidParams(f"{_quoted(where)} must be null")
    if hint is bool:
        return _expect(bool, value, where, "a boolean")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise InvalidParams(f"{_quoted(where)} must be an integer")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise InvalidParams(f"{_quoted(where)} must be a number")
    if hint is str:
        return _expect(str, value, where, "a string")
    if hint is dict:
        return _expect(dict, value, where, "an object")
    if hint is list:
        return _expect(list, value, where, "an array")
    raise TypeError(f"params of type {hint!r} cannot be checked")


def _union(options: tuple, value: Any, where: str) -> Any:
    if value is None and _NONE in options:
        return None
    failures = []
    for option in options:
        if option is _NONE:
            continue
        try:
            return decode(option, value, where)
        except InvalidParams as e:
            failures.append(e.message)
    raise InvalidParams(failures[0] if len(failures) == 1 else f"{_quoted(where)} has the wrong type ({'; '.join(failures)})")


def _dataclass(cls: type, value: Any, where: str) -> Any:
    obj = _expect(dict, value, where, "an object")
    hints = typing.get_type_hints(cls, include_extras=True)
    args = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        key = key_of(field)
        if key in obj:
            args[field.name] = decode(hints[field.name], obj[key], _name(where, key))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise InvalidParams(f"missing field `{_name(where, key)}`")
    try:
        return cls(**args)
    except ValueError as e:
        raise InvalidParams(str(e)) from e


def _typeddict(cls: type, value: Any, where: str) -> dict:
    obj = _expect(dict, value, where, "an object")
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for key, hint in hints.items():
        if key in obj:
            out[key] = decode(hint, obj[key], _name(where, key))
        elif key in cls.__required_keys__:
            raise InvalidParams(f"missing field `{_name(where, key)}`")
    return out


def encode(value: Any) -> Any:
    """A result made JSON-ready: dataclasses become objects with their JSON
    keys (as `decode` reads them), recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key_of(f): encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value
