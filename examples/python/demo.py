"""The client package at work (clients/python): each kind of limiter, three requests on fresh
keys, against the server at REDIS_URL (default redis://127.0.0.1:6379).

    make examples-deps                  # the package and redis-py in target/examples-venv
    target/examples-venv/bin/python examples/python/demo.py
"""

from __future__ import annotations

import math
import os

import redis

from ratelimit_module import Log, RateLimit, RateLimiter, Throttle, Window


def describe(result: RateLimit, with_times: bool = True) -> str:
    if not result.allowed:
        if not with_times:
            return "limited"
        return f"limited: retry in {math.ceil(result.retry_after)} s"
    text = f"allowed: {result.remaining} of {result.limit} left"
    return f"{text}, full again in {math.ceil(result.reset_after)} s" if with_times else text


def main() -> None:
    client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    limiter = RateLimiter(client)
    user = f"example:{os.getpid()}"  # fresh limiters on every run
    print("CL.THROTTLE: bursts of 2, then 1 per minute")
    for _ in range(3):
        print("  " + describe(limiter.check([Throttle(f"{user}:throttle", 1, 1, 60)])))
    print("RL.LOG: exactly 2 per minute")
    for _ in range(3):
        print("  " + describe(limiter.check([Log(f"{user}:log", 2, 60)])))
    # A window's times depend on where its boundaries fall, so they are left out here.
    print("RL.WINDOW: 2 per minute, sliding")
    for _ in range(3):
        print("  " + describe(limiter.check([Window(f"{user}:window", 2, 60)]), False))
    print("RL.ALL: 2 per minute and 3 per hour, together")
    limits = [Log(f"{user}:minute", 2, 60), Log(f"{user}:hour", 3, 3600)]
    for _ in range(3):
        print("  " + describe(limiter.check(limits)))
    print("RL.ACQUIRE: 1 worker at a time")
    first = limiter.acquire_lease(f"{user}:workers", 1, 30)
    second = limiter.acquire_lease(f"{user}:workers", 1, 30)
    print(f"  first: {'got a lease' if first.allowed else 'refused'}")
    print(f"  second: {'got a lease' if second.allowed else 'refused'}")
    print(f"  released: {limiter.release_lease(f'{user}:workers', first.id)}")


if __name__ == "__main__":
    main()
