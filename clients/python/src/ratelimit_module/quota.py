"""Quota leases for one hot limit: a process takes up to `batch` of a limit in one call
(`AT_MOST`) and spends it locally, so that one key's decisions are not bounded by one
shard's thread and a round trip each. What is unused `hold` seconds after it was taken is
given back (`REFUND`); `close()` gives back the rest.

The bound: in any window, what N processes admit exceeds what the server alone would admit
by at most N x batch (each process holds at most `batch` taken earlier; every unit it spends
was counted by the server when taken). `batch=1` is one call per decision, as `check`.

While the limit binds, a lease stays batched. A take that gets less than it asked for (the
units that refilled since the last call) marks the limit as binding; from then on a take asks
for half a batch at once, waiting for it on the server (`DELAY`, up to `hold`): the server
answers when it fits, and the process spends it from then, refusing without asking until
then. So a binding limit costs at most one call per half batch admitted, and a refusal (half
a batch does not fit within `hold`) one call per `retry_after`, not one per request. A take
that finds half a batch there at once asks for a whole batch again (`AT_MOST`). Half a batch
is at most the smallest limit of `limiters`.

    quota = Quota(limiter, [Window("api:global", 10_000, 1)], batch=50, hold=0.5)
    if quota.take():
        ...
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable, Optional, Sequence

from ._protocol import Limiter, RateLimit, Throttle
from ._resilience import policy_name
from .aio import AsyncRateLimiter
from .client import RateLimiter


def _capacity(limiter: Limiter) -> Optional[int]:
    """The most `limiter` admits at once, if it says."""
    if isinstance(limiter, Throttle):
        return limiter.max_burst + 1
    return getattr(limiter, "limit", None)


class _Ledger:
    """What a process holds of a quota, with no I/O: the units taken and not yet spent, and
    when they are given back."""

    def __init__(
        self,
        batch: int,
        hold: float,
        clock: Callable[[], float],
        limiters: Sequence[Limiter] = (),
    ):
        if batch < 1 or hold <= 0:
            raise ValueError("batch is at least 1 and hold more than 0 seconds")
        self.batch, self.hold, self.clock = batch, hold, clock
        # What a take asks for while the limit binds: half a batch, at most the least limit.
        limits = [limit for limit in map(_capacity, limiters) if limit is not None]
        self.half = min([(batch + 1) // 2, *limits])
        self.held = 0
        self.expires_at: Optional[float] = None
        # What is held may be spent from then on (a take the server made wait).
        self.available_at = float("-inf")
        # Refused by the server: no call before then.
        self.refused_until = float("-inf")
        # The last take got less than it asked for: ask for half a batch and wait for it.
        self.binding = False
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
        """Spends `quantity` of what is held, if it is there and may be spent now."""
        if self.held >= quantity and self.clock() >= self.available_at:
            self.held -= quantity
            self.admitted += quantity
            return True
        return False

    def ask(self, quantity: int) -> tuple[int, dict]:
        """What to ask the server for, and how: enough to hold `batch` (or `quantity`, if
        more), taking what fits (`AT_MOST`); while the limit binds, half a batch (no more than
        holds a batch, or what `quantity` lacks, if more) at once, waiting for it up to `hold`
        (`DELAY`)."""
        if self.binding:
            half = min(self.half, self.batch - self.held)
            return max(half, quantity - self.held), {"delay": self.hold}
        return max(self.batch, quantity) - self.held, {"at_most": True}

    def refused(self) -> bool:
        """Whether asking the server now is pointless: it refused recently, or what is held
        may not be spent yet."""
        now = self.clock()
        return now < self.refused_until or (self.held > 0 and now < self.available_at)

    def answered(self, asked: int, result: RateLimit) -> None:
        """What the server answered a take of `asked`, asked as `ask` said."""
        self.calls += 1
        waited = not self.binding
        if not result.allowed:
            # Nothing taken; it says when what was asked fits (None: never, at this size).
            if result.retry_after is not None:
                self.refused_until = self.clock() + result.retry_after
            self.binding = self.batch > 1
            return
        if waited:
            units = result.granted or 0
            self.binding = self.batch > 1 and units < asked
            self.add(units, 0.0)
        else:
            # Half a batch was there at once: the limit may no longer bind.
            self.binding = result.wait > 0
            self.add(asked, result.wait)

    def add(self, units: int, wait: float) -> None:
        if units > 0:
            now = self.clock()
            self.available_at = now + wait
            if not self.held:
                self.expires_at = now + wait + self.hold
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
        self.ledger = _Ledger(batch, hold, clock, self.limiters)
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
            asked, how = self.ledger.ask(quantity)
            result = self.limiter.check(self.limiters, asked, **how)
            if result.failed:  # decided by on_error; nothing taken
                self.ledger.calls += 1
                return result.allowed
            self.ledger.answered(asked, result)
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
        self.ledger = _Ledger(batch, hold, clock, self.limiters)
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
            asked, how = self.ledger.ask(quantity)
            result = await self.limiter.check(self.limiters, asked, **how)
            if result.failed:
                self.ledger.calls += 1
                return result.allowed
            self.ledger.answered(asked, result)
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
