import json
import unittest
from dataclasses import dataclass
from typing import Optional

import fake_wit
from map_plugin import (Call, ErrorRange, EventFilter, Extension, InvalidParams, Resource, ResourcePage, RpcError,
                        StorageError, _wit)

ERRORS = ErrorRange(90000, 90999, internal=90998)
NOT_FOUND = ERRORS.code(90001)


@dataclass
class Get:
    item_id: str


def make() -> Extension:
    ext = Extension("x-t", "1.2.0", errors=ERRORS, event_filters=[EventFilter("t", "t.*", {"itemId": ["itemId"]})])

    @ext.method("t/get")
    def get(call: Call, p: Get) -> dict:
        if p.item_id == "none":
            raise RpcError(NOT_FOUND, f"No item {p.item_id}", {"itemId": p.item_id})
        return {"id": p.item_id, "by": call.caller.participant_id}

    @ext.method("t/raw")
    def raw(call: Call, params: dict) -> list:
        return [params]

    @ext.method("t/boom")
    def boom(call: Call) -> None:
        raise KeyError("oops")

    @ext.method("t/store")
    def storage(call: Call) -> None:
        raise StorageError("db down", retryable=True)

    @ext.method("t/odd")
    def odd(call: Call) -> None:
        raise RpcError(42, "odd")

    return ext


def rpc_error(fn, *args):
    with unittest.TestCase().assertRaises(fake_wit.Err) as ctx:
        fn(*args)
    return ctx.exception.value


class ExtensionTest(unittest.TestCase):
    def test_describe_declares_the_extension(self):
        d = make().describe()
        self.assertEqual((d.name, d.version, d.uri, d.capability_group), ("x-t", "1.2.0", "x-t:1", "x-t"))
        self.assertEqual(json.loads(d.capabilities), {"enabled": True})
        self.assertEqual(d.methods, ["t/get", "t/raw", "t/boom", "t/store", "t/odd"])
        self.assertEqual(json.loads(make().handle(fake_wit.caller(), "t/raw", "{}")), [{}])
        self.assertEqual(d.error_range, (90000, 90999))
        self.assertEqual(d.event_filters[0].fields[0].paths, ["itemId"])
        registered = Extension("notes", "1", errors=ERRORS, capabilities=lambda: {"max": 3})
        self.assertEqual(registered.uri, "urn:map:ext:notes:1")
        self.assertEqual(json.loads(registered.describe().capabilities), {"max": 3})

    def test_calls_decode_params_and_answer_errors_with_their_codes(self):
        ext, caller = make(), fake_wit.caller()
        self.assertEqual(json.loads(ext.handle(caller, "t/get", '{"itemId":"i1"}')), {"id": "i1", "by": "client-1"})
        self.assertEqual(json.loads(ext.handle(caller, "t/raw", '{"a":1}')), [{"a": 1}])
        self.assertEqual(rpc_error(ext.handle, caller, "t/raw", "[1]").message, "Invalid params for t/raw: params must be an object")
        e = rpc_error(ext.handle, caller, "t/get", "{}")
        self.assertEqual(e.code, -32602)
        self.assertEqual(e.message, "Invalid params for t/get: missing field `itemId`")
        e = rpc_error(ext.handle, caller, "t/get", '{"itemId":"none"}')
        self.assertEqual((e.code, json.loads(e.data)), (NOT_FOUND, {"details": {"itemId": "none"}}))
        self.assertEqual(rpc_error(ext.handle, caller, "t/nope", "{}").code, -32601)
        e = rpc_error(ext.handle, caller, "t/boom", "{}")
        self.assertEqual((e.code, json.loads(e.data)["details"]), (90998, {"exception": "KeyError"}))
        self.assertTrue(any(level == "ERROR" and "KeyError" in m for level, m in fake_wit.LOGGED))
        e = rpc_error(ext.handle, caller, "t/store", "{}")
        self.assertEqual((e.code, json.loads(e.data)), (90999, {"retryable": True}))
        e = rpc_error(ext.handle, caller, "t/odd", "{}")
        self.assertEqual(e.code, -32603)
        self.assertIn("42", e.message)

    def test_ranges_and_methods_are_checked_when_built(self):
        for bad in ((5, 4), (9000, 10999), (-32100, -32050)):
            with self.assertRaises(ValueError):
                ErrorRange(*bad)
        with self.assertRaises(ValueError):
            ERRORS.code(89999)
        ext = make()
        with self.assertRaises(ValueError):
            ext.method("t/get")(lambda call: None)
        with self.assertRaises(TypeError):
            ext.method("t/x")(lambda: None)

    def test_export_makes_the_classes_of_the_world(self):
        ext, seen = make(), []
        ext.on_send(interest=["mail"])(lambda caller, m: seen.append(m))
        saved = _wit.exports
        try:
            _wit.exports = fake_wit.world("Rpc")
            with self.assertRaises(ValueError):  # an observer, and no send-observer in the world
                ext.export({})
            _wit.exports = fake_wit.world("Rpc", "SendObserver")
            ns = {}
            ext.export(ns)
            self.assertEqual(sorted(ns), ["Rpc", "SendObserver"])
            self.assertEqual(ns["Rpc"]().describe().name, "x-t")
            observer = ns["SendObserver"]()
            self.assertEqual(observer.interest(), ["mail"])
            msg = fake_wit.send_observer.SentMessage("m1", "a1", '{"agent":"b"}', 5, '{"x":1}', '{"protocol":"acp"}', ["b"])
            observer.on_send(fake_wit.caller(), msg)
            self.assertEqual((seen[0].sender, seen[0].to, seen[0].meta["protocol"], seen[0].payload_json),
                             ("a1", {"agent": "b"}, "acp", '{"x":1}'))
            ext.observer = lambda caller, m: 1 / 0
            observer.on_send(fake_wit.caller(), msg)  # logged, not raised
            _wit.exports = fake_wit.world("SendObserver")
            with self.assertRaises(ValueError):  # methods, and no rpc in the world
                ext.export({})
        finally:
            _wit.exports = saved

    def test_lifecycle_and_resources(self):
        ext, ran = Extension("x-r", "1", errors=ERRORS), []
        ext.on_init(lambda: ran.append("init"))
        ext.on_timer(lambda timer, tag: ran.append((timer, tag)))
        notes = ext.resource("x-r/note")
        note = Resource("n1", "first", "open", "a1", 10, metadata={"k": 1})
        notes.list(lambda call, cursor, limit: ResourcePage([note] if call.params.get("status") != "none" else [], None, 1))

        @notes.get
        def get(call: Call, id: str) -> Optional[Resource]:
            if id == "bad":
                raise InvalidParams("bad id")
            return note if id == "n1" else None

        saved = _wit.exports
        try:
            _wit.exports = fake_wit.world("Lifecycle", "Resources")
            ns = {}
            ext.export(ns)
        finally:
            _wit.exports = saved
        ns["Lifecycle"]().init()
        ns["Lifecycle"]().on_timer(7, "tick")
        self.assertEqual(ran, ["init", (7, "tick")])
        r = ns["Resources"]()
        self.assertEqual(r.kinds(), ["x-r/note"])
        page = r.list(fake_wit.caller(), "x-r/note", "{}", None, 10)
        self.assertEqual((page.items[0].updated_at, json.loads(page.items[0].metadata), page.total), (10, {"k": 1}, 1))
        self.assertIsNone(r.get(fake_wit.caller(), "x-r/note", "n2"))
        self.assertEqual(rpc_error(r.get, fake_wit.caller(), "x-r/note", "bad").code, -32602)
        ext.on_init(lambda: 1 / 0)
        with self.assertRaises(fake_wit.Err):
            ns["Lifecycle"]().init()


if __name__ == "__main__":
    unittest.main()
