import pathlib
import re
import unittest

import fake_wit  # noqa: F401
import map_plugin

WIT = pathlib.Path(__file__).resolve().parents[3] / "wit"


class ContractTest(unittest.TestCase):
    def test_the_sdk_targets_the_contract_in_wit(self):
        text = (WIT / "package.wit").read_text()
        (version,) = re.findall(r"^package map-gateway:plugin@([0-9.]+);", text, re.M)
        self.assertEqual(map_plugin.CONTRACT_VERSION, version)

    def test_the_package_is_versioned_with_the_contract(self):
        text = (pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
        self.assertIn(f'\nversion = "{map_plugin.CONTRACT_VERSION}"\n', text)

    def test_no_other_file_spells_the_version(self):
        root = pathlib.Path(map_plugin.__file__).parent
        for path in root.glob("*.py"):
            if path.name != "_contract.py":
                self.assertNotIn(map_plugin.CONTRACT_VERSION, path.read_text(), path.name)


if __name__ == "__main__":
    unittest.main()
