"""Quota leases for one hot limit: a process takes up to `batch` of a limit in one call
(`AT_MOST`) and spends it locally, so that one key's decisions are not bounded by one
shard's thread and a round trip each. What is unused `hold` seconds after it was taken is
given back (`REFUND`); `close()` gives back the rest.

The bound: in any window, what N processes admit exceeds what the server alone would admit
by at most N x batch (each process holds at most `batch` taken earlier; every unit it spends
was counted by the server when taken). `batch=1` is one call per decision, as `check`.

While the limit binds, a take that gets nothing learns when one unit fits (`retry_after`):
until then `take()` refuses without asking, so a refused quota costs the server one call per
`retry_after`, not one per request.

    quota = Quota(limiter, [Window("api:global", 10_000, 1)], batch=50, hold=0.5)
    if quota.take():
        ...
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable, Optional, Sequence

from ._protocol import Limiter
from ._resilience import policy_name
from .aio import AsyncRateLimiter
from .client import RateLimiter


class _Ledger:
    """What a process holds of a quota, with no I/O: the units taken and not yet spent, and
    when they are given back."""

    def __init__(self, batch: int, hold: float, clock: Callable[[], float]):
        if batch < 1 or hold <= 0:
            raise ValueError("batch is at least 1 and hold more than 0 seconds")
        self.batch, self.hold, self.clock = batch, hold, clock
        self.held = 0
        self.expires_at: Optional[float] = None
        # Refused by the server: no call before then.
        self.refused_until = float("-inf")
        # Decisions taken, units admitted, and calls to the server: what a lease saves.
        self.decisions = self.admitted = self.calls = 0

    def expired(self) -> int:
        """The units to give back now (their hold ended), forgetting them."""
        if self.held and self.expires_at is not None and self.clock() >= self.expires_at:
            return self.release()
        return 0

    def release(self) -> int:
        units, self.held, self.expires_at = self.held, 0, None
        return units

    def spend(self, quantity: int) -> bool:
        """Spends `quantity` of what is held, if it is there."""
        if self.held >= quantity:
            self.held -= quantity
            self.admitted += quantity
            return True
        return False

    def wanted(self, quantity: int) -> int:
        """How much to ask for: enough to hold `batch` (or `quantity`, if more)."""
        return max(self.batch, quantity) - self.held

    def refused(self) -> bool:
        """Whether the server refused recently enough that asking again is pointless."""
        return self.clock() < self.refused_until

    def refused_for(self, retry_after: Optional[float]) -> None:
        """The server took nothing and said when one unit fits (None: never, at this size)."""
        if retry_after is not None:
            self.refused_until = self.clock() + retry_after

    def granted(self, units: int) -> None:
        self.calls += 1
        if units > 0:
            if not self.held:
                self.expires_at = self.clock() + self.hold
            self.held += units

    def delay(self) -> Optional[float]:
        """Seconds until what is held is given back, if anything is."""
        if not self.held or self.expires_at is None:
            return None
        return max(0.0, self.expires_at - self.clock())


class Quota:
    """Leases of `limiters` (one call's worth: they are taken all or nothing) through a
    `RateLimiter`, `batch` units at a time, each held at most `hold` seconds. Thread-safe."""

    def __init__(
        self,
        limiter: RateLimiter,
        limiters: Sequence[Limiter],
        batch: int = 1,
        hold: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.limiter, self.limiters = limiter, list(limiters)
        self.ledger = _Ledger(batch, hold, clock)
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None

    def take(self, quantity: int = 1) -> bool:
        """Whether a request of `quantity` may go ahead: from what this process holds, or
        after taking up to `batch` more in one call."""
        with self._lock:
            self.ledger.decisions += 1
            self._give_back(self.ledger.expired())
            if self.ledger.spend(quantity):
                self.limiter.decisions.count(policy_name(self.limiters), "quota")
                return True
            if self.ledger.refused():
                return False
            result = self.limiter.check(self.limiters, self.ledger.wanted(quantity), at_most=True)
            if result.failed:  # decided by on_error; nothing taken
                self.ledger.granted(0)
                return result.allowed
            if not result.allowed:
                self.ledger.refused_for(result.retry_after)
            self.ledger.granted(result.granted or 0)
            self._arm()
            return self.ledger.spend(quantity)

    def close(self) -> None:
        """Gives back whatever is held."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._give_back(self.ledger.release())

    def _give_back(self, units: int) -> None:
        if units:
            self.limiter.check(self.limiters, units, refund=True)

    def _arm(self) -> None:
        # Gives back at the hold's end even if no request comes to notice it.
        delay = self.ledger.delay()
        if delay is not None and self._timer is None:
            self._timer = threading.Timer(delay, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            self._timer = None
            self._give_back(self.ledger.expired())
            self._arm()


class AsyncQuota:
    """`Quota` through an `AsyncRateLimiter`, for one event loop."""

    def __init__(
        self,
        limiter: AsyncRateLimiter,
        limiters: Sequence[Limiter],
        batch: int = 1,
        hold: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.limiter, self.limiters = limiter, list(limiters)
        self.ledger = _Ledger(batch, hold, clock)
        self._lock = asyncio.Lock()
        self._timer: Optional[asyncio.TimerHandle] = None

    async def take(self, quantity: int = 1) -> bool:
        async with self._lock:
            self.ledger.decisions += 1
            await self._give_back(self.ledger.expired())
            if self.ledger.spend(quantity):
                self.limiter.decisions.count(policy_name(self.limiters), "quota")
                return True
            if self.ledger.refused():
                return False
            result = await self.limiter.check(
                self.limiters, self.ledger.wanted(quantity), at_most=True
            )
            if result.failed:
                self.ledger.granted(0)
                return result.allowed
            if not result.allowed:
                self.ledger.refused_for(result.retry_after)
            self.ledger.granted(result.granted or 0)
            self._arm()
            return self.ledger.spend(quantity)

    async def close(self) -> None:
        async with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            await self._give_back(self.ledger.release())

    async def _give_back(self, units: int) -> None:
        if units:
            await self.limiter.check(self.limiters, units, refund=True)

    def _arm(self) -> None:
        delay = self.ledger.delay()
        if delay is not None and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                delay, lambda: asyncio.ensure_future(self._expire())
            )

    async def _expire(self) -> None:
        async with self._lock:
            self._timer = None
            await self._give_back(self.ledger.expired())
            self._arm()
