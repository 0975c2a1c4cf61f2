"""An extension declared once, its methods and handlers registered with
decorators, and the classes componentize-py exports made from it.

    ext = Extension("x-notes", "0.1.0", errors=ErrorRange(90000, 90999))

    @ext.method("notes/put")
    def put(call: Call, params: Put) -> dict: ...

    ext.export(globals())

`export` defines, in the app module, one class for each interface the
world exports (`Rpc`, `SendObserver`, `Lifecycle`, `Resources`: the names
componentize-py looks for), and refuses at build time a world and an
extension that do not match (an observer in a world without
`send-observer`, a world exporting `rpc` with no method).
"""

from __future__ import annotations

import inspect
import json
import traceback
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _wit, log
from ._exports import classes
from .call import Call, SentMessage
from ._json import dumps
from .errors import ErrorRange, InvalidParams, MethodNotFound, RpcError
from .params import decode, is_params_type
from .resources import ResourceKind


@dataclass
class EventFilter:
    """A subscription filter key over the extension's events:
    `EventFilter("notes", "notes.*", {"noteId": ["noteId", "note.id"]})`."""

    key: str
    event_types: str
    fields: Mapping[str, Sequence[str]] = field(default_factory=dict)


class _Method:
    def __init__(self, fn: Callable[..., Any], params: Any) -> None:
        self.fn = fn
        arity = len(inspect.signature(fn).parameters)
        if arity not in (1, 2):
            raise TypeError(f"{fn.__name__}: a method takes (call) or (call, params)")
        if params is None and arity == 2:
            hints = typing.get_type_hints(fn)
            name = list(inspect.signature(fn).parameters)[1]
            params = hints.get(name)
        self.params = params if arity == 2 else None
        self.arity = arity

    def __call__(self, call: Call) -> Any:
        if self.arity == 1:
            return self.fn(call)
        if self.params is None:
            return self.fn(call, call.params)
        try:
            value = decode(self.params, call.params)
        except InvalidParams as e:
            raise InvalidParams(f"Invalid params for {call.method}: {e.message}", e.details) from None
        return self.fn(call, value)


class Extension:
    """What the extension declares (rpc's `describe`) and its handlers.

    `uri` defaults to `urn:map:ext:<name>:1`, or `<name>:1` for an
    experimental `x-` name; `capability_group` to the name; `capabilities`
    (an object, or a function returning one, read for each tenant) to
    `{"enabled": true}`.
    """

    def __init__(self, name: str, version: str, *, errors: ErrorRange, uri: Optional[str] = None,
                 capability_group: Optional[str] = None,
                 capabilities: Union[Mapping[str, Any], Callable[[], Mapping[str, Any]], None] = None,
                 event_filters: Sequence[EventFilter] = ()) -> None:
        self.name = name
        self.version = version
        self.errors = errors
        self.uri = uri or (f"{name}:1" if name.startswith("x-") else f"urn:map:ext:{name}:1")
        self.capability_group = capability_group or name
        self.capabilities = {"enabled": True} if capabilities is None else capabilities
        self.event_filters = list(event_filters)
        self.methods: Dict[str, _Method] = {}
        self.observer: Optional[Callable[[Any, SentMessage], None]] = None
        self.interest: List[str] = []
        self.init_handler: Optional[Callable[[], None]] = None
        self.timer_handler: Optional[Callable[[int, str], None]] = None
        self.kinds: Dict[str, ResourceKind] = {}

    # ---- registration ---------------------------------------------------

    def method(self, name: str, params: Any = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Serve `name` with `fn(call)` or `fn(call, params)`. The params are
        checked against `params=` (a dataclass or TypedDict) or else the
        second argument's type hint (`dict` asks for an object); without a
        hint they are passed as decoded JSON."""
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self.methods:
                raise ValueError(f"method {name} is registered twice")
            if params is not None and not is_params_type(params):
                raise TypeError(f"{name}: params= takes a dataclass or a TypedDict")
            self.methods[name] = _Method(fn, params)
            return fn
        return register

    def on_send(self, interest: Sequence[str] = ()) -> Callable[[Callable[[Any, SentMessage], None]], Any]:
        """Observe delivered `map/send` messages: `fn(caller, message)`.
        `interest`: top-level `meta` keys wanted (empty: every message)."""
        def register(fn: Callable[[Any, SentMessage], None]) -> Callable[[Any, SentMessage], None]:
            self.observer, self.interest = fn, list(interest)
            return fn
        return register

    def on_init(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Run `fn()` in every new instance before any call (an exception
        means the instance is not used)."""
        self.init_handler = fn
        return fn

    def on_timer(self, fn: Callable[[int, str], None]) -> Callable[[int, str], None]:
        """Receive due timers: `fn(timer_id, tag)`."""
        self.timer_handler = fn
        return fn

    def resource(self, kind: str) -> ResourceKind:
        """A resource type (`<namespace>/<name>`) for `map/resources/list`
        and `get`; register its `.list` and `.get` handlers on the result."""
        self.kinds[kind] = ResourceKind(kind)
        return self.kinds[kind]

    # ---- the exported behaviour ------------------------------------------

    def describe(self) -> Any:
        caps = self.capabilities() if callable(self.capabilities) else self.capabilities
        filters = [_wit.rpc.EventFilter(key=f.key, event_types=f.event_types,
                                        fields=[_wit.rpc.FilterField(name=n, paths=list(p)) for n, p in f.fields.items()])
                   for f in self.event_filters]
        return _wit.rpc.Descriptor(name=self.name, version=self.version, uri=self.uri,
                                   capability_group=self.capability_group, capabilities=dumps(caps),
                                   methods=list(self.methods), error_range=(self.errors.first, self.errors.last),
                                   event_filters=filters)

    def handle(self, caller: Any, method: str, params: str) -> str:
        """Run a method: its result as JSON text, or `Err(rpc-error)`."""
        return self.guard(method, lambda: dumps(self.dispatch(Call(caller, method, json.loads(params)))))

    def dispatch(self, call: Call) -> Any:
        entry = self.methods.get(call.method)
        if entry is None:
            raise MethodNotFound(call.method)
        return entry(call)

    def guard(self, what: str, run: Callable[[], Any]) -> Any:
        """`run()`, with an RpcError raised as the WIT error and any other
        exception logged and answered with the range's internal code."""
        try:
            return run()
        except RpcError as e:
            raise self.wire(e) from None
        except Exception as e:
            log.error(f"{what} failed: {''.join(traceback.format_exception(type(e), e, e.__traceback__))}")
            failure = RpcError(self.errors.internal_code, f"{what} failed: {type(e).__name__}: {e}",
                               {"exception": type(e).__name__})
            raise self.wire(failure) from None

    def wire(self, error: RpcError) -> Exception:
        code, message, data = self.errors.wire(error)
        return _wit.Err(_wit.types.RpcError(code=code, message=message, data=data))

    def send(self, caller: Any, message: Any) -> None:
        """Run the observer; an exception loses this message only (logged)."""
        try:
            if self.observer is not None:
                self.observer(caller, SentMessage.from_wit(message))
        except Exception as e:
            log.warn(f"{self.name}: message {message.id} not observed: {type(e).__name__}: {e}")

    def init(self) -> None:
        try:
            if self.init_handler is not None:
                self.init_handler()
        except Exception as e:
            log.error(f"{self.name}: init failed: {type(e).__name__}: {e}")
            raise _wit.Err(f"init failed: {type(e).__name__}: {e}") from None

    def timer(self, timer: int, tag: str) -> None:
        try:
            if self.timer_handler is not None:
                self.timer_handler(timer, tag)
            else:
                log.warn(f"{self.name}: timer {timer} ({tag}) is due and no on_timer handler is registered")
        except Exception as e:
            log.error(f"{self.name}: timer {timer} ({tag}) failed: {type(e).__name__}: {e}")

    def export(self, namespace: Dict[str, Any]) -> None:
        """Define the export classes of the world in `namespace` (pass `globals()`)."""
        namespace.update(classes(self))
