"""The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11) from a result:

    RateLimit-Policy: "burst";q=5;w=300, "daily";q=1000;w=86400
    RateLimit: "burst";r=4;t=60, "daily";r=999;t=86400

and `Retry-After` on a refusal. Times round up to whole seconds.
"""

from __future__ import annotations

import math
from typing import Sequence

from ._protocol import Limiter, RateLimit, rate_limiters


def seconds(value: float) -> int:
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
    for limiter, one in zip(rate_limiters(limiters), each):
        window = seconds(limiter.window_seconds())
        policies.append(f'"{limiter.name}";q={one.limit};w={window}')
        states.append(f'"{limiter.name}";r={one.remaining};t={seconds(one.reset_after)}')
    fields = {"RateLimit-Policy": ", ".join(policies), "RateLimit": ", ".join(states)}
    if not result.allowed and result.retry_after is not None:
        fields["Retry-After"] = str(seconds(result.retry_after))
    if legacy:
        fields["RateLimit-Limit"] = str(result.limit)
        fields["RateLimit-Remaining"] = str(result.remaining)
        fields["RateLimit-Reset"] = str(seconds(result.reset_after))
    return fields
