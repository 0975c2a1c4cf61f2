import unittest

import fake_wit
from map_plugin import StorageError, store
from map_plugin.store import Batch, Collection, Committed, Conflict, Counter, RETRY, retry

NOTES: Collection[dict] = Collection("notes")
TEXT = Collection("text", store.TEXT)
COUNTS = Counter("counts")


class StoreTest(unittest.TestCase):
    def setUp(self):
        fake_wit.STORE.__init__()

    def test_values_round_trip_with_versions(self):
        NOTES.put("a", {"text": "héllo"})
        self.assertEqual(NOTES.get("a"), {"text": "héllo"})
        self.assertIsNone(NOTES.get("b"))
        self.assertEqual(NOTES.get_versioned("b").version, 0)
        self.assertGreater(NOTES.get_versioned("a").version, 0)
        TEXT.put("t", "plain")
        self.assertEqual(fake_wit.STORE.data[("text", "t")][0], b"plain")
        self.assertEqual(NOTES.get_many(["a", "b"]), [{"text": "héllo"}, None])
        self.assertEqual(NOTES.count(), 1)
        self.assertTrue(NOTES.delete("a"))
        self.assertFalse(NOTES.exists("a"))

    def test_pages_and_scans_follow_cursors(self):
        for i in range(5):
            NOTES.put(f"k{i}", i)
        first = NOTES.page(limit=2)
        self.assertEqual(([e.key for e in first.entries], first.next), (["k0", "k1"], "k1"))
        second = NOTES.page(after=first.next, limit=10)
        self.assertEqual((second.values(), second.next), ([2, 3, 4], None))
        self.assertEqual([e.key for e in NOTES.page(reverse=True, limit=2).entries], ["k4", "k3"])
        store.PAGE, saved = 2, store.PAGE
        try:
            self.assertEqual([e.value for e in NOTES.scan()], [0, 1, 2, 3, 4])
            self.assertEqual([e.value for e in NOTES.scan(reverse=True)], [4, 3, 2, 1, 0])
        finally:
            store.PAGE = saved

    def test_batches_commit_atomically_or_name_the_conflict(self):
        NOTES.put("b", 0)
        b = Batch().put(NOTES, "a", 1).expect_absent(NOTES, "b")
        b.add(COUNTS, "total", 2)
        outcome = b.commit()
        self.assertIsInstance(outcome, Conflict)
        self.assertEqual((outcome.index, outcome.collection, outcome.key), (1, "notes", "b"))
        self.assertIsNone(NOTES.get("a"), "nothing of a conflicting batch is applied")
        ok = Batch().expect_absent(NOTES, "a").put(NOTES, "a", 1)
        slot = ok.add(COUNTS, "total", 2)
        committed = ok.commit()
        self.assertIsInstance(committed, Committed)
        self.assertEqual(committed.counters[slot], 2)
        self.assertEqual(COUNTS.add("total", 3), 5)
        self.assertEqual(COUNTS.get("total"), 5)
        self.assertEqual(list(COUNTS.scan()), [("total", 5)])
        v = NOTES.get_versioned("a")
        self.assertIsInstance(Batch().expect_version(NOTES, "a", v.version + 1).delete(NOTES, "a").commit(), Conflict)
        self.assertIsInstance(Batch().expect_value(NOTES, "a", 1).delete(NOTES, "a").commit(), Committed)
        with self.assertRaises(StorageError) as ctx:
            Batch().expect_absent(NOTES, "b").put(NOTES, "x", 1).apply()
        self.assertTrue(ctx.exception.retryable)
        self.assertEqual(Batch().commit(), Committed(0, []))

    def test_retry_runs_until_committed(self):
        runs = []

        def bump():
            runs.append(1)
            current = NOTES.get_versioned("n")
            if len(runs) == 1:
                NOTES.put("n", 100)  # a concurrent writer
            b = Batch().expect_version(NOTES, "n", current.version).put(NOTES, "n", (current.value or 0) + 1)
            outcome = b.commit()
            return outcome if isinstance(outcome, Conflict) else NOTES.get("n")

        self.assertEqual(retry(bump), 101)
        self.assertEqual(len(runs), 2)
        with self.assertRaises(StorageError):
            retry(lambda: RETRY, attempts=3)

    def test_store_errors_become_storage_errors(self):
        fake_wit.STORE.fail = fake_wit.store.StoreError_Unavailable("db down")
        with self.assertRaises(StorageError) as ctx:
            NOTES.get("a")
        self.assertTrue(ctx.exception.retryable and ctx.exception.code is None)
        self.assertIn("db down", ctx.exception.message)
        fake_wit.STORE.fail = fake_wit.store.StoreError_Invalid("too big")
        with self.assertRaises(StorageError) as ctx:
            NOTES.put("a", 1)
        self.assertFalse(ctx.exception.retryable)
        fake_wit.STORE.data[("notes", "bad")] = (b"{", 1)
        with self.assertRaises(StorageError):
            NOTES.get("bad")


if __name__ == "__main__":
    unittest.main()
