"""Tests of the helper against a live server with the module (REDIS_URL), as `make test` runs
them: `python -m unittest discover -s examples/python`."""

from __future__ import annotations

import os
import unittest
import uuid

import redis

from ratelimit_client import (Log, RateLimit, Throttle, Window, acquire, acquire_slot, check,
                              headers, release, renew)


class HelperTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = redis.Redis.from_url(os.environ["REDIS_URL"])
        self.prefix = f"test:{uuid.uuid4().hex}"

    def tearDown(self) -> None:
        self.client.close()

    def key(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    def test_a_single_limiter_reads_as_a_typed_result(self) -> None:
        limiter = Throttle(self.key("gcra"), max_burst=1, count=1, period=60)
        first = check(self.client, [limiter])
        self.assertEqual(first, RateLimit(True, 2, 1, None, 60.0))
        second = check(self.client, [limiter])
        # Times are in seconds, from milliseconds: a call a millisecond later is that earlier.
        self.assertEqual(second.remaining, 0)
        self.assertAlmostEqual(second.reset_after, 120.0, delta=0.5)
        refused = check(self.client, [limiter])
        self.assertFalse(refused.allowed)
        self.assertEqual(refused.remaining, 0)
        self.assertAlmostEqual(refused.retry_after, 60.0, delta=0.5)
        # A quantity that can never fit: refused, with nothing to wait for.
        self.assertIsNone(check(self.client, [limiter], quantity=3).retry_after)

    def test_acquire_slot_sleeps_the_wait_it_is_told_or_refuses_at_once(self) -> None:
        # One every 10 s, no burst: the second request's turn comes in 10 s.
        limiter = Throttle(self.key("slot"), max_burst=0, count=1, period=10)
        slept: list[float] = []
        first = acquire_slot(self.client, [limiter], timeout=30, sleep=slept.append)
        self.assertEqual((first.allowed, first.wait, slept), (True, 0.0, []))
        second = acquire_slot(self.client, [limiter], timeout=30, sleep=slept.append)
        self.assertTrue(second.allowed)
        self.assertAlmostEqual(second.wait, 10.0, delta=0.5)
        self.assertEqual(slept, [second.wait])
        # A third would wait 20 s: more than 5 is refused at once, nothing slept or charged.
        third = acquire_slot(self.client, [limiter], timeout=5, sleep=slept.append)
        self.assertFalse(third.allowed)
        self.assertEqual((third.wait, len(slept)), (0.0, 1))
        self.assertAlmostEqual(third.retry_after, 15.0, delta=0.5)
        # Several limiters wait for the last of them; each result still comes.
        minute = Log(self.key("slot-minute"), 1, 60, "minute")
        both = check(self.client, [limiter, minute], delay=60)
        self.assertTrue(both.allowed)
        self.assertAlmostEqual(both.wait, 20.0, delta=0.5)
        self.assertEqual(len(both.each), 2)

    def test_windows_and_logs_take_their_algorithm_and_quantity(self) -> None:
        buckets = Window(self.key("buckets"), 10, 60, "BUCKETS 6")
        self.assertEqual(check(self.client, [buckets], quantity=4).remaining, 6)
        self.assertEqual(check(self.client, [buckets], quantity=7).allowed, False)
        log = Log(self.key("log"), 3, 60)
        self.assertEqual(check(self.client, [log], quantity=3).remaining, 0)
        self.assertEqual(check(self.client, [log], quantity=2, refund=True).remaining, 2)

    def test_several_limiters_are_all_or_nothing_with_each_result(self) -> None:
        minute, hour = Log(self.key("minute"), 2, 60, "minute"), Log(self.key("hour"), 3, 3600, "hour")
        first = check(self.client, [minute, hour])
        self.assertTrue(first.allowed)
        self.assertEqual([one.remaining for one in first.each], [1, 2])
        # The binding limiter is the one with the fewest remaining.
        self.assertEqual((first.limit, first.remaining), (2, 1))
        check(self.client, [minute, hour])
        refused = check(self.client, [minute, hour])
        self.assertFalse(refused.allowed)
        self.assertAlmostEqual(refused.retry_after, 60.0, delta=0.5)
        # Nothing was charged to the hour for the refused request.
        self.assertEqual(check(self.client, [hour], quantity=0).remaining, 1)

    def test_header_fields_name_each_policy(self) -> None:
        minute = Window(self.key("minute"), 100, 60, "FIXED", name="minute")
        burst = Throttle(self.key("burst"), max_burst=4, count=1, period=1, name="burst")
        result = check(self.client, [minute, burst])
        fields = headers(result, [minute, burst])
        self.assertEqual(fields["RateLimit-Policy"], '"minute";q=100;w=60, "burst";q=5;w=5')
        self.assertRegex(fields["RateLimit"], r'^"minute";r=99;t=\d+, "burst";r=4;t=1$')
        self.assertNotIn("Retry-After", fields)
        self.assertNotIn("RateLimit-Limit", fields)
        legacy = headers(result, [minute, burst], legacy=True)
        self.assertEqual((legacy["RateLimit-Limit"], legacy["RateLimit-Remaining"]), ("5", "4"))
        check(self.client, [burst], quantity=4)
        refused = check(self.client, [minute, burst])
        self.assertEqual(headers(refused, [minute, burst])["Retry-After"], "1")

    def test_leases_are_taken_freed_and_renewed(self) -> None:
        key = self.key("workers")
        lease = acquire(self.client, key, 1, 30)
        self.assertTrue(lease.allowed)
        self.assertGreater(lease.id, 0)
        refused = acquire(self.client, key, 1, 30)
        self.assertEqual((refused.allowed, refused.id), (False, 0))
        self.assertAlmostEqual(refused.result.retry_after, 30.0, delta=0.5)
        self.assertTrue(renew(self.client, key, lease.id, 60))
        self.assertTrue(release(self.client, key, lease.id))
        self.assertFalse(release(self.client, key, lease.id))
        self.assertFalse(renew(self.client, key, lease.id, 60))

    def test_errors_are_redis_errors(self) -> None:
        with self.assertRaisesRegex(redis.ResponseError, "count must be positive"):
            check(self.client, [Throttle(self.key("bad"), 1, 0, 60)])


if __name__ == "__main__":
    unittest.main()
