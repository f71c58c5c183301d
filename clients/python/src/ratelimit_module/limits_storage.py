"""A storage for the `limits` library, so that slowapi, Flask-Limiter and anything else on
`limits` decide with the module, one command per hit, no Lua:

    import ratelimit_module.limits_storage  # registers the ratelimit:// schemes
    limiter = Limiter(key_func=get_remote_address, storage_uri="ratelimit://localhost:6379",
                      strategy="moving-window")

| `limits` strategy | Command |
|---|---|
| `moving-window` | `RL.LOG` (exact; refused hits count nothing) |
| `sliding-window-counter` | `RL.WINDOW ... SLIDING` (refused hits count nothing) |
| `fixed-window` | `RL.WINDOW ... FIXED`, counting every hit as `limits` asks of its storages |

`ratelimit://` and `ratelimits://` (TLS) take what `redis://` and `rediss://` take;
`ratelimit+cluster://host:port` connects to a Cluster.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import redis
from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage

# A fixed window's count never reaches it: `incr` counts every hit, as `limits` wants.
_UNBOUNDED = 1 << 62
# Reading a fixed window's count: a key lives exactly its window, so any window as long as
# the stored one reads the same count while the key exists (285 years, in ms).
_LONGEST_WINDOW_MS = 9_000_000_000_000


class RateLimitModuleStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport):
    """`limits` storage on the redis-ratelimit module."""

    STORAGE_SCHEME = ["ratelimit", "ratelimits", "ratelimit+cluster"]
    PREFIX = "LIMITS"

    def __init__(self, uri: str, wrap_exceptions: bool = False, key_prefix: str = PREFIX,
                 **options: Any) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self.key_prefix = key_prefix
        scheme, rest = uri.split("://", 1)
        if scheme == "ratelimit+cluster":
            from redis.cluster import RedisCluster

            self.client: Any = RedisCluster.from_url(f"redis://{rest}", **options)
        else:
            target = "rediss" if scheme == "ratelimits" else "redis"
            self.client = redis.Redis.from_url(f"{target}://{rest}", **options)

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return redis.RedisError

    def _key(self, key: str) -> str:
        return f"{self.key_prefix}:{key}"

    # The fixed window.

    def incr(self, key: str, expiry: int, amount: int = 1, **_: Any) -> int:
        reply = self.client.execute_command(
            "RL.WINDOW", self._key(key), _UNBOUNDED, _ms(expiry), amount, "FIXED", "MS")
        return _UNBOUNDED - int(reply[2])

    def get(self, key: str) -> int:
        reply = self.client.execute_command(
            "RL.WINDOW.COUNTS", self._key(key), _LONGEST_WINDOW_MS, "FIXED", "MS")
        return int(reply[2])

    def get_expiry(self, key: str) -> float:
        left = int(self.client.pttl(self._key(key)))
        return time.time() + max(0, left) / 1000

    # The moving window.

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        reply = self.client.execute_command("RL.LOG", self._key(key), limit, _ms(expiry), amount,
                                             "MS")
        return int(reply[0]) == 0

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        count, oldest_leaves_in, _ = (int(value) for value in self.client.execute_command(
            "RL.LOG.COUNTS", self._key(key), _ms(expiry), "MS"))
        now = time.time()
        if count == 0:
            return now, 0
        # The window starts with the oldest entry still in it.
        return now + oldest_leaves_in / 1000 - expiry, count

    # The sliding-window counter.

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int,
                                     amount: int = 1) -> bool:
        reply = self.client.execute_command(
            "RL.WINDOW", self._key(key), limit, _ms(expiry), amount, "SLIDING", "MS")
        return int(reply[0]) == 0

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        previous, previous_in, current, current_in = (int(value) for value in
                                                     self.client.execute_command(
            "RL.WINDOW.COUNTS", self._key(key), _ms(expiry), "SLIDING", "MS"))
        return previous, previous_in / 1000, current, current_in / 1000

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.clear(key)

    # Housekeeping.

    def check(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def reset(self) -> Optional[int]:
        keys = list(self.client.scan_iter(match=f"{self.key_prefix}:*"))
        for key in keys:
            self.client.delete(key)
        return len(keys)

    def clear(self, key: str) -> None:
        self.client.delete(self._key(key))


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
