"""A small helper over redis-py for the ratelimit module: each command's reply as a typed
result, and the HTTP RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11) made from it.

    from ratelimit_client import Throttle, Window, check, headers
    result = check(client, [Throttle("api:alice", max_burst=9, count=10, period=1)])
    if not result.allowed:
        ...  # answer 429 with headers(result)

    # Or wait for a slot, up to 2 seconds, instead of being refused:
    result = acquire_slot(client, [Throttle("api:alice", 9, 10, 1)], timeout=2)

Times are asked of the module in milliseconds and given in seconds (floats); the header
fields round them up to whole seconds, so a client that waits them is never early.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence, Union

import redis


@dataclass(frozen=True)
class RateLimit:
    """What every limiter command answers, typed."""

    allowed: bool  # admitted, and counted; False: refused, and not counted
    limit: int  # the most admitted at once
    remaining: int  # how much more would be admitted right now
    retry_after: float | None  # seconds until a refused request fits; None if admitted or never
    reset_after: float  # seconds until the limiter is back to full capacity
    # RL.ALL: each limiter's own result, in the order given (empty for a single limiter).
    each: tuple[RateLimit, ...] = field(default=(), compare=False)
    # With a delay allowed: seconds to wait before going ahead (0: at once, or refused).
    wait: float = 0.0

    @classmethod
    def from_reply(cls, reply: Sequence[int], each: Sequence[RateLimit] = (),
                   wait_ms: int = 0) -> RateLimit:
        """Reads `[limited, limit, remaining, retry_after, reset_after]` given in ms."""
        limited, limit, remaining, retry_after, reset_after = reply[:5]
        return cls(
            allowed=limited == 0,
            limit=limit,
            remaining=remaining,
            retry_after=None if retry_after < 0 else retry_after / 1000,
            reset_after=reset_after / 1000,
            each=tuple(each),
            wait=wait_ms / 1000,
        )


@dataclass(frozen=True)
class Throttle:
    """GCRA (CL.THROTTLE): `count` per `period` seconds, in bursts of `max_burst + 1`."""

    key: str
    max_burst: int
    count: int
    period: float
    name: str = "burst"  # the policy's name in the HTTP fields

    command, in_all = "CL.THROTTLE", "THROTTLE"  # its command, and its keyword in RL.ALL

    def arguments(self) -> list:
        return [self.max_burst, self.count, _millis(self.period)]

    def keywords(self) -> list:
        return []

    def window_seconds(self) -> float:
        """How long an empty bucket takes to fill: the window of its policy."""
        return (self.max_burst + 1) * self.period / self.count


@dataclass(frozen=True)
class Window:
    """A window counter (RL.WINDOW): `limit` per `window` seconds, SLIDING, FIXED or BUCKETS n."""

    key: str
    limit: int
    window: float
    algorithm: str = "SLIDING"
    name: str = "window"

    command, in_all = "RL.WINDOW", "WINDOW"

    def arguments(self) -> list:
        return [self.limit, _millis(self.window)]

    def keywords(self) -> list:
        return self.algorithm.split()

    def window_seconds(self) -> float:
        return self.window


@dataclass(frozen=True)
class Log:
    """An exact sliding log (RL.LOG): at most `limit` in any `window` seconds."""

    key: str
    limit: int
    window: float
    name: str = "log"

    command, in_all = "RL.LOG", "LOG"

    def arguments(self) -> list:
        return [self.limit, _millis(self.window)]

    def keywords(self) -> list:
        return []

    def window_seconds(self) -> float:
        return self.window


Limiter = Union[Throttle, Window, Log]


def _millis(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def check(client: redis.Redis, limiters: Sequence[Limiter], quantity: int = 1,
          refund: bool = False, delay: float | None = None) -> RateLimit:
    """One request against every limiter, all or nothing: one limiter's own command, or
    RL.ALL (with each limiter's own result in `each`). With `delay` (seconds), a request that
    does not fit now is admitted if its turn comes within `delay`, and `wait` says when."""
    options = [quantity, "MS", *(["REFUND"] if refund else [])]
    if delay is not None:
        options += ["DELAY", max(0, round(delay * 1000))]
    if len(limiters) == 1:
        limiter = limiters[0]
        reply = client.execute_command(limiter.command, limiter.key, *limiter.arguments(),
                                       *options, *limiter.keywords())
        return RateLimit.from_reply(reply, wait_ms=reply[5] if delay is not None else 0)
    arguments = ["RL.ALL", len(limiters), *(limiter.key for limiter in limiters)]
    for limiter in limiters:
        arguments += [limiter.in_all, *limiter.arguments(), *limiter.keywords()]
    reply = client.execute_command(*arguments, *options, "DETAILS")
    first = 6 if delay is not None else 5
    return RateLimit.from_reply(reply[:5], [RateLimit.from_reply(one) for one in reply[first:]],
                                wait_ms=reply[5] if delay is not None else 0)


def acquire_slot(client: redis.Redis, limiters: Sequence[Limiter], quantity: int = 1,
                 timeout: float = 0.0, sleep=time.sleep) -> RateLimit:
    """Waits for a slot, as Guava's `tryAcquire(timeout)` does: one call, then a sleep of the
    wait the module gives. Returns once the request may go ahead (`allowed`), or at once,
    refused, when its turn would come later than `timeout` seconds (its `retry_after` is
    when the same call would be admitted). No polling: the module keeps the queue."""
    result = check(client, limiters, quantity, delay=timeout)
    if result.allowed and result.wait > 0:
        sleep(result.wait)
    return result


@dataclass(frozen=True)
class Lease:
    """RL.ACQUIRE's answer: the five fields, and the lease's id (0 when refused)."""

    result: RateLimit
    id: int

    @property
    def allowed(self) -> bool:
        return self.result.allowed


def acquire(client: redis.Redis, key: str, limit: int, lease: float, quantity: int = 1) -> Lease:
    """Takes `quantity` of `limit` slots for `lease` seconds."""
    reply = client.execute_command("RL.ACQUIRE", key, limit, _millis(lease), quantity, "MS")
    return Lease(RateLimit.from_reply(reply[:5]), reply[5])


def release(client: redis.Redis, key: str, lease_id: int) -> bool:
    """Frees a lease at once; False when it was no longer held."""
    return client.execute_command("RL.RELEASE", key, lease_id) == 1


def renew(client: redis.Redis, key: str, lease_id: int, lease: float) -> bool:
    """Extends a held lease to `lease` seconds from now; False when it was no longer held."""
    return client.execute_command("RL.RENEW", key, lease_id, _millis(lease), "MS") == 1


def _seconds(value: float) -> int:
    """Whole seconds, rounded up: a client that waits this long is never early."""
    return math.ceil(value - 1e-9)


def headers(result: RateLimit, limiters: Sequence[Limiter], legacy: bool = False) -> dict[str, str]:
    """The HTTP fields for a result: `RateLimit-Policy` (one item per limiter, named by it:
    `"name";q=<limit>;w=<window s>`), `RateLimit` (`"name";r=<remaining>;t=<reset s>`) and,
    when refused, `Retry-After`. With `legacy`, also the older `RateLimit-Limit`,
    `RateLimit-Remaining` and `RateLimit-Reset` of the binding limiter."""
    each = result.each or (result,)
    policies = []
    states = []
    for limiter, one in zip(limiters, each):
        window = _seconds(limiter.window_seconds())
        policies.append(f'"{limiter.name}";q={one.limit};w={window}')
        states.append(f'"{limiter.name}";r={one.remaining};t={_seconds(one.reset_after)}')
    fields = {"RateLimit-Policy": ", ".join(policies), "RateLimit": ", ".join(states)}
    if not result.allowed and result.retry_after is not None:
        fields["Retry-After"] = str(_seconds(result.retry_after))
    if legacy:
        fields["RateLimit-Limit"] = str(result.limit)
        fields["RateLimit-Remaining"] = str(result.remaining)
        fields["RateLimit-Reset"] = str(_seconds(result.reset_after))
    return fields
