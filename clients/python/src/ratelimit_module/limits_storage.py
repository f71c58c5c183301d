"""Storages for the `limits` library, so that slowapi, Flask-Limiter and anything else on
`limits` (sync, or `limits.aio`) decide with the module, one command per hit, no Lua:

    import ratelimit_module.limits_storage  # registers the ratelimit:// schemes
    limiter = Limiter(key_func=get_remote_address, storage_uri="ratelimit://localhost:6379",
                      strategy="moving-window")

- `moving-window`: `RL.LOG` (exact; refused hits count nothing);
- `sliding-window-counter`: `RL.WINDOW ... SLIDING` (refused hits count nothing; windows on
  the clock, as limits' `TimestampedSlidingWindow` storages keep them);
- `fixed-window`: `RL.WINDOW ... ANCHORED`, a window from the first hit, counting every hit,
  as limits' Redis storage counts.

`ratelimit://` and `ratelimits://` (TLS) take what `redis://` and `rediss://` take;
`ratelimit+cluster://host:port` connects to a Cluster. `async+ratelimit://`,
`async+ratelimits://` and `async+ratelimit+cluster://` are the same over `redis.asyncio`, for
`limits.aio`. A call waits at most `socket_timeout` seconds (1 unless the URI or the
options say otherwise); the frameworks' own options (`swallow_errors`, an in-memory fallback)
decide what a failed call does.

Two options of the storage itself (`storage_options` in slowapi and Flask-Limiter):
`metrics`, a `ratelimit_module.metrics.PrometheusMetrics` that counts each hit's decision
(policy `limits`) and times each call; and `shadow=True`, with which the moving window and
the sliding-window counter let a refused hit through, counted as `shadow` and logged (the
fixed window cannot: `limits` compares its counts itself).
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any, Callable, Optional, Sequence

import redis
import redis.asyncio
from limits.aio.storage import MovingWindowSupport as AsyncMovingWindowSupport
from limits.aio.storage import SlidingWindowCounterSupport as AsyncSlidingWindowCounterSupport
from limits.aio.storage import Storage as AsyncStorage
from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow

from ._answered import mark_own, waiting_on_server
from ._calls import DEFAULT_TIMEOUT, AsyncCalls, SyncCalls
from ._resilience import SERVER_FAILURES

# A fixed window's count never reaches it: `incr` counts every hit, as `limits` wants.
_UNBOUNDED = 1 << 62
# Reading a fixed window's count: a key lives exactly its window, so any window as long as
# the stored one reads the same count while the key exists (285 years, in ms).
_LONGEST_WINDOW_MS = 9_000_000_000_000
LOG = logging.getLogger("ratelimit_module")
# What a call waits at most unless told otherwise, in seconds.
_TIMEOUT = 1.0

# One storage operation: the command to send, and how to read its reply.
Call = tuple[Sequence[Any], Callable[[Any], Any]]


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class _Commands:
    """The command of each `limits` operation and the reading of its reply, without I/O:
    the sync and async storages send them."""

    def __init__(self, key_prefix: str):
        self.key_prefix = key_prefix

    def key(self, key: str) -> str:
        return f"{self.key_prefix}:{key}"

    # The fixed window.

    def incr(self, key: str, expiry: float, amount: int) -> Call:
        return (
            ("RL.WINDOW", self.key(key), _UNBOUNDED, _ms(expiry), amount, "ANCHORED", "MS"),
            lambda reply: _UNBOUNDED - int(reply[2]),
        )

    def get(self, key: str) -> Call:
        return (
            ("RL.WINDOW.COUNTS", self.key(key), _LONGEST_WINDOW_MS, "ANCHORED", "MS"),
            lambda reply: int(reply[2]),
        )

    def get_expiry(self, key: str) -> Call:
        return (("PTTL", self.key(key)), lambda reply: time.time() + max(0, int(reply)) / 1000)

    # The moving window.

    def acquire_entry(self, key: str, limit: int, expiry: float, amount: int) -> Call:
        return (
            ("RL.LOG", self.key(key), limit, _ms(expiry), amount, "MS"),
            lambda reply: int(reply[0]) == 0,
        )

    def get_moving_window(self, key: str, expiry: float) -> Call:
        def read(reply: Any) -> tuple[float, int]:
            count, oldest_leaves_in, _ = (int(value) for value in reply)
            now = time.time()
            if count == 0:
                return now, 0
            # The window starts with the oldest entry still in it.
            return now + oldest_leaves_in / 1000 - expiry, count

        return ("RL.LOG.COUNTS", self.key(key), _ms(expiry), "MS"), read

    # The sliding-window counter.

    def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: float, amount: int
    ) -> Call:
        return (
            ("RL.WINDOW", self.key(key), limit, _ms(expiry), amount, "SLIDING", "MS"),
            lambda reply: int(reply[0]) == 0,
        )

    def get_sliding_window(self, key: str, expiry: float) -> Call:
        def read(reply: Any) -> tuple[int, float, int, float]:
            previous, previous_in, current, current_in = (int(value) for value in reply)
            return previous, previous_in / 1000, current, current_in / 1000

        return ("RL.WINDOW.COUNTS", self.key(key), _ms(expiry), "SLIDING", "MS"), read

    def delete(self, key: str) -> Call:
        return ("DEL", self.key(key)), lambda reply: None


def _client_options(options: dict) -> dict:
    """The options of the redis-py client: a call bounded by a timeout unless said, without
    the storage's own."""
    own = ("metrics", "shadow", "timeout")
    options = {name: value for name, value in options.items() if name not in own}
    options.setdefault("socket_timeout", _TIMEOUT)
    options.setdefault("socket_connect_timeout", _TIMEOUT)
    return options


def deadline(options: dict) -> Optional[float]:
    """The package's own deadline on each call (`timeout`, seconds; 1 by default, whatever
    the client's retries)."""
    return options.get("timeout", DEFAULT_TIMEOUT)


class _Observer:
    """The storage's metrics and shadow mode: what each hit decided, and whether a refused
    one goes through."""

    POLICY = "limits"

    def __init__(self, options: dict):
        self.metrics = options.get("metrics")
        self.shadow = bool(options.get("shadow"))

    def timed(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.server_call(seconds)

    def admitted(self, admitted: bool) -> bool:
        """A hit's decision, counted; True for a refused one in shadow mode."""
        outcome = "allowed" if admitted else ("shadow" if self.shadow else "refused")
        if self.metrics is not None:
            self.metrics.decision(self.POLICY, outcome)
        if outcome == "shadow":
            LOG.warning("rate limiter: shadow: limits would refuse a hit")
        return admitted or self.shadow


def _connect(uri: str, options: dict, standalone: Any, cluster_module: str) -> Any:
    """The client a storage URI names: `standalone` (`redis.Redis` or `redis.asyncio.Redis`)
    over TLS for `ratelimits`, or `cluster_module`'s `RedisCluster` for `+cluster`, given the
    options redis-py takes."""
    scheme, rest = uri.split("://", 1)
    if scheme.endswith("+cluster"):
        cluster = importlib.import_module(cluster_module).RedisCluster
        return cluster.from_url(f"redis://{rest}", **_client_options(options))
    target = "rediss" if scheme.endswith("ratelimits") else "redis"
    return standalone.from_url(f"{target}://{rest}", **_client_options(options))


class RateLimitModuleStorage(
    Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow
):
    """`limits` storage on the redis-ratelimit module. Its sliding windows start on the clock
    (multiples of the window since the epoch), which limits reads from
    `TimestampedSlidingWindow`."""

    STORAGE_SCHEME = ["ratelimit", "ratelimits", "ratelimit+cluster"]
    PREFIX = "LIMITS"

    def __init__(
        self, uri: str, wrap_exceptions: bool = False, key_prefix: str = PREFIX, **options: Any
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self.commands = _Commands(key_prefix)
        self.observer = _Observer(options)
        self.client: Any = _connect(uri, options, redis.Redis, "redis.cluster")
        self.call = SyncCalls(self.client, deadline(options))

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return redis.RedisError

    def _run(self, call: Call) -> Any:
        command, read = call
        started = time.perf_counter()
        try:
            with waiting_on_server():
                reply = self.call(*command)
        except SERVER_FAILURES:
            # What the framework makes of it (a 500, or its own fallback) is not the
            # service's answer (`_answered`).
            mark_own()
            raise
        self.observer.timed(time.perf_counter() - started)
        return read(reply)

    def incr(self, key: str, expiry: int, amount: int = 1, **_: Any) -> int:
        return self._run(self.commands.incr(key, expiry, amount))

    def get(self, key: str) -> int:
        return self._run(self.commands.get(key))

    def get_expiry(self, key: str) -> float:
        return self._run(self.commands.get_expiry(key))

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self.observer.admitted(
            self._run(self.commands.acquire_entry(key, limit, expiry, amount))
        )

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        return self._run(self.commands.get_moving_window(key, expiry))

    def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: int, amount: int = 1
    ) -> bool:
        return self.observer.admitted(
            self._run(self.commands.acquire_sliding_window_entry(key, limit, expiry, amount))
        )

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        return self._run(self.commands.get_sliding_window(key, expiry))

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.clear(key)

    def check(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def reset(self) -> Optional[int]:
        keys = list(self.client.scan_iter(match=f"{self.commands.key_prefix}:*"))
        for key in keys:
            self.client.delete(key)
        return len(keys)

    def clear(self, key: str) -> None:
        self._run(self.commands.delete(key))


class AsyncRateLimitModuleStorage(
    AsyncStorage,
    AsyncMovingWindowSupport,
    AsyncSlidingWindowCounterSupport,
    TimestampedSlidingWindow,
):
    """`limits.aio` storage on the redis-ratelimit module, over `redis.asyncio`: the same
    commands as `RateLimitModuleStorage`, awaited."""

    STORAGE_SCHEME = ["async+ratelimit", "async+ratelimits", "async+ratelimit+cluster"]
    PREFIX = "LIMITS"

    def __init__(
        self, uri: str, wrap_exceptions: bool = False, key_prefix: str = PREFIX, **options: Any
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self.commands = _Commands(key_prefix)
        self.observer = _Observer(options)
        self.client: Any = _connect(uri, options, redis.asyncio.Redis, "redis.asyncio.cluster")
        self.call = AsyncCalls(self.client, deadline(options))

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return redis.RedisError

    async def _run(self, call: Call) -> Any:
        command, read = call
        started = time.perf_counter()
        try:
            with waiting_on_server():
                reply = await self.call(*command)
        except SERVER_FAILURES:
            mark_own()
            raise
        self.observer.timed(time.perf_counter() - started)
        return read(reply)

    async def incr(self, key: str, expiry: int, amount: int = 1, **_: Any) -> int:
        return await self._run(self.commands.incr(key, expiry, amount))

    async def get(self, key: str) -> int:
        return await self._run(self.commands.get(key))

    async def get_expiry(self, key: str) -> float:
        return await self._run(self.commands.get_expiry(key))

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self.observer.admitted(
            await self._run(self.commands.acquire_entry(key, limit, expiry, amount))
        )

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        return await self._run(self.commands.get_moving_window(key, expiry))

    async def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: int, amount: int = 1
    ) -> bool:
        return self.observer.admitted(
            await self._run(self.commands.acquire_sliding_window_entry(key, limit, expiry, amount))
        )

    async def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        return await self._run(self.commands.get_sliding_window(key, expiry))

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self.clear(key)

    async def check(self) -> bool:
        try:
            return bool(await self.client.ping())
        except redis.RedisError:
            return False

    async def reset(self) -> Optional[int]:
        keys = [key async for key in self.client.scan_iter(match=f"{self.commands.key_prefix}:*")]
        for key in keys:
            await self.client.delete(key)
        return len(keys)

    async def clear(self, key: str) -> None:
        await self._run(self.commands.delete(key))
