"""The asynchronous client, over `redis.asyncio` (`Redis` or `cluster.RedisCluster`): the
same calls as `ratelimit_module.RateLimiter`, awaited."""

from __future__ import annotations

import asyncio
from typing import Any, Optional, Sequence

from ._protocol import (Counts, Lease, Limiter, Options, RateLimit, command, counts_command,
                        counts_result, lease_command, millis, result)


class AsyncRateLimiter:
    """Every command of the module on one asyncio client, with typed results."""

    def __init__(self, client: Any):
        self.client = client

    async def check(self, limiters: Sequence[Limiter], quantity: int = 1, *,
                    refund: bool = False, block: Optional[float] = None,
                    delay: Optional[float] = None, at_most: bool = False,
                    force: bool = False) -> RateLimit:
        """One request against every limiter, all or nothing, in one call."""
        options = Options(quantity, refund, block, delay, at_most, force)
        reply = await self.client.execute_command(*command(limiters, options))
        return result(reply, limiters, options)

    async def peek(self, limiters: Sequence[Limiter], quantity: int = 1) -> RateLimit:
        """What `check` would answer now, without writing."""
        options = Options(quantity, read_only=True)
        reply = await self.client.execute_command(*command(limiters, options))
        return result(reply, limiters, options)

    async def acquire(self, limiters: Sequence[Limiter], quantity: int = 1,
                      timeout: float = 0.0) -> RateLimit:
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
            await self.client.execute_command(*lease_command(key, limit, lease, quantity)))

    async def peek_lease(self, key: str, limit: int, lease: float, quantity: int = 1) -> Lease:
        return Lease.from_reply(
            await self.client.execute_command(*lease_command(key, limit, lease, quantity, True)))

    async def release_lease(self, key: str, lease_id: int) -> bool:
        return int(await self.client.execute_command("RL.RELEASE", key, lease_id)) == 1

    async def renew_lease(self, key: str, lease_id: int, lease: float) -> bool:
        return int(await self.client.execute_command("RL.RENEW", key, lease_id, millis(lease),
                                                     "MS")) == 1
