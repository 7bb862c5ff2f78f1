"""Unit tests of the Python SDK outside hvsim: output goes to a local file."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hvsim_sdk as sdk  # noqa: E402


def never_called():
    sdk.unreachable("py test: never reached")


class SdkTest(unittest.TestCase):
    def test_lines_registration_and_shapes(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "sdk.jsonl")
            sdk.set_output(out)
            sdk.init(__file__)
            sdk.setup_complete({"nodes": 3})
            sdk.always(1 + 1 == 2, "py test: arithmetic")
            sdk.sometimes(False, "py test: sometimes", {"why": "testing"})
            sdk.always_greater_than(3, 5, "py test: three above five")
            sdk.sometimes_all({"a": True, "b": False}, "py test: all")
            sdk.stop_faults(2.5)
            sdk.send_event("py_test_event", {"n": 1})
            self.assertIn(sdk.random_choice([1, 2, 3]), [1, 2, 3])
            self.assertIsNone(sdk.random_choice([]))
            # Outside hvsim a buggify site never fires.
            self.assertFalse(sdk.buggify("python test: site"))
            with open(out) as f:
                lines = [json.loads(l) for l in f]

        self.assertEqual(lines[0]["antithesis_sdk"]["language"]["name"], "Python")
        regs = [l["antithesis_assert"] for l in lines if "antithesis_assert" in l and not l["antithesis_assert"]["hit"]]
        self.assertIn("py test: never reached", [r["message"] for r in regs])
        self.assertIn("SometimesAll", [r["display_type"] for r in regs])
        self.assertTrue(any(l.get("antithesis_setup", {}).get("status") == "complete" for l in lines))

        def hit(message):
            return next(l["antithesis_assert"] for l in lines
                        if l.get("antithesis_assert", {}).get("message") == message and l["antithesis_assert"]["hit"])

        a = hit("py test: arithmetic")
        self.assertEqual((a["condition"], a["display_type"], a["assert_type"]), (True, "Always", "always"))
        self.assertTrue(a["location"]["file"].endswith("test_hvsim_sdk.py"))
        self.assertEqual(a["location"]["function"], "test_lines_registration_and_shapes")
        self.assertEqual(hit("py test: sometimes")["details"]["why"], "testing")
        n = hit("py test: three above five")
        self.assertEqual((n["condition"], n["details"]["left"]), (False, 3))
        self.assertEqual(n["location"]["function"], "test_lines_registration_and_shapes")
        self.assertTrue(any(l.get("antithesis_guidance", {}).get("guidance_type") == "numeric" for l in lines))
        self.assertFalse(hit("py test: all")["condition"])
        self.assertEqual(lines[-2:], [{"hvsim_faults": {"pause": 2.5}}, {"py_test_event": {"n": 1}}])


if __name__ == "__main__":
    unittest.main()
