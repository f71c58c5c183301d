"""The asynchronous client, over `redis.asyncio` (`Redis` or `cluster.RedisCluster`): the
same calls as `ratelimit_module.RateLimiter`, awaited."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional, Sequence

from ._protocol import (
    Counts,
    Lease,
    Limiter,
    Options,
    RateLimit,
    TopKey,
    command,
    counts_command,
    counts_result,
    lease_command,
    millis,
    node_replies,
    result,
    top_keys,
)
from ._resilience import SERVER_FAILURES, Decisions


class AsyncRateLimiter:
    """Every command of the module on one asyncio client, with typed results; `on_error`,
    `cooldown`, `deny_cache`, `metrics` and `shadow` as for `RateLimiter` (a call waits at
    most the client's `socket_timeout`)."""

    def __init__(
        self,
        client: Any,
        *,
        on_error: str = "raise",
        cooldown: float = 1.0,
        deny_cache: Optional[int] = None,
        metrics: Optional[Any] = None,
        shadow: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.client = client
        self.decisions = Decisions(on_error, cooldown, deny_cache, metrics, shadow, clock)

    async def _decide(
        self, limiters: Sequence[Limiter], options: Options, shadow: Optional[bool] = None
    ) -> RateLimit:
        key, decided = self.decisions.before(limiters, options, shadow)
        if decided is not None:
            return decided
        started = time.perf_counter()
        try:
            reply = await self.client.execute_command(*command(limiters, options))
        except SERVER_FAILURES as error:
            return self.decisions.failed(error, limiters)
        return self.decisions.after(
            key,
            limiters,
            options,
            result(reply, limiters, options),
            time.perf_counter() - started,
            shadow,
        )

    async def check(
        self,
        limiters: Sequence[Limiter],
        quantity: int = 1,
        *,
        refund: bool = False,
        block: Optional[float] = None,
        delay: Optional[float] = None,
        at_most: bool = False,
        force: bool = False,
        shadow: Optional[bool] = None,
    ) -> RateLimit:
        """One request against every limiter, all or nothing, in one call (`shadow`: this
        call's shadow mode, the limiter's unless given)."""
        return await self._decide(
            limiters, Options(quantity, refund, block, delay, at_most, force), shadow
        )

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
        reply = await self.client.execute_command(*counts_command(limiter))
        return counts_result(limiter, reply)

    async def acquire_lease(self, key: str, limit: int, lease: float, quantity: int = 1) -> Lease:
        return Lease.from_reply(
            await self.client.execute_command(*lease_command(key, limit, lease, quantity))
        )

    async def peek_lease(self, key: str, limit: int, lease: float, quantity: int = 1) -> Lease:
        return Lease.from_reply(
            await self.client.execute_command(*lease_command(key, limit, lease, quantity, True))
        )

    async def release_lease(self, key: str, lease_id: int) -> bool:
        return int(await self.client.execute_command("RL.RELEASE", key, lease_id)) == 1

    async def renew_lease(self, key: str, lease_id: int, lease: float) -> bool:
        return (
            int(await self.client.execute_command("RL.RENEW", key, lease_id, millis(lease), "MS"))
            == 1
        )

    async def top(self, count: int = 10) -> list[TopKey]:
        """`RL.TOP`: the keys refused most over the current and the previous minute, on the
        server, or merged from every primary of a Cluster."""
        if hasattr(self.client, "get_primaries"):
            reply = await self.client.execute_command(
                "RL.TOP", count, target_nodes=self.client.PRIMARIES
            )
        else:
            reply = await self.client.execute_command("RL.TOP", count)
        return top_keys(node_replies(reply), count)
