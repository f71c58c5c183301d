"""clients/conformance.json, the table every client package is tested against: the command
words each limiter spec and option must produce, the result and HTTP fields each reply must
give (calls whose limits change between them too), and the leases', RL.TOP's, the shared
lists', the load reports' and the counts' words and replies (no server). Every part but
`lua`, which the nginx package's test reads.

    python -m unittest clients/python/tests/test_conformance.py
"""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from ratelimit_module import Load, Log, Slots, Throttle, Window, headers
from ratelimit_module._protocol import (
    Lease,
    Options,
    command,
    counts_command,
    counts_result,
    lease_command,
    release_command,
    renew_command,
    report_command,
    report_result,
    result,
    top_keys,
)
from ratelimit_module.concurrency import ConcurrencyLimit, LimitOptions
from ratelimit_module.lists import add_commands, remove_commands

TABLE = json.loads((Path(__file__).resolve().parents[2] / "conformance.json").read_text())
KINDS = {"throttle": Throttle, "window": Window, "log": Log, "load": Load, "lease": Slots}
# Every part this test reads; a part added to the table fails here until it is read.
PARTS = {
    "about",
    "commands",
    "replies",
    "leases",
    "lease_replies",
    "top",
    "lists",
    "load",
    "load_replies",
    "counts",
    "changed_limits",
    "concurrency",
    "lua",
}


def limiter(spec: dict):
    return KINDS[spec["kind"]](**{k: v for k, v in spec.items() if k != "kind"})


def limiters(specs: list[dict]) -> list:
    return [limiter(spec) for spec in specs]


def lease_words(case: dict) -> list:
    """The words of one of `leases`' calls."""
    key, call = case["key"], case["call"]
    if call in ("acquire", "peek"):
        return lease_command(key, case["limit"], case["lease"], case["quantity"], call == "peek")
    if call == "release":
        return release_command(key, case["id"])
    return renew_command(key, case["id"], case["lease"])


def words(built: list) -> list[str]:
    return [str(word) for word in built]


class ConformanceTest(unittest.TestCase):
    def test_every_part_of_the_table_is_read(self) -> None:
        self.assertEqual(set(TABLE), PARTS)

    def test_every_spec_builds_its_words(self) -> None:
        self.assertGreaterEqual(len(TABLE["commands"]), 10)
        for case in TABLE["commands"]:
            self.check_words(case)

    def test_every_reply_gives_its_result_and_fields(self) -> None:
        for case in TABLE["replies"]:
            self.check_reply(case)

    def test_calls_whose_limits_change_send_them_and_read_their_replies(self) -> None:
        self.assertGreaterEqual(len(TABLE["changed_limits"]), 5)
        for case in TABLE["changed_limits"]:
            for step in case["steps"]:
                self.check_words(step)
                self.check_reply(step)

    def check_words(self, case: dict) -> None:
        built = command(limiters(case["limiters"]), Options(**case["options"]))
        self.assertEqual(words(built), case["words"], case)

    def check_reply(self, case: dict) -> None:
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

    def test_leases_build_their_words_and_read_their_replies(self) -> None:
        for case in TABLE["leases"]:
            self.assertEqual(words(lease_words(case)), case["words"], case)
        for case in TABLE["lease_replies"]:
            lease = Lease.from_reply(case["reply"])
            self.assertEqual(
                (lease.allowed, lease.id, lease.result.remaining, lease.result.retry_after),
                (case["allowed"], case["id"], case["remaining"], case["retry_after"]),
            )

    def test_top_merges_every_primary(self) -> None:
        for case in TABLE["top"]:
            rows = top_keys(case["replies"], case["count"])
            self.assertEqual([[row.key, row.refusals, row.error] for row in rows], case["rows"])

    def test_the_lists_change_in_one_transaction(self) -> None:
        for case in TABLE["lists"]:
            if case["change"] == "add":
                built = add_commands(case["hash"], case["list"], case["item"], case["value"])
            else:
                built = remove_commands(case["hash"], case["list"], case["item"])
            self.assertEqual([words(one) for one in built], case["commands"])

    def test_load_reports_build_their_words_and_read_their_replies(self) -> None:
        for case in TABLE["load"]:
            built = report_command(
                case["service"], case["instance"], case["ttl"], dict(case["factors"])
            )
            self.assertEqual(words(built), case["words"])
        for case in TABLE["load_replies"]:
            standing = report_result(case["reply"])
            self.assertEqual(
                (standing.level, standing.instances, list(standing.shares)),
                (case["level"], case["instances"], case["shares"]),
            )

    def test_the_local_limit_replays_every_trace(self) -> None:
        part = TABLE["concurrency"]
        defaults = LimitOptions()
        table_defaults = dict(part["defaults"], shares=tuple(part["defaults"]["shares"]))
        self.assertEqual(table_defaults, defaults.__dict__, "the shipped defaults")
        for trace in part["traces"]:
            options = dict(trace["options"])
            if "shares" in options:
                options["shares"] = tuple(options["shares"])
            limit = ConcurrencyLimit(LimitOptions(**options))
            for step, (event, expected) in enumerate(zip(trace["events"], trace["expect"])):
                at, kind, *rest = event
                if kind == "admit":
                    decision = limit.admit(rest[0], at, *rest[1:])
                elif kind == "leave":
                    decision = limit.leave(at)
                elif kind == "level":
                    decision = limit.shed_by_level(at)
                else:
                    decision = limit.finish(rest[0], at, *rest[1:])
                got = [decision, limit.limit, limit.congested]
                self.assertEqual(got, expected, f"{trace['name']}, step {step}: {event}")

    def test_the_routes_trace_refuses_what_its_about_says_with_one_latency_for_both(self) -> None:
        import concurrency_traces

        about = next(t["about"] for t in TABLE["concurrency"]["traces"] if t["name"] == "routes")
        unnamed = concurrency_traces.routes_trace(*concurrency_traces.ROUTES, named=False)
        decisions = [
            expected[0]
            for event, expected in zip(unnamed["events"], unnamed["expect"])
            if event[1] == "admit"
        ]
        self.assertIn(f"{decisions.count(False)} of the {len(decisions)} requests", about)
        self.assertGreater(decisions.count(False), 0)

    def test_counts_build_their_words_and_read_their_replies(self) -> None:
        for case in TABLE["counts"]:
            spec = limiter(case["limiter"])
            self.assertEqual(words(counts_command(spec)), case["words"])
            got = counts_result(spec, case["reply"])
            self.assertEqual({name: getattr(got, name) for name in case["counts"]}, case["counts"])


if __name__ == "__main__":
    unittest.main()
