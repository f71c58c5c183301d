"""clients/conformance.json, the table every client package is tested against: the command
words each limiter spec and option must produce, and the result and HTTP fields each reply
must give (no server).

    python -m unittest clients/python/tests/test_conformance.py
"""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from ratelimit_module import Log, Throttle, Window, headers
from ratelimit_module._protocol import Options, command, result

TABLE = json.loads((Path(__file__).resolve().parents[2] / "conformance.json").read_text())
KINDS = {"throttle": Throttle, "window": Window, "log": Log}


def limiters(specs: list[dict]) -> list:
    return [KINDS[spec["kind"]](**{k: v for k, v in spec.items() if k != "kind"}) for spec in specs]


class ConformanceTest(unittest.TestCase):
    def test_every_spec_builds_its_words(self) -> None:
        self.assertGreaterEqual(len(TABLE["commands"]), 10)
        for case in TABLE["commands"]:
            words = command(limiters(case["limiters"]), Options(**case["options"]))
            self.assertEqual([str(word) for word in words], case["words"], case)

    def test_every_reply_gives_its_result_and_fields(self) -> None:
        for case in TABLE["replies"]:
            specs = limiters(case["limiters"])
            got = result(case["reply"], specs, Options(**case["options"]))
            expected = dict(case["result"])
            each = expected.pop("each")
            for name, value in expected.items():
                self.assertEqual(getattr(got, name), value, f"{name} of {case}")
            self.assertEqual(len(got.each), len(each))
            for one, wanted in zip(got.each, each):
                self.assertEqual({name: getattr(one, name) for name in wanted}, wanted)
            self.assertEqual(headers(got, specs), case["fields"], case)


if __name__ == "__main__":
    unittest.main()
