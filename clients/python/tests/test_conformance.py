"""clients/conformance.json, the table every client package is tested against: the command
words each limiter spec and option must produce, the result and HTTP fields each reply must
give (calls whose limits change between them too), and the leases', RL.TOP's, the shared
lists', the load reports' and the counts' words and replies (no server). Every part but
`lua`, which the nginx package's test reads.

    python -m unittest clients/python/tests/test_conformance.py
"""

from __future__ import annotations

import json
import math
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


def admissions(trace: dict) -> list:
    """A local limit's trace's decisions, one a request: admitted or not."""
    return [
        expected[0]
        for event, expected in zip(trace["events"], trace["expect"])
        if event[1] == "admit"
    ]


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
                elif kind == "back":
                    decision = limit.back(at)
                elif kind == "level":
                    decision = limit.shed_by_level(at)
                else:
                    decision = limit.finish(rest[0], at, *rest[1:])
                got = [decision, limit.limit, limit.congested]
                self.assertEqual(got, expected, f"{trace['name']}, step {step}: {event}")

    def test_the_level_trace_holds_the_limit_as_its_about_says(self) -> None:
        """The trace "level": the limit stays as low as its about says, and grows as high as it
        says when the level's refusals count as the shares' (the probe then reads them as a
        load the shares hold back)."""
        import concurrency_traces

        about = next(t["about"] for t in TABLE["concurrency"]["traces"] if t["name"] == "level")

        class LevelAsShares(ConcurrencyLimit):
            def shed_by_level(self, now: int) -> None:
                super().shed_by_level(now)
                self._by_level -= 1

        def highest(trace: dict) -> float:
            return max(expected[1] for expected in trace["expect"] if expected[2])

        held = highest(concurrency_traces.level_trace(*concurrency_traces.LEVEL))
        self.assertIn(f"it stays at about {held:.0f} (", about)
        grown = highest(
            concurrency_traces.level_trace(*concurrency_traces.LEVEL, make=LevelAsShares)
        )
        self.assertIn(f"it grew to about {grown:.0f} by the level's end", about)
        self.assertGreater(grown, 2 * held)

    def test_the_one_core_trace_grows_as_its_about_says_with_and_without_the_backlog(self) -> None:
        """The trace "one core": congested, the limit stays at what its about says, and grows by
        one as often as it says when a finished request leaves no backlog behind."""
        import concurrency_traces

        about = next(t["about"] for t in TABLE["concurrency"]["traces"] if t["name"] == "one core")

        def congested_limits(trace: dict) -> tuple[float, int]:
            """The highest limit while congested, and how many times it grew by one."""
            expect = trace["expect"]
            first = next(step for step, expected in enumerate(expect) if expected[2])
            highest = max(expected[1] for expected in expect[first:] if expected[2])
            grown = sum(1 for a, b in zip(expect[first:], expect[first + 1 :]) if b[1] == a[1] + 1)
            return highest, grown

        highest, _ = congested_limits(
            concurrency_traces.run_queue_trace(*concurrency_traces.RUN_QUEUE)
        )
        self.assertIn(f"at most {highest:g} through the overload", about)
        blind = concurrency_traces.run_queue_trace(*concurrency_traces.RUN_QUEUE, behind=False)
        highest, grown = congested_limits(blind)
        self.assertIn(f"it grew by one {grown} times, to {highest:g},", about)
        self.assertGreater(grown, 3)

    def test_the_routes_trace_refuses_what_its_about_says_with_one_latency_for_both(self) -> None:
        import concurrency_traces

        about = next(t["about"] for t in TABLE["concurrency"]["traces"] if t["name"] == "routes")
        unnamed = concurrency_traces.routes_trace(*concurrency_traces.ROUTES, named=False)
        decisions = admissions(unnamed)
        self.assertIn(f"{decisions.count(False)} of the {len(decisions)} requests", about)
        self.assertGreater(decisions.count(False), 0)

    def test_one_calm_interval_ending_congestion_admits_the_queue_its_trace_says(self) -> None:
        import concurrency_traces

        spec = next(s for s in concurrency_traces.EVENT_LOOPS if s[0].endswith("calm interval"))
        (before, _), (overload, _), _ = spec[3]

        class EndedByOneCalmInterval(ConcurrencyLimit):
            """The rule before: the first calm interval while congested ends congestion."""

            def _roll(self, now: int) -> None:
                if self.congested:
                    self._calm_run = self.options.enter - 1
                super()._roll(now)

        def read(trace: dict) -> tuple:
            """When congestion ended during the overload, and the slowest request that
            finished 0.9 to 1.1 s into it (ms)."""
            ended, was = [], False
            for event, (_, _, congested) in zip(trace["events"], trace["expect"]):
                if was and not congested and event[0] < before + overload:
                    ended.append(event[0])
                was = congested
            late = [
                event[2]
                for event in trace["events"]
                if event[1] == "finish" and before + 900_000 <= event[0] <= before + 1_100_000
            ]
            return ended, round(max(late) / 1000)

        table = next(t for t in TABLE["concurrency"]["traces"] if t["name"] == spec[0])
        held, kept = read(table)
        self.assertEqual(held, [], "congestion holds to the overload's end")
        ended, queued = read(concurrency_traces.event_loop_trace(*spec, EndedByOneCalmInterval))
        self.assertEqual(len(ended), 1)
        self.assertIn(f"{(ended[0] - before) / 1e6:.2f} s into the overload", table["about"])
        self.assertIn(f"took up to {queued} ms, against {kept} ms", table["about"])
        self.assertGreater(queued, 4 * kept)

    def test_the_outage_traces_refuse_what_their_abouts_say_with_the_waits_in_flight(
        self,
    ) -> None:
        import concurrency_traces as traces

        for spec, counted, words in (
            (traces.OUTAGE, True, "begin congestion and {refused} requests be refused"),
            (traces.OUTAGE_BUSY, False, "{refused} of the {total} requests were refused"),
        ):
            decisions = admissions(traces.outage_trace(*spec, aside=False, counted=counted))
            self.assertGreater(decisions.count(False), 0)
            said = words.format(refused=decisions.count(False), total=len(decisions))
            self.assertIn(said, spec[1])
            self.assertNotIn(False, admissions(traces.outage_trace(*spec)))

    def test_the_health_check_trace_refuses_what_its_about_says_with_one_intervals_fastest(
        self,
    ) -> None:
        import concurrency_traces as traces

        from ratelimit_module import concurrency

        class EveryRequestLowersIt(concurrency._Latencies):
            """The rule before: each request lowers the no-load latency at once."""

            __slots__ = ()

            def finished(self, latency: int) -> None:
                self.window_min = min(self.window_min, latency)
                self.noload_now = min(self.noload_now, latency)

        original = concurrency._Latencies
        concurrency._Latencies = EveryRequestLowersIt
        try:
            decisions = admissions(traces.health_check_trace(*traces.HEALTH_CHECK))
        finally:
            concurrency._Latencies = original
        self.assertGreater(decisions.count(False), 0)
        self.assertIn(
            f"{decisions.count(False)} of the {len(decisions)} requests", traces.HEALTH_CHECK[1]
        )

    def test_the_busy_loop_trace_refuses_what_its_about_says_with_the_backlog_in_the_peak(
        self,
    ) -> None:
        import concurrency_traces as traces

        class BacklogInThePeak(ConcurrencyLimit):
            """The rule before: the top class's peak counts its backlog too."""

            def admit(self, priority, now: int, backlog: int = 0) -> bool:
                before = self.inflight
                admitted = super().admit(priority, now, backlog)
                noload = self.noload
                waiting = backlog / noload if backlog > 0 and noload < math.inf else 0
                self._peak = max(self._peak, before + waiting + admitted)
                return admitted

        spec = traces.BUSY_LOOP
        closed = spec[4]
        trace = traces.busy_loop_trace(*spec, make=BacklogInThePeak)
        began = next(
            at for (at, *_), (*_, congested) in zip(trace["events"], trace["expect"]) if congested
        )
        followed = [
            expected[0]
            for event, expected in zip(trace["events"], trace["expect"])
            if event[1] == "admit" and event[0] >= closed
        ]
        self.assertTrue(trace["expect"][-1][2], "congested to the trace's end")
        self.assertIn(f"congestion began {began / 1e6:.2f} s into the loop and held", spec[1])
        self.assertIn(f"refusing {followed.count(False)} of the {len(followed)} requests", spec[1])

    def test_counts_build_their_words_and_read_their_replies(self) -> None:
        for case in TABLE["counts"]:
            spec = limiter(case["limiter"])
            self.assertEqual(words(counts_command(spec)), case["words"])
            got = counts_result(spec, case["reply"])
            self.assertEqual({name: getattr(got, name) for name in case["counts"]}, case["counts"])


if __name__ == "__main__":
    unittest.main()
