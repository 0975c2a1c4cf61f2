import json
import re
import unittest

import fake_wit
from map_plugin import RpcError, config, events, ids, metrics, router, timers


class HostTest(unittest.TestCase):
    def test_events_are_json_and_refusals_are_logged(self):
        self.assertTrue(events.emit("t.put", {"itemId": "é"}))
        self.assertEqual(fake_wit.EMITTED[-1][:2], ("t.put", '{"itemId":"é"}'))
        self.assertTrue(events.emit_for("t.put", {}, ["a1"], "t.canSee"))
        self.assertEqual(fake_wit.EMITTED[-1][2], fake_wit.events.Audience(["a1"], "t.canSee"))
        self.assertFalse(events.emit("t.put", [1]))
        self.assertFalse(events.emit("t.put", {"x": object()}))
        self.assertIn("could not emit t.put", fake_wit.LOGGED[-1][1])

    def test_router_calls_raise_the_callees_error(self):
        self.assertEqual(router.call("mail/create", {"a": 1}), {"ok": True})
        self.assertEqual(fake_wit.ROUTED[-1], ("mail/create", '{"a":1}'))
        with self.assertRaises(RpcError) as ctx:
            router.call("map/send")
        self.assertEqual((ctx.exception.code, ctx.exception.details), (-32601, {"category": "protocol"}))
        self.assertEqual(router.send({"agent": "a"}, {"x": 1})["messageId"], "m1")
        self.assertEqual(router.connected_since(["here", "gone"]), [1, None])
        self.assertEqual(router.agent("a1"), {"id": "a1"})
        self.assertIsNone(router.agent("a2"))

    def test_config_metrics_timers(self):
        fake_wit.CONFIG["text"] = json.dumps({"webhook": "http://x"})
        config._cache.clear()
        self.assertEqual(config.get("webhook"), "http://x")
        self.assertEqual(config.get("absent", 3), 3)
        fake_wit.CONFIG["text"] = "[]"
        config._cache.clear()
        self.assertEqual(config.all(), {})
        metrics.count("t_total", labels={"kind": "a"})
        self.assertEqual(fake_wit.COUNTED[-1], ("t_total", [("kind", "a")], 1))
        metrics.count("Bad")  # refused: logged, not raised
        self.assertIn("metric Bad refused", fake_wit.LOGGED[-1][1])
        self.assertEqual(timers.schedule(1000, "tick"), 7)
        with self.assertRaises(RpcError) as ctx:
            timers.schedule(10**10)
        self.assertTrue(ctx.exception.retryable)
        self.assertTrue(timers.cancel(7))

    def test_ids_are_ulids_in_order(self):
        made = [ids.new_id("item") for _ in range(50)]
        self.assertTrue(all(re.fullmatch(r"item-[0-9A-HJKMNP-TV-Z]{26}", i) for i in made))
        self.assertEqual(made, sorted(made))
        self.assertEqual(len(set(made)), 50)


if __name__ == "__main__":
    unittest.main()
