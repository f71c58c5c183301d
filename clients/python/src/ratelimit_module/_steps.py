"""What the sync and the asyncio clients share, everything but the I/O (`RateLimiter` and
`AsyncRateLimiter` differ only in how a call reaches the server). Each operation is a
generator that yields the one server call it needs, as `(args, options)` for
`execute_command`, is sent its reply or thrown its failure, and returns the result;
`drive` runs one on a sync client's calls and `drive_async` on an asyncio client's."""

from __future__ import annotations

import time
from typing import Any, Callable, Generator, Optional, Sequence, TypedDict, TypeVar

from ._answered import waiting_on_server
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
    node_replies,
    result,
    top_keys,
)
from ._resilience import SERVER_FAILURES, Decisions

T = TypeVar("T")
# One server call: the command's words, and `execute_command`'s options.
Call = tuple[Sequence[Any], dict]
Steps = Generator[Call, Any, T]


class CheckOptions(TypedDict, total=False):
    """The keywords `check` takes, besides the limiters and the quantity (docs/options.md):
    typed once for the sync and the asyncio client, as `**options: Unpack[CheckOptions]`."""

    refund: bool  # give `quantity` back instead of taking it (REFUND)
    block: Optional[float]  # seconds a refusal keeps the key refused (BLOCK)
    delay: Optional[float]  # seconds a request that does not fit may wait (DELAY)
    at_most: bool  # take what fits, at least 1 (AT_MOST)
    force: bool  # take it all, owing what does not fit (FORCE)
    shadow: Optional[bool]  # this call's shadow mode, the client's unless given


def check_options(quantity: int, options: CheckOptions) -> tuple[Options, Optional[bool]]:
    """`check`'s keywords as the request's options and the call's shadow mode. A keyword
    `check` does not take is refused as Python refuses one, before any call."""
    for name in options:
        if name not in CheckOptions.__annotations__:
            raise TypeError(f"check() got an unexpected keyword argument {name!r}")
    given = dict(options)
    shadow = given.pop("shadow", None)
    return Options(quantity, **given), shadow


def decide(
    decisions: Decisions,
    limiters: Sequence[Limiter],
    options: Options,
    shadow: Optional[bool] = None,
) -> Steps[RateLimit]:
    """One decision: from the deny cache, from the server, or by `on_error`."""
    key, decided = decisions.before(limiters, options, shadow)
    if decided is not None:
        return decided
    started = time.perf_counter()
    try:
        reply = yield command(limiters, options), {}
    except SERVER_FAILURES as error:
        return decisions.failed(error, limiters)
    return decisions.after(
        key,
        limiters,
        options,
        result(reply, limiters, options),
        time.perf_counter() - started,
        shadow,
    )


def counts(limiter: Limiter) -> Steps[Counts]:
    """`RL.WINDOW.COUNTS` or `RL.LOG.COUNTS` for `limiter`, read."""
    reply = yield counts_command(limiter), {}
    return counts_result(limiter, reply)


def lease(decisions: Decisions, args: list) -> Steps[Lease]:
    """`RL.ACQUIRE` (or `_RO`) through the failure policy."""
    decided = decisions.lease_before()
    if decided is not None:
        return decided
    started = time.perf_counter()
    try:
        reply = yield args, {}
    except SERVER_FAILURES as error:
        return decisions.lease_failed(error)
    return decisions.lease_after(Lease.from_reply(reply), time.perf_counter() - started)


def held(decisions: Decisions, args: list, renewing: bool) -> Steps[bool]:
    """`RL.RENEW` or `RL.RELEASE`: the server's answer, or the policy's while it fails (a
    release not made answers False)."""
    if decisions.circuit.open():
        return decisions.kept_without_server() and renewing
    started = time.perf_counter()
    try:
        reply = yield args, {}
    except SERVER_FAILURES as error:
        return decisions.kept_without_server(error) and renewing
    decisions.answered(time.perf_counter() - started)
    return int(reply) == 1


def top(client: Any, count: int) -> Steps[list[TopKey]]:
    """`RL.TOP` on the server, or on every primary of a Cluster, merged."""
    if hasattr(client, "get_primaries"):
        reply = yield ("RL.TOP", count), {"target_nodes": client.PRIMARIES}
    else:
        reply = yield ("RL.TOP", count), {}
    return top_keys(node_replies(reply), count)


def drive(call: Callable[..., Any], steps: Steps[T]) -> T:
    """Runs `steps` on `call` (a `SyncCalls`): each call made, its reply sent back, its
    failure thrown in."""
    try:
        args, options = next(steps)
        while True:
            try:
                with waiting_on_server():
                    reply = call(*args, **options)
            except Exception as error:  # the steps decide what a failure means
                args, options = steps.throw(error)
            else:
                args, options = steps.send(reply)
    except StopIteration as done:
        return done.value


async def drive_async(call: Callable[..., Any], steps: Steps[T]) -> T:
    """`drive` on an `AsyncCalls`, each call awaited."""
    try:
        args, options = next(steps)
        while True:
            try:
                with waiting_on_server():
                    reply = await call(*args, **options)
            except Exception as error:  # the steps decide what a failure means
                args, options = steps.throw(error)
            else:
                args, options = steps.send(reply)
    except StopIteration as done:
        return done.value
