"""Calling the module's commands from Python with redis-py, reading the five-integer reply
into a typed result.

    pip install -r examples/python/requirements.txt
    python examples/python/rate_limit.py            # REDIS_URL defaults to redis://127.0.0.1:6379
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import redis


@dataclass(frozen=True)
class RateLimit:
    """What CL.THROTTLE, RL.WINDOW and RL.LOG answer: the same five integers."""

    limited: bool  # True: refused, and not counted
    limit: int  # the most admitted at once
    remaining: int  # how much more would be admitted right now
    retry_after: int | None  # when a refused request may retry; None when admitted or never
    reset_after: int  # when the limiter is back to full capacity

    @classmethod
    def from_reply(cls, reply: list[int]) -> RateLimit:
        limited, limit, remaining, retry_after, reset_after = reply
        return cls(
            limited=limited == 1,
            limit=limit,
            remaining=remaining,
            retry_after=None if retry_after < 0 else retry_after,
            reset_after=reset_after,
        )


def throttle(client: redis.Redis, key: str, max_burst: int, count: int, period: int,
             quantity: int = 1) -> RateLimit:
    """GCRA: `count` per `period` seconds, bursts of `max_burst + 1`."""
    return RateLimit.from_reply(
        client.execute_command("CL.THROTTLE", key, max_burst, count, period, quantity))


def window(client: redis.Redis, key: str, limit: int, seconds: int, quantity: int = 1,
           algorithm: str = "SLIDING") -> RateLimit:
    """A window counter: `limit` per `seconds`, FIXED, SLIDING or BUCKETS n."""
    return RateLimit.from_reply(
        client.execute_command("RL.WINDOW", key, limit, seconds, quantity, *algorithm.split()))


def log(client: redis.Redis, key: str, limit: int, seconds: int, quantity: int = 1) -> RateLimit:
    """An exact sliding log: at most `limit` in any `seconds`."""
    return RateLimit.from_reply(client.execute_command("RL.LOG", key, limit, seconds, quantity))


def describe(result: RateLimit, with_times: bool = True) -> str:
    if result.limited:
        return f"limited: retry in {result.retry_after} s" if with_times else "limited"
    text = f"allowed: {result.remaining} of {result.limit} left"
    return f"{text}, full again in {result.reset_after} s" if with_times else text


def main() -> None:
    client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    user = f"example:{os.getpid()}"  # a fresh limiter on every run
    print("CL.THROTTLE: bursts of 2, then 1 per minute")
    for _ in range(3):
        print("  " + describe(throttle(client, f"{user}:throttle", 1, 1, 60)))
    print("RL.LOG: exactly 2 per minute")
    for _ in range(3):
        print("  " + describe(log(client, f"{user}:log", 2, 60)))
    # A window's times depend on where its boundaries fall, so they are left out here.
    print("RL.WINDOW: 2 per minute, sliding")
    for _ in range(3):
        print("  " + describe(window(client, f"{user}:window", 2, 60), with_times=False))


if __name__ == "__main__":
    main()
