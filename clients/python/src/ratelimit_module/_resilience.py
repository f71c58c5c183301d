"""What the clients do when the server fails, and under a flood, with no I/O: the sync and
async clients share it, and its clock is injected (tests drive it).

- `Circuit`: after a failed call, decide by `on_error` without asking the server for a
  cool-down, so that a dead server costs one timeout per cool-down, not one per request;
  then one call (the probe) asks the server while the others keep deciding by `on_error`,
  until the probe's answer closes the circuit or its failure opens it again; errors are
  logged at most once a second.
- `DenyCache`: a refusal with a `retry_after` is answered locally until then, for the same
  command and a quantity not smaller; bounded, least recently used out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Callable, Hashable, Optional, Sequence

import redis.exceptions

from ._answered import mark_own
from ._calls import DeadlineExceeded
from ._protocol import Lease, Limiter, Options, RateLimit, command

LOG = logging.getLogger("ratelimit_module")

ON_ERROR = ("allow", "deny", "raise")

# The server failed, as opposed to refusing a bad call: unreachable, timed out, loading,
# failing over, or its Cluster down.
SERVER_FAILURES = (
    DeadlineExceeded,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    OSError,
)


class ServerUnavailable(Exception):
    """The circuit is open: the server failed less than a cool-down ago (raised with
    `on_error="raise"`, from the last failure)."""


def failure_result(allowed: bool, retry_after: float) -> RateLimit:
    """What `on_error` decides: admitted or refused without the server (`failed`), nothing
    counted; a refusal's `retry_after` is when the server is asked again."""
    return RateLimit(
        allowed=allowed,
        limit=0,
        remaining=0,
        retry_after=None if allowed else retry_after,
        reset_after=0.0,
        failed=True,
    )


CLOSED = float("-inf")


class Circuit:
    """The failure policy of one client: `on_error` is "allow", "deny" or "raise".

    Closed, every call asks the server. A failure opens it for `cooldown` seconds: no call
    asks. Then it is half-open: the first call to ask is the probe, and until its answer
    closes the circuit (`succeeded`) or its failure opens it again, the others decide as
    while open. A probe that never reports back stops counting after a cool-down."""

    def __init__(
        self,
        on_error: str = "raise",
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error is one of {', '.join(ON_ERROR)}, not {on_error!r}")
        self.on_error, self.cooldown, self.clock = on_error, cooldown, clock
        self.open_until = CLOSED
        # Half-open: a probe is out until then.
        self.probe_until = CLOSED
        self.logged_at = float("-inf")
        self.last_error: Optional[BaseException] = None
        self._lock = threading.Lock()

    def open(self) -> bool:
        """Whether this call decides without asking: within a cool-down after a failure, or
        while another call probes the server. A call told False asks (after a failure, it
        is the probe)."""
        if self.open_until == CLOSED:
            return False
        now = self.clock()
        if now < self.open_until:
            return True
        with self._lock:
            if now < self.probe_until:
                return True
            self.probe_until = now + self.cooldown
            return False

    def succeeded(self) -> None:
        """The server answered: the circuit closes."""
        if self.open_until != CLOSED:
            self.open_until = self.probe_until = CLOSED

    def failed(self, error: BaseException) -> None:
        """Notes a failed call: opens for a cool-down, logs at most once a second."""
        now = self.clock()
        self.open_until = now + self.cooldown
        self.last_error = error
        if now - self.logged_at >= 1.0:
            self.logged_at = now
            LOG.error(
                "rate limiter: the server failed (%s); deciding %r for %.1f s",
                error,
                self.on_error,
                self.cooldown,
            )

    def decide(self) -> RateLimit:
        """The decision without the server while the circuit is open; with
        `on_error="raise"`, `ServerUnavailable` (from the last failure)."""
        if self.on_error == "raise":
            raise ServerUnavailable(
                f"the server failed less than {self.cooldown} s ago: {self.last_error}"
            ) from self.last_error
        return failure_result(self.on_error == "allow", self.retry_after())

    def retry_after(self) -> float:
        """Seconds until the server is asked again (or the probe out has its answer)."""
        return max(self.open_until - self.clock(), self.probe_until - self.clock(), 0.0)


class DenyCache:
    """Refusals answered locally while they stand: at most `max_keys` of them, the least
    recently used out. It only ever refuses what the server refused, never for longer than
    the server said."""

    def __init__(self, max_keys: int, clock: Callable[[], float] = time.monotonic):
        if max_keys < 1:
            raise ValueError("deny_cache holds at least one key")
        self.max_keys, self.clock = max_keys, clock
        # command without its quantity -> (until, quantity, result, when cached)
        self.entries: OrderedDict[Hashable, tuple[float, int, RateLimit, float]] = OrderedDict()

    def get(self, key: Hashable, quantity: int) -> Optional[RateLimit]:
        """The cached refusal for `key`, if it stands and `quantity` is not smaller than the
        refused one's: its reply, with the time that passed taken off its times."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        until, refused, result, cached_at = entry
        now = self.clock()
        if now >= until:
            del self.entries[key]
            return None
        if quantity < refused:
            return None
        self.entries.move_to_end(key)
        return _aged(result, now - cached_at, until - now)

    def put(self, key: Hashable, quantity: int, result: RateLimit) -> None:
        """Caches `result` if it is a refusal with a `retry_after`."""
        if result.allowed or result.retry_after is None or result.retry_after <= 0:
            return
        now = self.clock()
        self.entries[key] = (now + result.retry_after, quantity, result, now)
        self.entries.move_to_end(key)
        while len(self.entries) > self.max_keys:
            self.entries.popitem(last=False)


class _LeasePolicy:
    """What lease decisions are counted under in the metrics."""

    name = "lease"
    key = ""


LEASES: Sequence[Any] = (_LeasePolicy(),)


def policy_name(limiters: Sequence[Limiter]) -> str:
    """The policy a decision is counted under: the limiters' names, joined by "+"."""
    return "+".join(limiter.name for limiter in limiters)


class Decisions:
    """Everything around a decision but the call itself, shared by the sync and async
    clients: the deny cache before it, the circuit and `on_error` when it fails, and after
    it the metrics, the cache and shadow mode (a refusal let through, counted and logged)."""

    def __init__(
        self,
        on_error: str,
        cooldown: float,
        deny_cache: Optional[int],
        metrics: Optional[Any],
        shadow: bool,
        clock: Callable[[], float],
    ):
        self.circuit = Circuit(on_error, cooldown, clock)
        self.deny_cache = DenyCache(deny_cache, clock) if deny_cache else None
        self.metrics, self.shadow = metrics, shadow

    def count(self, policy: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.decision(policy, outcome)

    def before(
        self, limiters: Sequence[Limiter], options: Options, shadow: Optional[bool] = None
    ) -> tuple[Optional[Hashable], Optional[RateLimit]]:
        """The call's cache key, and its decision if taken without the server: a standing
        refusal from the deny cache, or `on_error`'s while the circuit is open."""
        key = deny_key(self.deny_cache, limiters, options)
        if key is not None:
            cached = self.deny_cache.get(key, options.quantity)  # type: ignore[union-attr]
            if cached is not None:
                return key, self._refused(limiters, cached, "deny_cache", shadow)
        if self.circuit.open():
            return key, self._without_server(limiters)
        return key, None

    def failed(self, error: BaseException, limiters: Sequence[Limiter]) -> RateLimit:
        """A call the server failed: the circuit opens; `on_error` decides, or the error is
        raised again."""
        self.circuit.failed(error)
        if self.circuit.on_error == "raise":
            mark_own()
            raise error
        return self._without_server(limiters)

    def after(
        self,
        key: Optional[Hashable],
        limiters: Sequence[Limiter],
        options: Options,
        decided: RateLimit,
        seconds: float,
        shadow: Optional[bool] = None,
    ) -> RateLimit:
        """The server's decision, taken `seconds` after asking: counted, cached, and let
        through in shadow mode."""
        self.answered(seconds)
        # A request shed by load is a draw, not a standing refusal: never cached.
        if key is not None and not decided.shed_level:
            self.deny_cache.put(key, options.quantity, decided)  # type: ignore[union-attr]
        if decided.shed_level:
            mark_own()
        if not decided.allowed:
            outcome = "shed" if decided.shed_level else "refused"
            return self._refused(limiters, decided, outcome, shadow)
        self.count(policy_name(limiters), "delayed" if decided.wait > 0 else "allowed")
        return decided

    def answered(self, seconds: float) -> None:
        """The server answered a call after `seconds`: timed, and the circuit closes."""
        self.circuit.succeeded()
        if self.metrics is not None:
            self.metrics.server_call(seconds)

    # Leases go through the same policy: while the server fails, `on_error` decides whether
    # a lease is granted (id 0, `failed`: there is nothing to release), and whether a held
    # one may be kept (`renew` answers True under "allow", False under "deny"); a release
    # that did not reach the server answers False (the lease ends at its expiry anyway).

    def lease_before(self) -> Optional[Lease]:
        """The lease decided without the server while the circuit is open."""
        if self.circuit.open():
            return Lease(self._without_server(LEASES), 0)
        return None

    def lease_failed(self, error: BaseException) -> Lease:
        return Lease(self.failed(error, LEASES), 0)

    def lease_after(self, lease: Lease, seconds: float) -> Lease:
        self.answered(seconds)
        self.count(LEASES[0].name, "allowed" if lease.allowed else "refused")
        return lease

    def kept_without_server(self, error: Optional[BaseException] = None) -> bool:
        """A renewal or release the server did not answer (`error`) or was not asked
        (circuit open): True when `on_error` keeps the lease ("allow")."""
        if error is not None:
            self.circuit.failed(error)
            if self.circuit.on_error == "raise":
                raise error
        else:
            self.circuit.decide()  # raises ServerUnavailable under "raise"
        return self.circuit.on_error == "allow"

    def _without_server(self, limiters: Sequence[Limiter]) -> RateLimit:
        """`on_error`'s decision; a refusal (or the error raised) is the package's own
        answer to the request, not the service's (`_answered`)."""
        if self.circuit.on_error != "allow":
            mark_own()
        decided = self.circuit.decide()
        self.count(policy_name(limiters), "failed_open" if decided.allowed else "failed_closed")
        return decided

    def _refused(
        self, limiters: Sequence[Limiter], decided: RateLimit, outcome: str, shadow: Optional[bool]
    ) -> RateLimit:
        policy = policy_name(limiters)
        if not (self.shadow if shadow is None else shadow):
            self.count(policy, outcome)
            return decided
        self.count(policy, "shadow")
        LOG.warning(
            "rate limiter: shadow: %s would refuse %s",
            policy,
            ", ".join(limiter.key for limiter in limiters),
        )
        return replace(decided, allowed=True, shadow=True)


def deny_key(
    cache: Optional[DenyCache], limiters: Sequence[Limiter], options: Options
) -> Optional[Hashable]:
    """What a call is cached under: its command with the quantity left out; None when there
    is no cache, or for a call it never answers (`REFUND` and `FORCE` are never refused)."""
    if cache is None or options.refund or options.force:
        return None
    return tuple(command(limiters, replace(options, quantity=0)))


def _aged(result: RateLimit, elapsed: float, retry_after: float) -> RateLimit:
    return replace(
        result,
        retry_after=retry_after,
        reset_after=max(0.0, result.reset_after - elapsed),
        each=tuple(
            replace(
                one,
                reset_after=max(0.0, one.reset_after - elapsed),
                retry_after=None
                if one.retry_after is None
                else max(0.0, one.retry_after - elapsed),
            )
            for one in result.each
        ),
    )
