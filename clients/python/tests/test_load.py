"""Load shedding against a live server (REDIS_URL): the shedders report their own signals
and shed by the level the server answers, per priority, in shadow mode too, with their
metrics; a report that fails leaves level 0 once its time to live ends; a `Load` gate in a
check sheds with nothing charged. The instance's own limit sheds by priority once a queue
stands, with the server answering or frozen, and the defaults shed nothing from a healthy
service. The signals read the process's CPU and memory.

    python -m unittest clients/python/tests/test_load.py
"""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
import threading
import time
import unittest
import uuid
from pathlib import Path

import redis
import redis.asyncio
from prometheus_client import CollectorRegistry

from ratelimit_module import AsyncLoadShedder, Load, LoadShedder, RateLimiter, Throttle
from ratelimit_module._protocol import PRIORITIES, report_command, report_result
from ratelimit_module.concurrency import CALM_INTERVALS_TO_END, ConcurrencyLimit
from ratelimit_module.load import LoadSheddingWSGI, priority_of
from ratelimit_module.metrics import PrometheusMetrics
from ratelimit_module.signals import ROUTES_KEPT, CpuMeter, Signals, memory_share

URL = os.environ["REDIS_URL"]

# At cpu 0.5: every sheddable_plus and sheddable request shed; at 0.9, half the critical.
POLICY = [
    "HOLD", "0", "LEVEL", "cpu", "0.5", "SHARES", "1", "1", "0", "0",
    "LEVEL", "cpu", "0.9", "SHARES", "1", "0.5", "0", "0",
]  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def signals(cpu: float) -> Signals:
    """Signals whose CPU is `cpu` and memory 0.1, whatever the machine does."""
    return Signals(cpu=lambda: cpu, memory=lambda: 0.1, load=lambda: 0.5)


class ProtocolTest(unittest.TestCase):
    def test_a_report_is_one_command_and_its_reply_the_standing(self) -> None:
        words = report_command("svc", "web-1", 3.0, {"cpu": 0.25, "inflight": 3, "odd": -1})
        expected = ["RL.LOAD.REPORT", "svc", "web-1", 3000]
        expected += ["cpu", "0.25", "inflight", "3", "odd", "0"]
        self.assertEqual(words, expected)
        standing = report_result([2, 3, b"1", b"1", b"0.5", b"0"])
        self.assertEqual((standing.level, standing.instances), (2, 3))
        self.assertEqual(standing.share("sheddable_plus"), 0.5)
        self.assertEqual(standing.share("nonsense"), 0.0, "an unknown class is sheddable")
        self.assertEqual(priority_of(" Critical "), "critical")
        self.assertEqual(priority_of(None), "sheddable")


class SyncShedderTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = redis.Redis.from_url(URL)
        self.service = f"py:load:{uuid.uuid4().hex}"
        self.client.execute_command("RL.LOAD.POLICY", self.service, *POLICY)

    def tearDown(self) -> None:
        self.client.close()

    def test_the_applications_own_factors_join_the_report(self) -> None:
        self.client.execute_command(
            "RL.LOAD.POLICY", self.service, "HOLD", "0", "FACTOR", "backlog", "SUM",
            "LEVEL", "backlog", "100", "SHARES", "1", "1", "0", "0",
        )  # fmt: skip
        backlog = [60]
        shedders = [
            LoadShedder(
                self.client, self.service, instance=name, signals=signals(0.1),
                factors=lambda: {"backlog": backlog[0]},
            )
            for name in ("a", "b")
        ]  # fmt: skip
        self.assertEqual(shedders[0].report().level, 0, "60 waiting")
        self.assertEqual(shedders[1].report().level, 1, "120 waiting over the fleet")
        # A callback that fails costs its factors, never the report.
        backlog[0] = "not a number"
        self.assertEqual(shedders[1].report().level, 0, "b's backlog left out: 60 waiting")

    def test_it_sheds_by_priority_the_level_its_report_answers(self) -> None:
        registry = CollectorRegistry()
        metrics = PrometheusMetrics(registry)
        shedder = LoadShedder(
            self.client, self.service, instance="a", signals=signals(0.8), metrics=metrics
        )
        self.assertEqual(shedder.standing.level, 0, "before any report")
        standing = shedder.report()
        self.assertEqual((standing.level, standing.shares), (1, (1.0, 1.0, 0.0, 0.0)))
        self.assertTrue(shedder.admit("critical_plus"))
        self.assertTrue(shedder.admit("critical"))
        self.assertFalse(shedder.admit("sheddable_plus"))
        self.assertFalse(shedder.admit(None), "no priority: sheddable")
        level = registry.get_sample_value("ratelimit_load_level", {"service": self.service})
        self.assertEqual(level, 1)
        shed = {"service": self.service, "priority": "sheddable", "outcome": "shed"}
        self.assertEqual(registry.get_sample_value("ratelimit_load_decisions_total", shed), 1)
        # Every instance reporting to the key counts: two more at 1.0 make the mean 0.93,
        # past 0.9 (level 2 sheds half the critical).
        LoadShedder(self.client, self.service, instance="b", signals=signals(1.0)).report()
        LoadShedder(self.client, self.service, instance="c", signals=signals(1.0)).report()
        self.assertEqual(shedder.report().level, 2)
        draws = [0.25, 0.75]
        shedder.draw = draws.pop
        self.assertFalse(shedder.admit("critical"), "a draw of 0.75 against a share of 0.5")
        self.assertTrue(shedder.admit("critical"), "a draw of 0.25")

    def test_what_the_level_sheds_holds_the_limits_congestion(self) -> None:
        clock = Clock()
        shedder = LoadShedder(self.client, self.service, signals=signals(0.8), clock=clock)
        flood(shedder, clock)
        self.assertTrue(shedder.limit.congested)
        while shedder.limit.inflight:
            shedder.limit.finish(5_000, int(clock.now * 1e6))
        self.assertEqual(shedder.report().shares, (1.0, 1.0, 0.0, 0.0))
        # An interval in which the level refuses ten requests and leaves the limit one, fast,
        # under half the limit: the overload goes on, and congestion holds.
        clock.now += 0.1
        ticket = shedder.admit("critical")
        clock.now += 0.005
        shedder.finished(ticket, 200)
        for _ in range(10):
            self.assertIsNone(shedder.admit("sheddable"))
        clock.now += 0.1
        self.assertIsNotNone(shedder.admit("critical_plus"))
        self.assertTrue(shedder.limit.congested, "ten refused by the level, one admitted")
        # Intervals the level refuses nothing of: congestion ends at the fourth in a row.
        for calm in range(1, CALM_INTERVALS_TO_END + 1):
            self.assertTrue(shedder.limit.congested, f"{calm - 1} calm intervals in a row")
            shedder.finished(shedder.admit("critical_plus"), 200)
            clock.now += 0.1
        shedder.admit("critical_plus")
        self.assertFalse(shedder.limit.congested, "nothing refused, under half the limit")

    def test_in_shadow_mode_nothing_is_shed_and_what_would_be_is_counted(self) -> None:
        registry = CollectorRegistry()
        shedder = LoadShedder(
            self.client,
            self.service,
            signals=signals(0.7),
            shadow=True,
            metrics=PrometheusMetrics(registry),
        )
        shedder.report()
        self.assertTrue(shedder.admit("sheddable"))
        labels = {"service": self.service, "priority": "sheddable", "outcome": "shadow"}
        self.assertEqual(registry.get_sample_value("ratelimit_load_decisions_total", labels), 1)

    def test_a_level_nobody_reports_any_more_sheds_nothing(self) -> None:
        clock = Clock()
        shedder = LoadShedder(
            self.client, self.service, signals=signals(0.95), interval=1.0, clock=clock
        )
        shedder.report()
        self.assertEqual(shedder.standing.level, 2)
        # The server stops answering: the level holds for the report's ttl (3 intervals).
        shedder.call.client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        self.assertIsNone(shedder.report())
        clock.now = 2.9
        self.assertEqual(shedder.standing.level, 2)
        clock.now = 3.1
        self.assertEqual(shedder.standing.level, 0)
        self.assertTrue(shedder.admit("sheddable"))

    def test_the_thread_reports_its_own_signals_every_interval(self) -> None:
        shedder = LoadShedder(self.client, self.service, instance="auto", interval=0.05).start()
        try:
            for _ in range(100):
                status = self.client.execute_command("RL.LOAD.STATUS", self.service)
                factors = dict(zip(status[11][::2], status[11][1::2]))
                if status[5] == 1 and b"cpu" in factors:
                    break
                asyncio.run(asyncio.sleep(0.05))
            self.assertEqual(status[5], 1, status)
            self.assertIn(b"cpu", factors)
            self.assertIn(b"memory", factors)
            self.assertIn(b"inflight", factors)
        finally:
            shedder.stop()

    def test_the_wsgi_middleware_answers_503_to_what_it_sheds(self) -> None:
        shedder = LoadShedder(self.client, self.service, signals=signals(0.6), interval=60)
        shedder.report()

        def app(environ: dict, start_response) -> list:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]

        wrapped = LoadSheddingWSGI(app, shedder)
        try:
            cases = [("critical", "200 OK"), ("sheddable", "503 Service Unavailable")]
            for priority, expected in cases:
                seen: list = []

                def start_response(status: str, headers: list, *rest, seen: list = seen) -> None:
                    seen.append((status, headers))

                body = wrapped({"HTTP_X_PRIORITY": priority}, start_response)
                self.assertEqual(seen[0][0], expected)
                if expected.startswith("503"):
                    self.assertIn(("Retry-After", "60"), seen[0][1])
                    self.assertEqual(body, [b"Service Unavailable"])
        finally:
            shedder.stop()

    def test_a_load_gate_in_a_check_sheds_with_nothing_charged(self) -> None:
        LoadShedder(self.client, self.service, signals=signals(0.6)).report()
        limiter = RateLimiter(self.client)
        tag = self.service
        user = Throttle(f"{{{tag}}}:user", 4, 1, 60)
        gate = f"{{{tag}}}:gate"
        self.client.execute_command("RL.LOAD.POLICY", gate, *POLICY)
        self.client.execute_command("RL.LOAD.REPORT", gate, "a", 60000, "cpu", "0.6")
        admitted = limiter.check([Load(gate, "critical"), user])
        self.assertTrue(admitted.allowed)
        self.assertEqual((admitted.shed_level, admitted.remaining), (0, 4))
        shed = limiter.check([Load(gate, "sheddable"), user])
        self.assertFalse(shed.allowed)
        self.assertEqual((shed.shed_level, shed.remaining), (1, 4), "nothing charged")
        self.assertEqual(len(shed.each), 1, "the gate has no fields of its own")


class AsyncShedderTest(unittest.IsolatedAsyncioTestCase):
    async def test_the_task_reports_and_sheds_by_the_answer(self) -> None:
        client = redis.asyncio.Redis.from_url(URL)
        service = f"py:aload:{uuid.uuid4().hex}"
        await client.execute_command("RL.LOAD.POLICY", service, *POLICY)
        shedder = AsyncLoadShedder(client, service, signals=signals(0.95), interval=0.05)
        shedder.start()
        try:
            for _ in range(100):
                if shedder.standing.level:
                    break
                await asyncio.sleep(0.05)
            self.assertEqual(shedder.standing.level, 2)
            self.assertTrue(shedder.admit("critical_plus"))
            self.assertFalse(shedder.admit("sheddable_plus"))
        finally:
            await shedder.stop()
            await client.aclose()


class LoopWatchTest(unittest.IsolatedAsyncioTestCase):
    async def test_a_request_waited_since_the_loops_turn_that_made_its_task_began(self) -> None:
        from ratelimit_module.load import LoopWatch

        clock = Clock()
        watch = LoopWatch(clock)
        watch.waited(clock())  # watches the running loop
        loop = asyncio.get_running_loop()
        waits: list[float] = []

        async def request() -> None:
            waits.append(watch.waited(clock()))

        def busy_then_request() -> None:
            clock.now += 0.05  # what ran before it in its turn took 50 ms
            loop.create_task(request())

        loop.call_soon(busy_then_request)
        for _ in range(100):
            if waits:
                break
            await asyncio.sleep(0)
        self.assertAlmostEqual(waits[0], 0.05)
        # A task made in a turn with nothing before it has not waited.
        await loop.create_task(request())
        self.assertEqual(waits[1], 0.0)
        # A task the watch did not see made (a factory set after it) falls back to the time
        # since the loop was last idle.
        loop.set_task_factory(None)
        clock.now += 0.01
        await loop.create_task(request())
        self.assertGreaterEqual(waits[2], 0.0)
        self.assertLessEqual(waits[2], 0.06 + 1e-9)


class SignalsTest(unittest.TestCase):
    def test_cpu_is_the_share_of_what_the_instance_may_use(self) -> None:
        clock, used = Clock(), [10.0]
        # No quota: the process's CPU over one core, capped at 1.
        with tempfile.TemporaryDirectory() as empty:
            meter = CpuMeter(cgroup=empty, clock=clock, process=lambda: used[0])
            self.assertIsNone(meter.read(), "the first reading has nothing to compare")
            clock.now, used[0] = 2.0, 11.5
            self.assertAlmostEqual(meter.read(), 0.75)
            clock.now, used[0] = 3.0, 13.5
            self.assertEqual(meter.read(), 1.0, "two cores' worth in a second: capped")
        # A quota of two cores: the cgroup's use over the quota, whatever the process uses.
        with tempfile.TemporaryDirectory() as cgroup:
            write = lambda name, text: Path(cgroup, name).write_text(text)  # noqa: E731
            write("cpu.max", "200000 100000\n")
            write("cpu.stat", "usage_usec 5000000\nuser_usec 1\n")
            meter = CpuMeter(cgroup=cgroup, clock=clock, process=lambda: 0.0)
            self.assertIsNone(meter.read())
            clock.now += 2.0
            write("cpu.stat", "usage_usec 8000000\nuser_usec 1\n")
            self.assertAlmostEqual(meter.read(), 0.75)
            # The quota lifted: the process's own from then on.
            write("cpu.max", "max 100000\n")
            self.assertIsNone(meter.read(), "a new baseline")

    def test_memory_is_the_share_of_what_is_allowed(self) -> None:
        with tempfile.TemporaryDirectory() as cgroup:
            Path(cgroup, "memory.current").write_text("268435456\n")
            Path(cgroup, "memory.max").write_text("1073741824\n")
            self.assertEqual(memory_share(cgroup), 0.25)
            Path(cgroup, "memory.max").write_text("max\n")
            proc = Path(cgroup, "proc")
            proc.mkdir()
            (proc / "meminfo").write_text(
                "MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    400 kB\n"
            )
            self.assertEqual(memory_share(cgroup, str(proc)), 0.6)

    def test_requests_give_latency_errors_and_the_windows_counts(self) -> None:
        clock = Clock()
        signals = Signals(clock=clock, cpu=lambda: None, memory=lambda: None, load=lambda: 0.25)
        signals.started()
        signals.started()
        self.assertEqual(signals.sample()["inflight"], 2.0)
        clock.now = 10.2
        signals.done(0.020, 200)
        signals.done(0.060, 503)
        clock.now = 11.5
        signals.started()
        signals.done(0.010, 200)
        sample = signals.sample()
        self.assertEqual(sample["inflight"], 0.0)
        self.assertEqual(sample["load"], 0.25)
        self.assertAlmostEqual(sample["latency"], 30.0)
        self.assertAlmostEqual(sample["errors"], 1 / 3)
        self.assertEqual((sample["requests"], sample["successes"]), (3.0, 2.0))
        # No second was busy: the throughput measured the demand, not the capacity, and
        # Sentinel's check has nothing to read.
        self.assertNotIn("max_rps", sample)
        self.assertNotIn("min_rt", sample)
        # A busy second (the instance's limit congested) counts.
        clock.now = 12.3
        signals.started()
        signals.started()
        signals.done(0.040, 200, busy=True)
        signals.done(0.030, 200, busy=True)
        sample = signals.sample()
        self.assertEqual((sample["max_rps"], sample["min_rt"]), (2.0, 30.0))
        # The interval starts again; the window keeps its seconds until they age out.
        clock.now = 25.0
        later = signals.sample()
        self.assertNotIn("latency", later)
        self.assertEqual(later["requests"], 0.0)

    def test_min_rt_is_the_no_load_latency_of_the_mix_not_of_its_fastest_route(self) -> None:
        # A health check of 1 ms polled beside work of 30 ms or more: the pipe is what the
        # work holds. The least latency of all would read it as a thirtieth of that, and a
        # service at its capacity as thirty times over it (`bbr`).
        clock = Clock()
        signals = Signals(clock=clock, cpu=lambda: None, memory=lambda: None, load=lambda: 0.0)
        clock.now = 3.5
        signals.done(0.001, 200, busy=True, route="GET /health")
        for latency in (0.040, 0.030, 0.050):
            signals.done(latency, 200, busy=True, route="GET /work")
        clock.now = 4.5
        signals.done(0.035, 200, busy=True, route="GET /work")
        sample = signals.sample()
        self.assertEqual(sample["max_rps"], 4.0)
        # The work's least (30 ms) for its four requests, the check's (1 ms) for its one.
        self.assertAlmostEqual(sample["min_rt"], (4 * 30 + 1 * 1) / 5)
        # A second not busy counts for neither.
        clock.now = 5.5
        signals.done(0.0005, 200, route="GET /health")
        self.assertAlmostEqual(signals.sample()["min_rt"], (4 * 30 + 1 * 1) / 5)

    def test_the_shedder_tells_the_signals_each_requests_route(self) -> None:
        clock = Clock()
        clock.now = 7.5
        service = f"py:routes:{uuid.uuid4().hex}"
        shedder = LoadShedder(redis.Redis.from_url(URL), service, clock=clock)
        shedder.limit.congested = True  # busy seconds: what min_rt reads
        for route, latency in (("GET /health", 0.001), ("GET /work", 0.030)):
            ticket = shedder.admit("critical_plus")
            clock.now += latency
            shedder.finished(ticket, 200, route=route)
        # Each route's least latency, weighted by its one request (unnamed, the least: 1 ms).
        self.assertAlmostEqual(shedder.signals.sample()["min_rt"], (1 + 30) / 2, places=6)

    def test_a_second_keeps_so_many_routes_apart_and_the_rest_together(self) -> None:
        clock = Clock()
        signals = Signals(clock=clock, cpu=lambda: None, memory=lambda: None, load=lambda: 0.0)
        clock.now = 1.5
        for route in range(ROUTES_KEPT):
            signals.done(0.010, 200, busy=True, route=route)
        # Past them, two routes share an entry: the least of the two for both requests.
        signals.done(0.020, 200, busy=True, route="late")
        signals.done(0.060, 200, busy=True, route="later")
        sample = signals.sample()
        self.assertAlmostEqual(sample["min_rt"], (ROUTES_KEPT * 10 + 2 * 20) / (ROUTES_KEPT + 2))

    def test_the_packages_own_answer_leaves_the_local_limit_unmeasured(self) -> None:
        clock = Clock()
        shedder = LoadShedder(redis.Redis.from_url(URL), f"py:own:{uuid.uuid4().hex}", clock=clock)
        # A request the package answered after a failing server's 1 s timeout: it leaves the
        # requests in flight, and its second is no latency of the service's.
        ticket = shedder.admit("critical")
        self.assertEqual(shedder.limit.inflight, 1)
        clock.now += 1.0
        shedder.finished(ticket, 503, own=True)
        self.assertEqual(shedder.limit.inflight, 0)
        self.assertEqual(shedder.limit.noload, math.inf)
        # The service's own answer is its latency.
        ticket = shedder.admit("critical")
        clock.now += 0.002
        shedder.finished(ticket, 200)
        self.assertEqual(shedder.limit.noload, 2_000)

    def test_a_limits_refusal_and_the_packages_own_answers_say_nothing_of_the_service(
        self,
    ) -> None:
        from ratelimit_module import AsyncRateLimiter
        from ratelimit_module._answered import watching

        clock = Clock()
        shedder = LoadShedder(
            redis.Redis.from_url(URL), f"py:own:{uuid.uuid4().hex}", clock=clock, limit=False
        )
        shedder.signals = Signals(clock=clock, cpu=lambda: None, memory=lambda: None)
        # A 429 (whoever made it), and a 503 or 500 the package made by its policy: each
        # leaves the requests in flight, and nothing else counts it.
        for status, own in ((429, False), (503, True), (500, True)):
            shedder.finished(shedder.admit("critical"), status, own)
        # The service's own 503 and 200 count.
        shedder.finished(shedder.admit("critical"), 503)
        shedder.finished(shedder.admit("critical"), 200)
        sample = shedder.signals.sample()
        self.assertEqual(sample["inflight"], 0.0)
        self.assertEqual((sample["requests"], sample["successes"]), (2.0, 1.0))
        self.assertAlmostEqual(sample["errors"], 0.5)

        # The failure policy marks the request it answers: under "deny" and "raise", not
        # under "allow".
        async def marked(on_error: str) -> bool:
            from test_client import BlackHole

            frozen = BlackHole()
            try:
                limiter = AsyncRateLimiter(
                    redis.asyncio.Redis(port=frozen.port), on_error=on_error, timeout=0.05
                )
                with watching() as request:
                    try:
                        await limiter.check([Throttle("k", 1, 1, 1)])
                    except Exception:  # noqa: BLE001 ("raise")
                        pass
                return request.own
            finally:
                frozen.close()

        self.assertEqual(
            [asyncio.run(marked(policy)) for policy in ("deny", "raise", "allow")],
            [True, True, False],
        )


def flood(shedder, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    """A no-load latency of 5 ms, then a queue that stands: 20 requests in flight, and every
    one of the next interval taking 100 ms (over four times the target of 10 ms)."""
    ticket = shedder.admit("critical")
    clock.now += 0.005
    shedder.finished(ticket, 200)
    tickets = [shedder.admit("critical") for _ in range(20)]
    assert all(tickets), "under the limit of 20, everything goes"
    clock.now += 0.1
    for ticket in tickets[:10]:
        shedder.finished(ticket, 200)
    clock.now += 0.1
    shedder.finished(tickets[10], 200)


class LocalLimitTest(unittest.TestCase):
    """The instance's own limit in the shedder: no server call, priorities in order."""

    def test_defaults_shed_nothing_from_a_healthy_service(self) -> None:
        client = redis.Redis.from_url(URL)
        service = f"py:healthy:{uuid.uuid4().hex}"
        try:
            # The documented setup, every option at its default, the default policy: the
            # process's real signals reported, requests of every class through it.
            shedder = LoadShedder(client, service)
            self.assertIsNotNone(shedder.report())
            refused = 0
            for number in range(400):
                ticket = shedder.admit(PRIORITIES[number % 4])
                refused += ticket is None
                if ticket is not None:
                    shedder.finished(ticket, 200)
                if number % 100 == 0:
                    self.assertEqual(shedder.report().level, 0)
            self.assertEqual(refused, 0)
            self.assertFalse(shedder.limit.congested)
        finally:
            client.close()

    def test_a_standing_queue_sheds_the_least_important_first(self) -> None:
        clock = Clock()
        client = redis.Redis.from_url(URL)
        shedder = LoadShedder(client, f"py:flood:{uuid.uuid4().hex}", clock=clock)
        try:
            flood(shedder, clock)
            limit = shedder.limit
            self.assertTrue(limit.congested)
            # Cut to the peak times target / fastest, at least 0.2: 20 * 0.2 = 4; 9 in flight.
            self.assertEqual(limit.limit, 4.0)
            self.assertEqual(limit.inflight, 9)
            for priority in PRIORITIES:
                self.assertIsNone(shedder.admit(priority), f"{priority}: 9 in flight of 4")
        finally:
            client.close()

    def test_the_top_class_counts_what_is_in_flight_and_the_others_the_backlog_too(self) -> None:
        clock = Clock()
        client = redis.Redis.from_url(URL)
        shedder = LoadShedder(client, f"py:backlog:{uuid.uuid4().hex}", clock=clock)
        try:
            flood(shedder, clock)
            limit, now = shedder.limit, int(clock.now * 1e6)
            for _ in range(7):
                limit.finish(100_000, now)
            self.assertEqual((limit.limit, limit.inflight, limit.congested), (4.0, 2, True))
            # A wait of 50 ms before the decision: ten no-load latencies' worth of work ahead.
            self.assertTrue(limit.admit("critical_plus", now, 50_000), "2 in flight of 4")
            self.assertFalse(limit.admit("critical", now, 50_000), "3 + 10 of 2.4")
            self.assertFalse(limit.admit("critical", now, 0), "3 of 2.4")
            self.assertTrue(limit.admit("critical_plus", now, 50_000), "3 in flight of 4")
            self.assertFalse(limit.admit("critical_plus", now, 0), "4 in flight of 4")
        finally:
            client.close()

    def test_a_healthy_load_the_shares_hold_back_after_an_overload_ends_congestion(self) -> None:
        # Every request sheddable (no priority header), 50 ms each. A 1 s overload at twice
        # the arrivals queues (latency four times over while 60 are in flight), then a steady
        # request a millisecond: 50 in flight, healthy. Its share (0.2 of the limit) refuses
        # most of it at first; the limit probes for room and congestion ends.
        import heapq

        limit, queue, now, overload_ends = ConcurrencyLimit(), [], 0, 3_000_000
        ended, refused_after = None, 0
        while now < 6_000_000:
            while queue and queue[0][0] <= now:
                at, latency = heapq.heappop(queue)
                limit.finish(latency, at)
            overloaded = 1_000_000 <= now < overload_ends
            if limit.admit("sheddable", now):
                latency = 200_000 if overloaded and limit.inflight > 60 else 50_000
                heapq.heappush(queue, (now + latency, latency))
            elif now >= overload_ends:
                refused_after += 1
            if now >= overload_ends and ended is None and not limit.congested:
                ended = now
            now += 500 if overloaded else 1_000
        self.assertEqual(limit.congestions, 1)
        self.assertIsNotNone(ended, "congestion ended")
        self.assertLessEqual(ended - overload_ends, 1_000_000)
        # The shares refuse about half of the load until the probe's room grows past it; then
        # congestion ends at the fourth calm interval in a row, refusing some more of it
        # in the three before (492: congestion began 0.3 s into the overload, at once when the
        # limit was full; 424 when it began at the fourth standing interval, 0.6 s in, and the
        # limit it left was higher).
        self.assertLess(refused_after, 520, "of 3,000 after the overload")

    def test_behind_a_pool_the_limit_holds_where_a_queue_comes_and_goes(self) -> None:
        # A pool of 4 slots, 20 to 23 ms a request, the others queued in order, at three times
        # its capacity for 4 s (the bench's mix). Once congested, a limit at which over a
        # tenth of the requests queue past the target while the pool never idles holds: it does
        # not grow by one every interval into a queue that a cut then takes back.
        import heapq
        import random

        draw = random.Random(7)
        limit, events, waiting, busy = ConcurrencyLimit(), [], [], 0
        arrival = 0
        while arrival < 4_000_000:
            arrival += int(draw.expovariate(600) * 1e6)
            events.append((arrival, 0, draw.choices(range(4), (0.1, 0.15, 0.15, 0.6))[0]))
        heapq.heapify(events)
        limits, changes_at_one_second = [], None
        while events:
            now, finishing, what = heapq.heappop(events)
            if finishing:
                limit.finish(now - what, now)
                if waiting:
                    service = 20_000 + draw.randint(0, 3_000)
                    heapq.heappush(events, (now + service, 1, waiting.pop(0)))
                else:
                    busy -= 1
                continue
            if now >= 1_000_000:
                if changes_at_one_second is None:
                    changes_at_one_second = limit.changes
                limits.append(limit.limit)
            if limit.admit(what, now):
                if busy < 4:
                    busy += 1
                    heapq.heappush(events, (now + 20_000 + draw.randint(0, 3_000), 1, now))
                else:
                    waiting.append(now)
        self.assertTrue(limit.congested)
        # 30 intervals after the first second: the limit changed in at most a third of them,
        # and never rose past three times the pool.
        self.assertLessEqual(limit.changes - changes_at_one_second, 10)
        self.assertLessEqual(max(limits), 12)

    def test_a_queue_standing_while_the_limit_is_full_begins_congestion_at_once(self) -> None:
        # A pool of 4 slots, 20 ms a request, queued in order; `enter` and `deep` out of reach,
        # so that only a full limit can begin congestion. 100 requests a second (half the
        # pool) teach the no-load latency; then 600 a second fill the initial limit of 20 and
        # queue behind the slots: congestion begins in the first standing interval, a tenth
        # to two tenths of a second in. A burst of 20 at once at the idle pool makes a standing
        # interval too (with `enter` 1 it begins congestion), but fills nothing: no congestion.
        import heapq

        from ratelimit_module.concurrency import LimitOptions

        def run(arrivals: list, enter: int = 1_000) -> int | None:
            limit = ConcurrencyLimit(LimitOptions(enter=enter, deep=1_000.0))
            events = [(at, 0) for at in arrivals]
            heapq.heapify(events)
            waiting, busy = [], 0
            while events:
                now, started = heapq.heappop(events)
                if started:
                    limit.finish(now - started, now)
                    if waiting:
                        heapq.heappush(events, (now + 20_000, waiting.pop(0)))
                    else:
                        busy -= 1
                elif limit.admit("critical_plus", now):
                    if busy < 4:
                        busy += 1
                        heapq.heappush(events, (now + 20_000, now))
                    else:
                        waiting.append(now)
                if limit.congested:
                    return now
            return None

        calm = list(range(0, 2_000_000, 10_000))
        overload = list(range(2_000_000, 3_000_000, 1_667))
        began = run(calm + overload)
        self.assertIsNotNone(began, "a full limit and a standing queue begin congestion")
        self.assertLess(began - 2_000_000, 300_000)
        burst = [2_050_000] * 20 + list(range(2_200_000, 3_000_000, 10_000))
        self.assertIsNotNone(run(calm + burst, enter=1), "the burst's queue stands")
        self.assertIsNone(run(calm + burst), "a burst that fills nothing begins nothing")

    def test_with_the_server_frozen_the_local_limit_still_protects(self) -> None:
        from test_client import BlackHole

        clock = Clock()
        frozen = BlackHole()
        client = redis.Redis(host="127.0.0.1", port=frozen.port)
        try:
            shedder = LoadShedder(client, "py:frozen", clock=clock, timeout=0.2)
            # The report gets no answer within its deadline: no level, nothing shed by one.
            self.assertIsNone(shedder.report())
            self.assertEqual(shedder.standing.level, 0)
            flood(shedder, clock)
            self.assertTrue(shedder.limit.congested)
            self.assertIsNone(shedder.admit("sheddable"), "shed by the instance's own limit")
            # The queue drains: requests of the next interval fast again, under half the
            # limit; congestion ends, and every class is admitted again.
            clock.now += 0.01
            for _ in range(9):
                ticket = shedder.admit("critical_plus")
                if ticket is None:
                    break
            while shedder.limit.inflight:
                shedder.limit.finish(5_000, int(clock.now * 1e6))
            clock.now += 0.2
            ticket = shedder.admit("critical_plus")
            self.assertIsNotNone(ticket, "the limit grows by one an interval while congested")
            clock.now += 0.005
            shedder.finished(ticket, 200)
            # Calm intervals (under half the limit, fewer refused than admitted): congestion
            # ends at the fourth in a row, and every class is admitted again.
            for _ in range(CALM_INTERVALS_TO_END - 1):
                clock.now += 0.1
                self.assertTrue(shedder.limit.congested)
                shedder.finished(shedder.admit("critical_plus"), 200)
            clock.now += 0.1
            self.assertIsNotNone(shedder.admit("sheddable"))
            self.assertFalse(shedder.limit.congested, "calm intervals under half the limit")
        finally:
            client.close()
            frozen.close()

    def test_a_request_waiting_on_the_rate_limit_server_is_not_in_flight(self) -> None:
        from test_client import BlackHole

        from ratelimit_module import RateLimiter

        frozen = BlackHole()
        healthy = redis.Redis.from_url(URL)
        shedder = LoadShedder(healthy, f"py:waits:{uuid.uuid4().hex}", interval=3600)
        seen: list = []

        def app(limiter: RateLimiter):  # type: ignore[no-untyped-def]
            def wsgi(environ: dict, start_response):  # type: ignore[no-untyped-def]
                limiter.check([Throttle(f"py:waits:{uuid.uuid4().hex}", 10, 10, 1)])
                # The server answered (or the wait gave up): in flight again.
                seen.append(shedder.limit.inflight)
                start_response("200 OK", [])
                return [b"ok"]

            return LoadSheddingWSGI(wsgi, shedder)

        def get(wsgi) -> None:  # type: ignore[no-untyped-def]
            environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_X_PRIORITY": "critical"}
            list(wsgi(environ, lambda status, headers: None))

        try:
            get(app(RateLimiter(healthy)))
            self.assertEqual(seen, [1])
            # A frozen server: while the request waits its timeout, it is not in flight.
            limiter = RateLimiter(
                redis.Redis(host="127.0.0.1", port=frozen.port), on_error="allow", timeout=30
            )
            waiting = threading.Thread(target=get, args=(app(limiter),))
            waiting.start()
            deadline = time.monotonic() + 20
            while not frozen.accepted and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertTrue(frozen.accepted, "the call reached the frozen server")
            self.assertEqual(shedder.limit.inflight, 0, "waiting on the server")
            frozen.close()
            waiting.join(20)
            self.assertEqual(seen, [1, 1])
            self.assertEqual(shedder.limit.inflight, 0)
        finally:
            frozen.close()
            healthy.close()

    def test_without_the_limit_only_the_level_sheds(self) -> None:
        clock = Clock()
        client = redis.Redis.from_url(URL)
        shedder = LoadShedder(client, f"py:nolimit:{uuid.uuid4().hex}", clock=clock, limit=False)
        try:
            self.assertIsNone(shedder.limit)
            tickets = [shedder.admit("sheddable") for _ in range(100)]
            self.assertTrue(all(tickets))
        finally:
            client.close()

    def test_a_limit_of_ones_own_options(self) -> None:
        from ratelimit_module.concurrency import LimitOptions

        limit = ConcurrencyLimit(LimitOptions(initial=2.0, floor=1.0))
        client = redis.Redis.from_url(URL)
        shedder = LoadShedder(client, f"py:own:{uuid.uuid4().hex}", limit=limit)
        try:
            self.assertIs(shedder.limit, limit)
            self.assertIsNotNone(shedder.admit("sheddable"))
            self.assertIsNotNone(shedder.admit("sheddable"))
            self.assertIsNone(shedder.admit("critical_plus"), "two in flight of two")
        finally:
            client.close()


if __name__ == "__main__":
    unittest.main()
