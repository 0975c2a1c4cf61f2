import unittest
from dataclasses import dataclass, field
from typing import Annotated, Any, Dict, List, Literal, Optional, TypedDict

import fake_wit  # noqa: F401  (the bindings, before the SDK)
from map_plugin import InvalidParams, Range, json_key
from map_plugin.params import decode, encode


@dataclass
class Inner:
    name: str


@dataclass
class Params:
    item_id: str
    limit: Annotated[int, Range(1, 200)] = 50
    sender: Optional[str] = json_key("from", default=None)
    kind: Literal["a", "b"] = "a"
    tags: List[str] = field(default_factory=list)
    inner: Optional[Inner] = None
    ratio: float = 1.0
    extra: Dict[str, int] = field(default_factory=dict)
    anything: Any = None


class Checked(TypedDict, total=False):
    text: str


@dataclass
class Positive:
    n: int

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise ValueError("`n` must be positive")


def refused(hint, value):
    with unittest.TestCase().assertRaises(InvalidParams) as ctx:
        decode(hint, value)
    return ctx.exception.message


class ParamsTest(unittest.TestCase):
    def test_fields_read_their_json_keys_and_defaults(self):
        p = decode(Params, {"itemId": "i1", "from": "bob", "tags": ["x"], "inner": {"name": "n"}, "ratio": 2,
                            "extra": {"a": 1}, "unknown": True})
        self.assertEqual((p.item_id, p.limit, p.sender, p.tags, p.inner.name, p.ratio), ("i1", 50, "bob", ["x"], "n", 2.0))
        self.assertEqual(encode(p)["itemId"], "i1")
        self.assertEqual(encode(p)["from"], "bob")

    def test_bad_params_name_the_field(self):
        self.assertEqual(refused(Params, {}), "missing field `itemId`")
        self.assertEqual(refused(Params, []), "params must be an object")
        self.assertEqual(refused(Params, {"itemId": 5}), "`itemId` must be a string")
        for bad in (0, 201):
            self.assertIn("from 1 to 200", refused(Params, {"itemId": "i", "limit": bad}))
        for bad in (1.5, "3", True, None):
            self.assertEqual(refused(Params, {"itemId": "i", "limit": bad}), "`limit` must be an integer")
        self.assertIn("one of", refused(Params, {"itemId": "i", "kind": "c"}))
        self.assertEqual(refused(Params, {"itemId": "i", "tags": ["x", 1]}), "`tags[1]` must be a string")
        self.assertEqual(refused(Params, {"itemId": "i", "inner": {}}), "missing field `inner.name`")
        self.assertEqual(refused(Params, {"itemId": "i", "extra": {"a": "1"}}), "`extra.a` must be an integer")
        self.assertEqual(refused(Params, {"itemId": "i", "ratio": False}), "`ratio` must be a number")

    def test_typeddicts_and_post_init_checks(self):
        self.assertEqual(decode(Checked, {"text": "t", "x": 1}), {"text": "t"})
        self.assertEqual(decode(Checked, {}), {})
        self.assertEqual(refused(Checked, {"text": 1}), "`text` must be a string")
        self.assertEqual(refused(Positive, {"n": -1}), "`n` must be positive")


if __name__ == "__main__":
    unittest.main()
