"""The sync and async clients on a Cluster (REDIS_URL: one of its nodes): keys in every slot
range, and several limiters in one hash slot; and the `limits` storages of
`ratelimit+cluster://` and `async+ratelimit+cluster://`. Run by tests/clients.rs against a live
cluster.
"""

from __future__ import annotations

import asyncio
import os

import redis.asyncio.cluster
from limits import parse
from limits.aio.strategies import MovingWindowRateLimiter as AsyncMovingWindowRateLimiter
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter
from redis.cluster import RedisCluster

import ratelimit_module.limits_storage  # noqa: F401  (registers the ratelimit schemes)
from ratelimit_module import (
    AsyncRateLimiter,
    AsyncSharedLists,
    Log,
    RateLimiter,
    SharedLists,
    Throttle,
)

URL = os.environ["REDIS_URL"]


def check_sync() -> None:
    limiter = RateLimiter(RedisCluster.from_url(URL))
    for i in range(30):
        limits = [Log(f"sync:{i}", 1, 60)]
        assert limiter.check(limits).allowed
        assert not limiter.check(limits).allowed
    both = [Log("{sync}:a", 2, 60), Throttle("{sync}:b", 0, 1, 60)]
    assert limiter.check(both).allowed
    assert not limiter.check(both).allowed
    assert limiter.acquire([Log("sync:acquire", 1, 60)], timeout=1).allowed
    # RL.TOP from every primary, merged: each sync:i refused once, {sync}:a once.
    top = limiter.top(100)
    refused = {row.key: row.refusals for row in top}
    assert all(refused.get(f"sync:{i}") == 1 for i in range(30)), top
    assert refused["{sync}:b"] == 1, top
    # The lists' writes: one transaction on the hash's node.
    cluster = RedisCluster.from_url(URL)
    lists = SharedLists(cluster, "sync:lists")
    lists.add("deny", "203.0.113.7")
    lists.remove("deny", "203.0.113.7")
    lists.add("allow", "svc-a")
    assert lists.read() == {"allow": {"svc-a": "1"}}, lists.read()
    assert cluster.hget("sync:lists", "version") == b"3"


async def check_async() -> None:
    client = redis.asyncio.cluster.RedisCluster.from_url(URL)
    limiter = AsyncRateLimiter(client)
    for i in range(30):
        limits = [Log(f"async:{i}", 1, 60)]
        assert (await limiter.check(limits)).allowed
        assert not (await limiter.peek(limits)).allowed
    both = [Log("{async}:a", 2, 60), Throttle("{async}:b", 0, 1, 60)]
    assert (await limiter.check(both)).allowed
    assert not (await limiter.check(both)).allowed
    top = {row.key: row.refusals for row in await limiter.top(100)}
    assert top["{async}:b"] == 1 and "async:0" not in top, top  # peeks are not refusals
    lists = AsyncSharedLists(client, "async:lists")
    await lists.add("deny", "203.0.113.7")
    await lists.remove("deny", "203.0.113.7")
    await lists.add("allow", "svc-a")
    assert await lists.read() == {"allow": {"svc-a": "1"}}
    assert await client.hget("async:lists", "version") == b"3"
    await client.aclose()


def check_limits_sync() -> None:
    """`ratelimit+cluster://`: a Cluster client, so keys in every slot range are routed."""
    storage = storage_from_string(URL.replace("redis://", "ratelimit+cluster://", 1))
    assert isinstance(storage.client, RedisCluster), storage.client
    strategy = MovingWindowRateLimiter(storage)
    once = parse("1/minute")
    for i in range(30):
        assert strategy.hit(once, "limits-sync", str(i))
        assert not strategy.hit(once, "limits-sync", str(i))


async def check_limits_async() -> None:
    storage = storage_from_string(URL.replace("redis://", "async+ratelimit+cluster://", 1))
    assert isinstance(storage.client, redis.asyncio.cluster.RedisCluster), storage.client
    strategy = AsyncMovingWindowRateLimiter(storage)
    once = parse("1/minute")
    for i in range(30):
        assert await strategy.hit(once, "limits-async", str(i))
        assert not await strategy.hit(once, "limits-async", str(i))
    await storage.client.aclose()


check_sync()
asyncio.run(check_async())
check_limits_sync()
asyncio.run(check_limits_async())
print("ok")
