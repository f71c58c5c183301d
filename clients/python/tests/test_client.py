"""The package against a live server with the module (REDIS_URL): the sync and async clients,
every option, the fields, and the `limits` storage through `limits`' own strategies.

    python -m unittest discover -s clients/python/tests
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import multiprocessing
import os
import socket
import threading
import time
import unittest
import uuid
from pathlib import Path

import redis
import redis.asyncio
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import (
    FixedWindowRateLimiter,
    MovingWindowRateLimiter,
    SlidingWindowCounterRateLimiter,
)
from prometheus_client import CollectorRegistry
from redis.backoff import NoBackoff
from redis.retry import Retry

import ratelimit_module.limits_storage  # noqa: F401  (registers ratelimit://)
from ratelimit_module import (
    AsyncQuota,
    AsyncRateLimiter,
    AsyncSharedLists,
    Log,
    LogCounts,
    Quota,
    RateLimit,
    RateLimiter,
    ServerUnavailable,
    SharedLists,
    Throttle,
    Window,
    headers,
)
from ratelimit_module.metrics import PrometheusMetrics

URL = os.environ["REDIS_URL"]


class SyncClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = redis.Redis.from_url(URL)
        self.slept: list[float] = []
        self.limiter = RateLimiter(self.client, sleep=self.slept.append)
        self.prefix = f"py:{uuid.uuid4().hex}"

    def tearDown(self) -> None:
        self.client.close()

    def test_every_option_answers_typed(self) -> None:
        gcra = Throttle(f"{self.prefix}:gcra", max_burst=1, count=1, period=10)
        first = self.limiter.check([gcra])
        self.assertEqual(first, RateLimit(True, 2, 1, None, first.reset_after))
        self.assertAlmostEqual(first.reset_after, 10, delta=0.5)
        self.limiter.check([gcra])
        delayed = self.limiter.check([gcra], delay=30)
        self.assertTrue(delayed.allowed)
        self.assertAlmostEqual(delayed.wait, 10, delta=0.5)
        refused = self.limiter.check([gcra], delay=5)
        self.assertFalse(refused.allowed)
        self.assertAlmostEqual(refused.retry_after, 15, delta=0.5)
        batch = Window(f"{self.prefix}:window", 5, 60, "ANCHORED")
        self.assertEqual(self.limiter.check([batch], 3, at_most=True).granted, 3)
        self.assertEqual(self.limiter.check([batch], 3, at_most=True).granted, 2)
        exact = Log(f"{self.prefix}:log", 2, 60)
        self.assertTrue(self.limiter.check([exact], 3, force=True).allowed)
        self.assertFalse(self.limiter.peek([exact]).allowed)
        self.assertEqual(self.limiter.check([exact], 3, refund=True).remaining, 0)
        blocked = Log(f"{self.prefix}:blocked", 1, 60)
        self.limiter.check([blocked])
        self.assertAlmostEqual(self.limiter.check([blocked], block=600).retry_after, 600, delta=1)

    def test_a_keyword_check_does_not_take_is_refused_before_any_call(self) -> None:
        exact = Log(f"{self.prefix}:log", 2, 60)
        before = calls(self.client, "rl.log")
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'read_only'"):
            self.limiter.check([exact], read_only=True)  # type: ignore[call-arg]
        self.assertEqual(calls(self.client, "rl.log"), before)
        self.assertEqual(self.limiter.check([exact], at_most=True, shadow=False).remaining, 1)
        self.assertEqual(calls(self.client, "rl.log"), before + 1)

    def test_several_limiters_in_one_call_with_the_fields(self) -> None:
        both = [
            Log(f"{{{self.prefix}}}:a", 2, 60, "a"),
            Window(f"{{{self.prefix}}}:b", 3, 60, name="b"),
        ]
        result = self.limiter.check(both)
        self.assertEqual([one.remaining for one in result.each], [1, 2])
        self.assertEqual(headers(result, both)["RateLimit-Policy"], '"a";q=2;w=60, "b";q=3;w=60')
        self.limiter.check(both)
        refused = self.limiter.check(both)
        self.assertEqual(headers(refused, both)["Retry-After"], "60")

    def test_acquire_sleeps_the_wait_or_refuses_at_once(self) -> None:
        steady = Throttle(f"{self.prefix}:steady", 0, 1, 10)
        self.assertEqual(self.limiter.acquire([steady], timeout=30).wait, 0)
        second = self.limiter.acquire([steady], timeout=30)
        self.assertTrue(second.allowed)
        self.assertEqual(self.slept, [second.wait])
        self.assertFalse(self.limiter.acquire([steady], timeout=5).allowed)
        self.assertEqual(len(self.slept), 1)

    def test_leases(self) -> None:
        key = f"{self.prefix}:lease"
        peeked = self.limiter.peek_lease(key, 1, 30)
        self.assertEqual((peeked.allowed, peeked.id, peeked.result.remaining), (True, 0, 0))
        lease = self.limiter.acquire_lease(key, 1, 30)
        self.assertTrue(lease.allowed)
        self.assertGreater(lease.id, 0)
        self.assertFalse(self.limiter.peek_lease(key, 1, 30).allowed)
        self.assertFalse(self.limiter.acquire_lease(key, 1, 30).allowed)
        self.assertTrue(self.limiter.renew_lease(key, lease.id, 60))
        self.assertTrue(self.limiter.release_lease(key, lease.id))
        self.assertFalse(self.limiter.release_lease(key, lease.id))

    def test_top_says_when_the_server_counts_nothing_then_lists_refused_keys(self) -> None:
        self.client.config_set("ratelimit.top-keys", 0)
        with self.assertRaisesRegex(redis.ResponseError, "RL.TOP is off on this server"):
            self.limiter.top()
        self.client.config_set("ratelimit.top-keys", 128)
        try:
            refused = Log(f"{self.prefix}:top", 1, 60)
            for _ in range(3):
                self.limiter.check([refused])
            rows = [(row.key, row.refusals, row.error) for row in self.limiter.top(128)]
            self.assertIn((refused.key, 2, 0), rows)
        finally:
            self.client.config_set("ratelimit.top-keys", 0)

    def test_counts_of_a_window_and_a_log(self) -> None:
        # An hour's clock-aligned window: a minute's would end between the calls once in a
        # while, and the count would move to the previous window.
        fixed = Window(f"{self.prefix}:fixed", 10, 3600, "FIXED")
        sliding = Window(f"{self.prefix}:sliding", 10, 60)
        exact = Log(f"{self.prefix}:exact", 10, 60)
        for limiter in (fixed, sliding, exact):
            self.limiter.check([limiter], 3)
        fixed_counts = self.limiter.counts(fixed)
        self.assertEqual(
            (fixed_counts.previous, fixed_counts.previous_ends_in, fixed_counts.current), (0, 0, 3)
        )
        self.assertTrue(0 < fixed_counts.current_ends_in <= 3600)
        sliding_counts = self.limiter.counts(sliding)
        self.assertEqual((sliding_counts.previous, sliding_counts.current), (0, 3))
        self.assertTrue(60 <= sliding_counts.current_ends_in <= 120)
        log_counts = self.limiter.counts(exact)
        self.assertEqual(log_counts.count, 3)
        self.assertAlmostEqual(log_counts.oldest_ends_in, 60, delta=1)
        self.assertEqual(log_counts.newest_ends_in, log_counts.oldest_ends_in)
        self.assertEqual(
            self.limiter.counts(Log(f"{self.prefix}:none", 10, 60)), LogCounts(0, 0, 0)
        )
        for unreadable in (
            Throttle(f"{self.prefix}:gcra", 1, 1, 1),
            Window(f"{self.prefix}:buckets", 10, 60, "BUCKETS 6"),
        ):
            with self.assertRaises(ValueError):
                self.limiter.counts(unreadable)


class ChangedLimitsTest(unittest.TestCase):
    """The conformance table's calls whose limits change between them (`changed_limits`, and
    `lua`'s): every reply in it is the server's. A reply's times are the table's less the time
    the server says passed since the case began (the table's are those of an instant), that
    time scaled by how much slower the rate now is than at any earlier step: what drained at
    the old rate counts in requests, which take longer at the new one."""

    TABLE = json.loads((Path(__file__).resolve().parents[2] / "conformance.json").read_text())

    def setUp(self) -> None:
        self.client = redis.Redis.from_url(URL)
        self.prefix = f"py:{uuid.uuid4().hex}:"

    def tearDown(self) -> None:
        self.client.close()

    def server_micros(self) -> int:
        seconds, micros = self.client.time()
        return seconds * 1_000_000 + micros

    def test_every_reply_of_the_changed_limits_is_the_servers(self) -> None:
        cases = self.TABLE["changed_limits"] + self.TABLE["lua"]["changed_limits"]
        steps = 0
        for case in cases:
            began = self.server_micros()
            fastest = None  # the shortest emission interval of the case's steps so far
            for step in case["steps"]:
                words = list(step["words"])
                words[1] = self.prefix + words[1]
                reply = self.client.execute_command(*words)
                per_unit = 1_000 if "MS" in words else 1
                slower = 1
                if words[0] == "CL.THROTTLE":
                    interval = int(words[4]) / int(words[3])
                    fastest = interval if fastest is None else min(fastest, interval)
                    slower = max(1, math.ceil(interval / fastest))
                passed = (-(-(self.server_micros() - began) // per_unit) + 1) * slower
                wanted = step["reply"]
                about = f"{case['about']} {words}: {reply}"
                self.assertEqual(reply[:3], wanted[:3], about)
                for got, want in zip(reply[3:], wanted[3:]):
                    if want in (-1, 0):
                        self.assertEqual(got, want, about)
                    else:
                        self.assertTrue(0 <= want - got <= passed, about)
                steps += 1
        self.assertGreaterEqual(steps, 20)


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.client_for_info = redis.Redis.from_url(URL)

    def tearDown(self) -> None:
        self.client_for_info.close()

    async def test_the_same_calls_awaited(self) -> None:
        client = redis.asyncio.Redis.from_url(URL)
        limiter = AsyncRateLimiter(client)
        prefix = f"pyaio:{uuid.uuid4().hex}"
        steady = Throttle(f"{prefix}:steady", 0, 1, 1)
        self.assertTrue((await limiter.check([steady])).allowed)
        started = time.monotonic()
        second = await limiter.acquire([steady], timeout=5)
        self.assertTrue(second.allowed)
        self.assertGreaterEqual(time.monotonic() - started, second.wait - 0.05)
        self.assertFalse((await limiter.peek([steady])).allowed)
        self.assertEqual(
            (await limiter.check([Window(f"{prefix}:w", 4, 60)], 9, at_most=True)).granted, 4
        )
        self.assertEqual((await limiter.counts(Window(f"{prefix}:w", 4, 60))).current, 4)
        self.assertEqual((await limiter.peek_lease(f"{prefix}:lease", 2, 30)).result.remaining, 1)
        lease = await limiter.acquire_lease(f"{prefix}:lease", 2, 30)
        self.assertTrue(await limiter.release_lease(f"{prefix}:lease", lease.id))
        before = calls(self.client_for_info, "rl.window")
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'blocks'"):
            await limiter.check([Window(f"{prefix}:w", 4, 60)], blocks=1)  # type: ignore[call-arg]
        self.assertEqual(calls(self.client_for_info, "rl.window"), before)
        await client.aclose()


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran `command` (INFO ratelimit)."""
    line = client.info("ratelimit")[f"ratelimit_{command}"]
    return (
        int(line["calls"]) if isinstance(line, dict) else int(str(line).split(",")[0].split("=")[1])
    )


def commands(client: redis.Redis, command: str) -> int:
    """How many times the server ran a built-in `command` (INFO commandstats)."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {"calls": 0})["calls"])


def decisions(registry: CollectorRegistry, policy: str, outcome: str) -> float:
    value = registry.get_sample_value(
        "ratelimit_decisions_total", {"policy": policy, "outcome": outcome}
    )
    return value or 0.0


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class BlackHole:
    """A port that accepts connections and never answers: a server frozen (`SIGSTOP`) as
    its clients see it. Counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def bounded(call, seconds: float = 10.0):  # type: ignore[no-untyped-def]
    """`call()`'s answer, or a failure when it has none within `seconds`: what keeps a test
    of a deadline from hanging when the deadline is missing."""
    answers: list = []

    def run() -> None:
        try:
            answers.append((call(), None))
        except Exception as error:  # raised again on the test's thread
            answers.append((None, error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if not answers:
        raise AssertionError(f"no answer within {seconds} s")
    answer, error = answers[0]
    if error is not None:
        raise error
    return answer


class DeadlineTest(unittest.IsolatedAsyncioTestCase):
    """Every call answers within the package's own deadline, whatever the client does: here
    redis-py's defaults, which wait for a frozen server forever."""

    def setUp(self) -> None:
        self.hole = BlackHole()

    def tearDown(self) -> None:
        self.hole.close()

    def test_a_sync_call_answers_within_its_deadline(self) -> None:
        client = redis.Redis(port=self.hole.port, retry=Retry(NoBackoff(), 50))
        limiter = RateLimiter(client, timeout=0.5, on_error="allow")
        decided = bounded(lambda: limiter.check([Log("py:frozen", 5, 60)]))
        self.assertEqual((decided.allowed, decided.failed), (True, True))
        lists = SharedLists(client, "py:frozen:lists", timeout=0.5)
        with self.assertRaises(redis.TimeoutError):
            bounded(lambda: lists.add("deny", "x"))

    async def test_an_async_call_answers_within_its_deadline(self) -> None:
        client = redis.asyncio.Redis(port=self.hole.port, retry=Retry(NoBackoff(), 50))
        limiter = AsyncRateLimiter(client, timeout=0.5, on_error="deny", cooldown=5)
        limits = [Log("py:frozen", 5, 60)]
        decided = await asyncio.wait_for(limiter.check(limits), 10)
        self.assertEqual((decided.allowed, decided.failed), (False, True))
        lease = await limiter.acquire_lease("py:frozen:lease", 2, 10)
        self.assertEqual((lease.allowed, lease.id, lease.result.failed), (False, 0, True))

    def test_after_the_cooldown_one_call_probes_and_the_others_keep_the_policy(self) -> None:
        client = redis.Redis(port=self.hole.port)
        now = [0.0]
        limiter = RateLimiter(
            client, timeout=0.3, on_error="deny", cooldown=1, clock=lambda: now[0]
        )
        limits = [Log("py:probe", 5, 60)]
        self.assertTrue(bounded(lambda: limiter.check(limits)).failed)
        # The connection is made once the call is sent (accepted in the background).
        self.assertTrue(wait_for(lambda: len(self.hole.accepted) == 1))
        now[0] = 1.0  # the cool-down is over
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: limiter.check(limits), range(8)))
        self.assertTrue(all(answer.failed and not answer.allowed for answer in answers))
        # The first call's connection still waits; the probe made the only other one.
        self.assertTrue(wait_for(lambda: len(self.hole.accepted) >= 2))
        self.assertEqual(len(self.hole.accepted), 2)


def wait_for(condition, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    """Whether `condition()` holds within `seconds` (polled)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


class FailuresAndFloodsTest(unittest.TestCase):
    def test_on_error_decides_and_the_circuit_spares_a_dead_server(self) -> None:
        gone = redis.Redis(port=closed_port(), socket_timeout=0.5, socket_connect_timeout=0.5)
        limits = [Log("py:gone", 5, 60)]
        allowing = RateLimiter(gone, on_error="allow", cooldown=30)
        first = allowing.check(limits)
        self.assertEqual((first.allowed, first.failed), (True, True))
        denying = RateLimiter(gone, on_error="deny", cooldown=30)
        refused = denying.check(limits)
        self.assertEqual((refused.allowed, refused.failed), (False, True))
        self.assertAlmostEqual(refused.retry_after, 30, delta=1)
        # Within the cool-down, no call is tried: a thousand decisions reach no client.
        tried = []
        original = gone.execute_command
        gone.execute_command = lambda *args, **options: (
            tried.append(args) or original(*args, **options)
        )
        self.assertFalse(any(denying.check(limits).allowed for _ in range(1000)))
        self.assertEqual(tried, [])
        gone.execute_command = original
        raising = RateLimiter(gone)
        with self.assertRaises(redis.ConnectionError):
            raising.check(limits)
        with self.assertRaises(ServerUnavailable):
            raising.check(limits)

    def test_leases_follow_the_failure_policy(self) -> None:
        gone = redis.Redis(port=closed_port(), socket_timeout=0.5, socket_connect_timeout=0.5)
        registry = CollectorRegistry()
        metrics = PrometheusMetrics(registry)
        allowing = RateLimiter(gone, on_error="allow", cooldown=30, metrics=metrics)
        granted = allowing.acquire_lease("py:gone:lease", 2, 10)
        self.assertEqual((granted.allowed, granted.id, granted.result.failed), (True, 0, True))
        # Within the cool-down: decided without the server, counted.
        self.assertTrue(allowing.acquire_lease("py:gone:lease", 2, 10).allowed)
        self.assertTrue(allowing.renew_lease("py:gone:lease", 7, 10), "kept under allow")
        self.assertFalse(allowing.release_lease("py:gone:lease", 7), "not released")
        self.assertFalse(allowing.release_lease("py:gone:lease", granted.id))
        self.assertEqual(decisions(registry, "lease", "failed_open"), 2)
        denying = RateLimiter(gone, on_error="deny", cooldown=30)
        refused = denying.acquire_lease("py:gone:lease", 2, 10)
        self.assertEqual((refused.allowed, refused.id), (False, 0))
        self.assertAlmostEqual(refused.result.retry_after, 30, delta=1)
        self.assertFalse(denying.renew_lease("py:gone:lease", 7, 10), "given up under deny")
        raising = RateLimiter(gone)
        with self.assertRaises(redis.ConnectionError):
            raising.acquire_lease("py:gone:lease", 2, 10)
        with self.assertRaises(ServerUnavailable):
            raising.renew_lease("py:gone:lease", 7, 10)

    def test_the_deny_cache_answers_a_flood_with_one_call(self) -> None:
        client = redis.Redis.from_url(URL)
        key = f"py:{uuid.uuid4().hex}:flood"
        limits = [Log(key, 2, 60)]
        limiter = RateLimiter(client, deny_cache=100)
        self.assertEqual([limiter.check(limits).allowed for _ in range(2)], [True, True])
        before = calls(client, "rl.log")
        answers = [limiter.check(limits) for _ in range(1000)]
        self.assertEqual(calls(client, "rl.log") - before, 1, "one call, then the cache")
        self.assertFalse(any(answer.allowed for answer in answers))
        # What the server answers, with the time that passed taken off.
        server = RateLimiter(client).peek(limits)
        last = answers[-1]
        self.assertEqual((last.limit, last.remaining), (server.limit, server.remaining))
        self.assertAlmostEqual(last.retry_after, server.retry_after, delta=0.05)
        self.assertLessEqual(last.retry_after, answers[0].retry_after)
        # A smaller quantity, or another key, asks the server.
        self.assertTrue(limiter.check([Log(f"{key}:other", 2, 60)]).allowed)
        client.close()


def _quota_worker(args: tuple) -> list[float]:
    """One process taking from one quota for `seconds`: when each admitted request went."""
    url, key, limit, window, batch, seconds = args
    client = redis.Redis.from_url(url)
    quota = Quota(RateLimiter(client), [Log(key, limit, window)], batch=batch, hold=window)
    admitted, end = [], time.time() + seconds
    while time.time() < end:
        if quota.take():
            admitted.append(time.time())
        else:
            time.sleep(0.002)
    quota.close()
    client.close()
    return admitted


class QuotaTest(unittest.TestCase):
    def test_several_processes_admit_at_most_the_limit_plus_n_times_batch(self) -> None:
        limit, window, batch, processes = 40, 0.5, 10, 4
        key = f"py:{uuid.uuid4().hex}:quota"
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            runs = pool.map(_quota_worker, [(URL, key, limit, window, batch, 2.0)] * processes)
        times = sorted(t for run in runs for t in run)
        self.assertGreater(len(times), limit)
        # In any window (ending at an admission), at most limit + N x batch.
        start, worst = 0, 0
        for end, at in enumerate(times):
            while times[start] <= at - window:
                start += 1
            worst = max(worst, end - start + 1)
        self.assertLessEqual(worst, limit + processes * batch, f"{worst} in one window")

    def test_batch_one_is_one_call_per_decision_and_close_gives_back(self) -> None:
        client = redis.Redis.from_url(URL)
        key = f"py:{uuid.uuid4().hex}:one"
        limits = [Log(key, 3, 60)]
        one = Quota(RateLimiter(client), limits, batch=1)
        self.assertEqual([one.take() for _ in range(4)], [True, True, True, False])
        self.assertEqual(one.ledger.calls, 4)
        client.delete(key)
        many = Quota(RateLimiter(client), limits, batch=3, hold=60)
        self.assertTrue(many.take())
        self.assertEqual(RateLimiter(client).counts(limits[0]).count, 3)
        many.close()
        self.assertEqual(RateLimiter(client).counts(limits[0]).count, 1)
        client.close()

    def test_a_refused_quota_asks_the_server_once_per_retry_after(self) -> None:
        client = redis.Redis.from_url(URL)
        key = f"py:{uuid.uuid4().hex}:refused"
        now = [1_000.0]
        quota = Quota(
            RateLimiter(client), [Log(key, 3, 60)], batch=2, hold=600, clock=lambda: now[0]
        )
        taken = [quota.take() for _ in range(1000)]
        # Two grants (2, then the 1 left: the limit binds), then half a batch (1) that the
        # server schedules when the log has room, in 60 s: nothing is spent or asked before.
        self.assertEqual(taken[:4], [True, True, True, False])
        self.assertFalse(any(taken[3:]))
        self.assertEqual(quota.ledger.calls, 3)
        # Then (by the quota's clock) it spends what the server scheduled, without a call.
        now[0] += 61
        self.assertTrue(quota.take())
        self.assertEqual(quota.ledger.calls, 3)

        async def run() -> None:
            async_client = redis.asyncio.Redis.from_url(URL)
            later = AsyncQuota(
                AsyncRateLimiter(async_client), [Log(key, 3, 60)], batch=2, clock=lambda: now[0]
            )
            self.assertEqual([await later.take() for _ in range(100)], [False] * 100)
            self.assertEqual(later.ledger.calls, 1)
            await async_client.aclose()

        asyncio.run(run())
        client.close()

    def test_a_binding_limit_costs_a_call_per_half_batch(self) -> None:
        # 1,000 a second in bursts of 100, leases of 50: past the burst, the limit binds.
        client = redis.Redis.from_url(URL)
        key = f"py:{uuid.uuid4().hex}:binding"
        quota = Quota(RateLimiter(client), [Throttle(key, 99, 1000, 1)], batch=50, hold=1.0)
        while quota.ledger.admitted < 600:
            if not quota.take():
                time.sleep(0.001)
        ledger = quota.ledger
        # The burst in two calls, a third that gets what refilled, then half a batch a call.
        self.assertLessEqual(ledger.calls, ledger.admitted / 25 + 3, ledger.__dict__)
        quota.close()
        client.close()

    def test_unused_units_go_back_after_hold(self) -> None:
        async def run() -> None:
            client = redis.asyncio.Redis.from_url(URL)
            key = f"py:{uuid.uuid4().hex}:hold"
            limits = [Log(key, 10, 60)]
            quota = AsyncQuota(AsyncRateLimiter(client), limits, batch=5, hold=0.2)
            self.assertTrue(await quota.take())
            count = AsyncRateLimiter(client).counts
            self.assertEqual((await count(limits[0])).count, 5)
            # Waited for, bounded at 10 s (fifty times the hold): the four go back, the one
            # spent stays.
            end = time.monotonic() + 10
            while (await count(limits[0])).count != 1 and time.monotonic() < end:
                await asyncio.sleep(0.01)
            self.assertEqual((await count(limits[0])).count, 1)
            await quota.close()
            await client.aclose()

        asyncio.run(run())


class SharedListsTest(unittest.IsolatedAsyncioTestCase):
    """The hash the nginx package watches: written by one reader, seen by another once its
    version is checked again."""

    async def test_a_change_is_seen_after_the_next_version_check(self) -> None:
        now = [0.0]
        client = redis.Redis.from_url(URL)
        hash = f"pylists:{uuid.uuid4().hex}"
        writer = SharedLists(client, hash)
        reader = SharedLists(client, hash, every=1.0, clock=lambda: now[0])
        self.assertEqual(reader.read(), {})
        writer.add("deny", "203.0.113.7")
        writer.add("limit", "/api", "5 1 1000")
        self.assertEqual(reader.read(), {}, "not before the next check")
        now[0] = 1.0
        self.assertEqual(
            reader.read(), {"deny": {"203.0.113.7": "1"}, "limit": {"/api": "5 1 1000"}}
        )
        self.assertEqual(client.hget(hash, "version"), b"2")
        async_client = redis.asyncio.Redis.from_url(URL, decode_responses=True)
        async_lists = AsyncSharedLists(async_client, hash, every=1.0, clock=lambda: now[0])
        self.assertEqual((await async_lists.read())["deny"], {"203.0.113.7": "1"})
        await async_lists.remove("deny", "203.0.113.7")
        await async_lists.add("allow", "svc-a")
        now[0] = 2.0
        self.assertEqual(reader.read(), {"allow": {"svc-a": "1"}, "limit": {"/api": "5 1 1000"}})
        self.assertEqual(client.hget(hash, "version"), b"4")
        # Each change is one transaction: the item and the version, never one alone.
        before = commands(client, "exec")
        writer.add("deny", "198.51.100.1")
        await async_lists.remove("allow", "svc-a")
        self.assertEqual(commands(client, "exec") - before, 2)
        client.delete(hash)
        client.close()
        await async_client.aclose()


class LimitsStorageTest(unittest.TestCase):
    """`limits`' own strategies on the storage: what slowapi and Flask-Limiter run."""

    def setUp(self) -> None:
        self.storage = storage_from_string(URL.replace("redis://", "ratelimit://", 1))
        self.item = parse("5/minute")
        self.name = uuid.uuid4().hex

    def test_the_moving_window_is_exact_and_refused_hits_cost_nothing(self) -> None:
        strategy = MovingWindowRateLimiter(self.storage)
        started = time.time()
        self.assertEqual(
            [strategy.hit(self.item, self.name) for _ in range(7)], [True] * 5 + [False] * 2
        )
        self.assertFalse(strategy.test(self.item, self.name))
        stats = strategy.get_window_stats(self.item, self.name)
        answered = time.time()
        self.assertEqual(stats.remaining, 0)
        # A minute after the oldest hit, which came between the start and the answer (to the
        # second `limits` rounds to).
        self.assertGreaterEqual(stats.reset_time, started + 60 - 1)
        self.assertLessEqual(stats.reset_time, answered + 60 + 1)
        count, _, _ = self.storage.client.execute_command(
            "RL.LOG.COUNTS", f"LIMITS:{self.item.key_for(self.name)}", 60, "S"
        )
        self.assertEqual(count, 5)

    def test_the_sliding_window_counter_weighs_the_previous_window(self) -> None:
        strategy = SlidingWindowCounterRateLimiter(self.storage)
        self.assertEqual(
            [strategy.hit(self.item, self.name) for _ in range(7)], [True] * 5 + [False] * 2
        )
        self.assertFalse(strategy.test(self.item, self.name))
        previous, _, current, current_in = self.storage.get_sliding_window(
            self.item.key_for(self.name), 60
        )
        self.assertEqual((previous, current), (0, 5))
        self.assertTrue(60 < current_in <= 120)
        self.assertEqual(strategy.get_window_stats(self.item, self.name).remaining, 0)

    def test_the_fixed_window_counts_as_limits_asks(self) -> None:
        strategy = FixedWindowRateLimiter(self.storage)
        self.assertEqual(
            [strategy.hit(self.item, self.name) for _ in range(7)], [True] * 5 + [False] * 2
        )
        self.assertEqual(self.storage.get(self.item.key_for(self.name)), 7)
        self.assertFalse(strategy.test(self.item, self.name))
        reset = strategy.get_window_stats(self.item, self.name).reset_time
        # The window ends 60 s after the first hit, its expiry rounded up to the millisecond.
        self.assertTrue(time.time() < reset <= time.time() + 60.002)
        strategy.clear(self.item, self.name)
        self.assertTrue(strategy.test(self.item, self.name))

    def test_check_and_reset(self) -> None:
        self.assertTrue(self.storage.check())
        MovingWindowRateLimiter(self.storage).hit(self.item, self.name)
        self.assertGreaterEqual(self.storage.reset(), 1)


if __name__ == "__main__":
    unittest.main()
