"""The asynchronous client, over `redis.asyncio` (`Redis` or `cluster.RedisCluster`): the
same calls as `ratelimit_module.RateLimiter`, awaited."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from . import _steps as steps
from ._calls import DEFAULT_TIMEOUT, AsyncCalls
from ._protocol import (
    Counts,
    Lease,
    Limiter,
    Options,
    RateLimit,
    TopKey,
    lease_command,
    release_command,
    renew_command,
)
from ._resilience import Decisions
from ._steps import CheckOptions, drive_async

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11


class AsyncRateLimiter:
    """Every command of the module on one asyncio client, with typed results; `timeout`,
    `on_error`, `cooldown`, `deny_cache`, `metrics` and `shadow` as for `RateLimiter` (a
    call is awaited at most `timeout` seconds, whatever the client's retries)."""

    def __init__(
        self,
        client: Any,
        *,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        on_error: str = "raise",
        cooldown: float = 1.0,
        deny_cache: Optional[int] = None,
        metrics: Optional[Any] = None,
        shadow: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.client = client
        self.call = AsyncCalls(client, timeout)
        self.decisions = Decisions(on_error, cooldown, deny_cache, metrics, shadow, clock)

    async def _decide(
        self, limiters: Sequence[Limiter], options: Options, shadow: Optional[bool] = None
    ) -> RateLimit:
        """One decision: from the deny cache, from the server, or by `on_error`."""
        return await drive_async(self.call, steps.decide(self.decisions, limiters, options, shadow))

    async def check(
        self, limiters: Sequence[Limiter], quantity: int = 1, **options: Unpack[CheckOptions]
    ) -> RateLimit:
        """One request against every limiter, all or nothing, in one call. The keywords are
        `CheckOptions`' (`refund`, `block`, `delay`, `at_most`, `force`, and `shadow`: this
        call's shadow mode, the client's unless given)."""
        return await self._decide(limiters, *steps.check_options(quantity, options))

    async def peek(self, limiters: Sequence[Limiter], quantity: int = 1) -> RateLimit:
        """What `check` would answer now, without writing."""
        return await self._decide(limiters, Options(quantity, read_only=True))

    async def acquire(
        self, limiters: Sequence[Limiter], quantity: int = 1, timeout: float = 0.0
    ) -> RateLimit:
        """Waits for a slot (one call with `DELAY`, then `asyncio.sleep` of the wait), or
        returns at once, refused, when the turn is further than `timeout` seconds away."""
        outcome = await self.check(limiters, quantity, delay=timeout)
        if outcome.allowed and outcome.wait > 0:
            await asyncio.sleep(outcome.wait)
        return outcome

    async def counts(self, limiter: Limiter) -> Counts:
        return await drive_async(self.call, steps.counts(limiter))

    async def _lease(self, args: list) -> Lease:
        return await drive_async(self.call, steps.lease(self.decisions, args))

    async def _held(self, args: list, renewing: bool) -> bool:
        return await drive_async(self.call, steps.held(self.decisions, args, renewing))

    async def acquire_lease(self, key: str, limit: int, lease: float, quantity: int = 1) -> Lease:
        return await self._lease(lease_command(key, limit, lease, quantity))

    async def peek_lease(self, key: str, limit: int, lease: float, quantity: int = 1) -> Lease:
        return await self._lease(lease_command(key, limit, lease, quantity, True))

    async def release_lease(self, key: str, lease_id: int) -> bool:
        if lease_id == 0:
            return False
        return await self._held(release_command(key, lease_id), renewing=False)

    async def renew_lease(self, key: str, lease_id: int, lease: float) -> bool:
        if lease_id == 0:
            return self.decisions.kept_without_server()
        return await self._held(renew_command(key, lease_id, lease), renewing=True)

    async def top(self, count: int = 10) -> list[TopKey]:
        """`RL.TOP`: the keys refused most over the current and the previous minute, on the
        server, or merged from every primary of a Cluster."""
        return await drive_async(self.call, steps.top(self.client, count))
