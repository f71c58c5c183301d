"""The deny cache and the quota ledger against brute-force models, on random histories with
an injected clock (no server): the cache never admits, and never refuses longer than the
server said; the ledger never holds more than `batch`, and spends only what it was granted.

    python -m unittest clients/python/tests/test_resilience.py
"""

from __future__ import annotations

import random
import unittest

from ratelimit_module import RateLimit
from ratelimit_module._resilience import Circuit, DenyCache, ServerUnavailable
from ratelimit_module.quota import _Ledger

SEEDS = range(200)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def refusal(retry_after: float) -> RateLimit:
    return RateLimit(
        allowed=False, limit=5, remaining=0, retry_after=retry_after, reset_after=retry_after + 1
    )


class DenyCacheProperties(unittest.TestCase):
    def test_it_only_refuses_what_the_server_refused_and_never_longer(self) -> None:
        for seed in SEEDS:
            rng, clock = random.Random(seed), Clock()
            cache = DenyCache(max_keys=rng.randint(1, 4), clock=clock)
            # The model: every refusal the server gave, (key, quantity, until).
            refusals: list[tuple[str, int, float]] = []
            for _ in range(100):
                clock.now += rng.choice([0.0, 0.01, 0.3, 1.0])
                key, quantity = rng.choice("abcdef"), rng.randint(1, 4)
                answer = cache.get(key, quantity)
                if answer is not None:
                    self.assertFalse(answer.allowed)
                    # Some refusal of the server for this key, a quantity not larger, still
                    # standing, and the answer's retry_after ends when it does.
                    standing = [
                        until
                        for k, q, until in refusals
                        if k == key and q <= quantity and until > clock.now
                    ]
                    self.assertTrue(standing, f"seed {seed}: refused without the server")
                    self.assertTrue(
                        any(
                            abs(clock.now + answer.retry_after - until) < 1e-9 for until in standing
                        ),
                        f"seed {seed}",
                    )
                    continue
                if rng.random() < 0.5:
                    retry = rng.choice([0.2, 0.5, 2.0])
                    refusals.append((key, quantity, clock.now + retry))
                    cache.put(key, quantity, refusal(retry))
                else:
                    cache.put(key, quantity, RateLimit(True, 5, 3, None, 1.0))
                self.assertLessEqual(len(cache.entries), cache.max_keys)

    def test_the_least_recently_used_goes_first(self) -> None:
        clock = Clock()
        cache = DenyCache(max_keys=2, clock=clock)
        cache.put("a", 1, refusal(10))
        cache.put("b", 1, refusal(10))
        self.assertIsNotNone(cache.get("a", 1))
        cache.put("c", 1, refusal(10))
        self.assertIsNone(cache.get("b", 1))
        self.assertEqual(cache.get("a", 3).retry_after, 10)
        self.assertIsNone(cache.get("c", 0), "a smaller quantity may fit")
        clock.now = 4
        self.assertEqual(cache.get("c", 1).retry_after, 6)
        clock.now = 10
        self.assertIsNone(cache.get("c", 1))


class CircuitTest(unittest.TestCase):
    def test_a_failure_opens_it_for_the_cooldown(self) -> None:
        clock = Clock()
        for policy, allowed in (("allow", True), ("deny", False)):
            circuit = Circuit(policy, cooldown=2.0, clock=clock)
            self.assertFalse(circuit.open())
            circuit.failed(ConnectionError("gone"))
            decided = circuit.decide()
            self.assertEqual((decided.allowed, decided.failed), (allowed, True))
            if not allowed:
                self.assertEqual(decided.retry_after, 2.0)
            clock.now += 1.5
            self.assertTrue(circuit.open())
            clock.now += 0.5
            self.assertFalse(circuit.open())
        circuit = Circuit("raise", clock=clock)
        circuit.failed(ConnectionError("gone"))
        with self.assertRaises(ServerUnavailable):
            circuit.decide()
        with self.assertRaises(ValueError):
            Circuit("ignore")


class LedgerProperties(unittest.TestCase):
    def test_it_holds_at_most_batch_and_spends_only_what_was_granted(self) -> None:
        for seed in SEEDS:
            rng, clock = random.Random(seed), Clock()
            batch = rng.randint(1, 20)
            ledger = _Ledger(batch, hold=1.0, clock=clock)
            granted_total = given_back = calls = 0
            for _ in range(200):
                clock.now += rng.choice([0.0, 0.1, 0.6])
                given_back += ledger.expired()
                quantity = rng.randint(1, batch)
                if ledger.spend(quantity) or ledger.refused():
                    continue
                asked, how = ledger.ask(quantity)
                self.assertGreater(asked, 0)
                # What the server answers: up to what was asked (AT_MOST), or all of it after
                # a wait (DELAY), or nothing, with a retry_after.
                if how.get("at_most"):
                    units = rng.randint(0, asked)
                    result = RateLimit(
                        units > 0, batch, 0, None if units else 0.2, 1.0, granted=units
                    )
                else:
                    self.assertEqual(how, {"delay": 1.0})
                    half = min(ledger.half, batch - ledger.held)
                    self.assertEqual(asked, max(half, quantity - ledger.held))
                    units = asked if rng.random() < 0.7 else 0
                    wait = rng.choice([0.0, 0.05, 0.3])
                    result = RateLimit(units > 0, batch, 0, None if units else 0.2, 1.0, wait=wait)
                granted_total += units
                calls += 1
                ledger.answered(asked, result)
                self.assertLessEqual(ledger.held, batch, f"seed {seed}")
                ledger.spend(quantity)
            given_back += ledger.release()
            self.assertEqual(granted_total, ledger.admitted + given_back, f"seed {seed}")
            self.assertEqual(calls, ledger.calls)


if __name__ == "__main__":
    unittest.main()
