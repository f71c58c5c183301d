"""The synchronous client, over redis-py (`redis.Redis` or `redis.cluster.RedisCluster`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from . import _steps as steps
from ._calls import DEFAULT_TIMEOUT, SyncCalls
from ._protocol import (
    Counts,
    Lease,
    Limiter,
    Options,
    RateLimit,
    TopKey,
    lease_command,
    release_command,
    renew_command,
)
from ._resilience import Decisions
from ._steps import CheckOptions, drive

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11


class RateLimiter:
    """Every command of the module on one client, with typed results.

    On a Cluster client, the keys of one call (several limiters) must share a hash slot:
    give them the same `{tag}`.

    A call waits at most `timeout` seconds (1 by default, as the Node and nginx packages),
    whatever the client's own timeouts and retries: it runs on a worker thread of the
    limiter's (`None`: on the caller's thread, bounded only by the client's timeouts). When
    the server fails (cannot be reached, times out, is loading or failing over), `on_error`
    decides: "raise" (the default, as redis-py and limits' storages do) raises, "allow"
    admits and "deny" refuses (`RateLimit.failed`, nothing counted); for `cooldown` seconds
    after a failure, decisions are taken that way without asking the server, then one call
    probes it while the others still decide that way. Leases follow the same policy.
    `deny_cache=N` answers up to N standing refusals locally; `metrics` (a
    `ratelimit_module.metrics.PrometheusMetrics`) counts decisions and times server calls;
    `shadow=True` lets refused requests through, counted and logged (docs/clients.md).
    """

    def __init__(
        self,
        client: Any,
        sleep: Callable[[float], None] = time.sleep,
        *,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        on_error: str = "raise",
        cooldown: float = 1.0,
        deny_cache: Optional[int] = None,
        metrics: Optional[Any] = None,
        shadow: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.client = client
        self.call = SyncCalls(client, timeout)
        self._sleep = sleep
        self.decisions = Decisions(on_error, cooldown, deny_cache, metrics, shadow, clock)

    def _decide(
        self, limiters: Sequence[Limiter], options: Options, shadow: Optional[bool] = None
    ) -> RateLimit:
        """One decision: from the deny cache, from the server, or by `on_error`."""
        return drive(self.call, steps.decide(self.decisions, limiters, options, shadow))

    def check(
        self, limiters: Sequence[Limiter], quantity: int = 1, **options: Unpack[CheckOptions]
    ) -> RateLimit:
        """One request against every limiter, all or nothing, in one call. The keywords are
        `CheckOptions`' (`refund`, `block`, `delay`, `at_most`, `force`, and `shadow`: this
        call's shadow mode, the client's unless given)."""
        return self._decide(limiters, *steps.check_options(quantity, options))

    def peek(self, limiters: Sequence[Limiter], quantity: int = 1) -> RateLimit:
        """What `check` would answer now, without writing (the `_RO` variants)."""
        return self._decide(limiters, Options(quantity, read_only=True))

    def acquire(
        self, limiters: Sequence[Limiter], quantity: int = 1, timeout: float = 0.0
    ) -> RateLimit:
        """Waits for a slot, as Guava's `tryAcquire(timeout)`: one call with `DELAY`, then a
        sleep of the wait the module gives. Returns once the request may go ahead, or at
        once, refused, when its turn is further than `timeout` seconds away. No polling:
        the module keeps the queue."""
        outcome = self.check(limiters, quantity, delay=timeout)
        if outcome.allowed and outcome.wait > 0:
            self._sleep(outcome.wait)
        return outcome

    def counts(self, limiter: Limiter) -> Counts:
        """What a `FIXED` or `SLIDING` window or a log counts (`RL.WINDOW.COUNTS`,
        `RL.LOG.COUNTS`), without writing."""
        return drive(self.call, steps.counts(limiter))

    def _lease(self, args: list) -> Lease:
        return drive(self.call, steps.lease(self.decisions, args))

    def _held(self, args: list, renewing: bool) -> bool:
        return drive(self.call, steps.held(self.decisions, args, renewing))

    def acquire_lease(self, key: str, limit: int, lease: float, quantity: int = 1) -> Lease:
        """`RL.ACQUIRE`: `quantity` of `limit` slots for `lease` seconds (through the
        failure policy: under "allow" a lease with id 0 while the server fails)."""
        return self._lease(lease_command(key, limit, lease, quantity))

    def peek_lease(self, key: str, limit: int, lease: float, quantity: int = 1) -> Lease:
        """`RL.ACQUIRE_RO`: what `acquire_lease` would answer, taking nothing (id 0)."""
        return self._lease(lease_command(key, limit, lease, quantity, True))

    def release_lease(self, key: str, lease_id: int) -> bool:
        """`RL.RELEASE`: frees a lease at once; False when it was no longer held, or the
        server was not reached (it ends at its expiry)."""
        if lease_id == 0:
            return False  # granted without the server: nothing to free
        return self._held(release_command(key, lease_id), renewing=False)

    def renew_lease(self, key: str, lease_id: int, lease: float) -> bool:
        """`RL.RENEW`: extends a held lease to `lease` seconds from now (while the server
        fails: True under "allow", False under "deny")."""
        if lease_id == 0:
            return self.decisions.kept_without_server()
        return self._held(renew_command(key, lease_id, lease), renewing=True)

    def top(self, count: int = 10) -> list[TopKey]:
        """`RL.TOP`: the keys refused most over the current and the previous minute, on the
        server, or merged from every primary of a Cluster."""
        return drive(self.call, steps.top(self.client, count))
