"""What every client sends and reads, without I/O: the sync and async clients share it.

Times are asked of the module in milliseconds and given in seconds (floats); the HTTP fields
round them up, so a client that waits them is never early.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional, Sequence, Union


@dataclass(frozen=True)
class RateLimit:
    """What every limiter command answers, typed."""

    allowed: bool  # admitted (and counted); False: refused, and not counted
    limit: int  # the most admitted at once
    remaining: int  # how much more would be admitted right now
    retry_after: Optional[float]  # seconds until a refused request fits; None if admitted or never
    reset_after: float  # seconds until the limiter is back to full capacity
    wait: float = 0.0  # with `delay`: seconds to wait before going ahead (0: at once, or refused)
    granted: Optional[int] = None  # with `at_most`: the quantity granted (0 when refused)
    # Decided without the server, by `on_error` (nothing counted, no fields to send).
    failed: bool = False
    # Refused, but let through in shadow mode (`allowed` is then True).
    shadow: bool = False
    # Several limiters: each one's own result, in the order given (empty for one limiter).
    each: tuple["RateLimit", ...] = field(default=(), compare=False)
    # With a `Load` gate: the level that shed the request (refused by the service's load, not
    # by its limits: answer 503, not 429); 0 when not shed.
    shed_level: int = 0
    # With a `Slots` limiter: the lease's id, for `release_lease` and `renew_lease` on each
    # of its keys (0 when refused).
    lease_id: int = 0

    @classmethod
    def from_fields(
        cls,
        fields: Sequence[int],
        each: Sequence["RateLimit"] = (),
        wait_ms: int = 0,
        granted: Optional[int] = None,
    ) -> "RateLimit":
        """Reads `[limited, limit, remaining, retry_after, reset_after]`, times in ms."""
        limited, limit, remaining, retry_after, reset_after = (int(value) for value in fields[:5])
        return cls(
            allowed=limited == 0,
            limit=limit,
            remaining=remaining,
            retry_after=None if retry_after < 0 else retry_after / 1000,
            reset_after=reset_after / 1000,
            wait=wait_ms / 1000,
            granted=granted,
            each=tuple(each),
        )


def millis(seconds: float) -> int:
    """Seconds as whole milliseconds, at least 1."""
    return max(1, round(seconds * 1000))


@dataclass(frozen=True)
class Throttle:
    """GCRA (`CL.THROTTLE`): `count` per `period` seconds, in bursts of `max_burst + 1`; with
    `warmup` (seconds), a cold limiter reaches its rate over that much sustained use."""

    key: str
    max_burst: int
    count: int
    period: float
    name: str = "burst"  # the policy's name in the HTTP fields
    warmup: Optional[float] = None

    command, in_all = "CL.THROTTLE", "THROTTLE"

    def arguments(self) -> list:
        return [self.max_burst, self.count, millis(self.period)]

    def keywords(self) -> list:
        return [] if self.warmup is None else ["WARMUP", millis(self.warmup)]

    def window_seconds(self) -> float:
        """How long an empty bucket takes to fill: the window of its policy."""
        return (self.max_burst + 1) * self.period / self.count


@dataclass(frozen=True)
class Window:
    """A window counter (`RL.WINDOW`): `limit` per `window` seconds, `SLIDING` (the default),
    `FIXED` or `BUCKETS n`."""

    key: str
    limit: int
    window: float
    algorithm: str = "SLIDING"
    name: str = "window"

    command, in_all = "RL.WINDOW", "WINDOW"

    def arguments(self) -> list:
        return [self.limit, millis(self.window)]

    def keywords(self) -> list:
        return self.algorithm.split()

    def window_seconds(self) -> float:
        return self.window


@dataclass(frozen=True)
class Log:
    """An exact sliding log (`RL.LOG`): at most `limit` in any `window` seconds."""

    key: str
    limit: int
    window: float
    name: str = "log"

    command, in_all = "RL.LOG", "LOG"

    def arguments(self) -> list:
        return [self.limit, millis(self.window)]

    def keywords(self) -> list:
        return []

    def window_seconds(self) -> float:
        return self.window


@dataclass(frozen=True)
class Load:
    """The load gate of a service (`LOAD priority` in `RL.ALL`): `key` is the service's,
    which its instances' reports fill; the level they set admits a share of each priority
    class, and a request it sheds is refused with nothing written (`shed_level`)."""

    key: str
    priority: str = "sheddable"  # critical_plus, critical, sheddable_plus or sheddable

    command, in_all = "RL.ALL", "LOAD"
    name = "load"

    def arguments(self) -> list:
        return [self.priority]

    def keywords(self) -> list:
        return []

    def window_seconds(self) -> float:
        return 0.0


@dataclass(frozen=True)
class Slots:
    """A concurrency limit in `RL.ALL` (`LEASE limit lease`): at most `limit` leases held at
    once on `key`, each for `lease` seconds, taken only if every other limiter admits; the
    result's `lease_id` releases or renews it (`RL.ACQUIRE`'s state: `acquire_lease`,
    `release_lease` and `renew_lease` work on the key unchanged)."""

    key: str
    limit: int
    lease: float
    name: str = "slots"

    command, in_all = "RL.ALL", "LEASE"

    def arguments(self) -> list:
        return [self.limit, millis(self.lease)]

    def keywords(self) -> list:
        return []

    def window_seconds(self) -> float:
        return self.lease


Limiter = Union[Throttle, Window, Log, Load, Slots]

# The priority classes, most important first (Google's criticality).
PRIORITIES = ("critical_plus", "critical", "sheddable_plus", "sheddable")


def rate_limiters(limiters: Sequence[Limiter]) -> list[Limiter]:
    """The limiters that limit a rate (the HTTP fields' policies): not a load gate."""
    return [one for one in limiters if not isinstance(one, Load)]


@dataclass(frozen=True)
class Options:
    """A request's options: see docs/options.md. At most one of `delay`, `at_most`, `force`."""

    quantity: int = 1
    refund: bool = False
    block: Optional[float] = None  # seconds a refusal keeps the key refused
    delay: Optional[float] = None  # seconds a request that does not fit may wait for its turn
    at_most: bool = False  # take what fits, at least 1
    force: bool = False  # take it all, owing what does not fit
    read_only: bool = False  # the _RO variant: answer without writing

    def words(self) -> list:
        words: list = [self.quantity, "MS"]
        if self.block is not None:
            words += ["BLOCK", millis(self.block)]
        if self.delay is not None:
            words += ["DELAY", max(0, round(self.delay * 1000))]
        if self.at_most:
            words.append("AT_MOST")
        if self.force:
            words.append("FORCE")
        if self.refund:
            words.append("REFUND")
        return words

    def has_sixth(self) -> bool:
        return self.delay is not None or self.at_most


def command(limiters: Sequence[Limiter], options: Options) -> list:
    """The one command a request against `limiters` takes: the limiter's own, or `RL.ALL`
    with `DETAILS` (every key in one hash slot on a Cluster: tag them alike)."""
    if not limiters:
        raise ValueError("at least one limiter")
    suffix = "_RO" if options.read_only else ""
    only_in_all = any(isinstance(one, (Load, Slots)) for one in limiters)
    if len(limiters) == 1 and not only_in_all:
        one = limiters[0]
        return [one.command + suffix, one.key, *one.arguments(), *options.words(), *one.keywords()]
    words = ["RL.ALL" + suffix, len(limiters), *(one.key for one in limiters)]
    for one in limiters:
        words += [one.in_all, *one.arguments(), *one.keywords()]
    return [*words, *options.words(), "DETAILS"]


def result(reply: Sequence, limiters: Sequence[Limiter], options: Options) -> RateLimit:
    """The typed result of `command(limiters, options)`'s reply: the five integers, the
    sixth (a wait, a quantity granted, a lease's id), then with a load gate the level that
    shed the request, then each limiter's own (`DETAILS`)."""
    slots = any(isinstance(one, Slots) for one in limiters)
    sixth = int(reply[5]) if options.has_sixth() or slots else None
    wait_ms = sixth if options.delay is not None else 0
    granted = sixth if options.at_most else None
    first = 6 if sixth is not None else 5
    gate = any(isinstance(one, Load) for one in limiters)
    shed_level = int(reply[first]) if gate else 0
    first += 1 if gate else 0
    each = [
        RateLimit.from_fields(one)
        for one, limiter in zip(reply[first:], limiters)
        if not isinstance(limiter, Load)
    ]
    many = len(limiters) > 1
    outcome = RateLimit.from_fields(
        reply, each if many else [], wait_ms=wait_ms or 0, granted=granted
    )
    return replace(outcome, shed_level=shed_level, lease_id=sixth if slots else 0)


@dataclass(frozen=True)
class LoadStanding:
    """A service's level and what it admits, as a report (or the service's status) tells:
    the share of each priority class, most important first, from 0 to 1."""

    level: int
    instances: int
    shares: tuple[float, float, float, float]

    def share(self, priority: str) -> float:
        """The share the level admits of `priority` (`sheddable` for a name it does not
        know)."""
        index = PRIORITIES.index(priority) if priority in PRIORITIES else len(PRIORITIES) - 1
        return self.shares[index]


def report_command(key: str, instance: str, ttl: float, factors: dict[str, float]) -> list:
    """`RL.LOAD.REPORT`: an instance's factors, counting for `ttl` seconds."""
    words: list = ["RL.LOAD.REPORT", key, instance, millis(ttl)]
    for name, value in factors.items():
        value = float(value)
        # Finite and not negative, as the module takes it; six significant digits.
        value = min(max(value, 0.0), 1e15) if value == value else 0.0
        words += [name, f"{value:.6g}"]
    return words


def report_result(reply: Sequence) -> LoadStanding:
    """The typed result of `report_command`'s reply: `[level, instances, share x 4]`."""
    shares = tuple(float(value) for value in reply[2:6])
    return LoadStanding(int(reply[0]), int(reply[1]), shares)  # type: ignore[arg-type]


@dataclass(frozen=True)
class WindowCounts:
    """`RL.WINDOW.COUNTS`: what a `FIXED` or `SLIDING` window counts, times in seconds."""

    previous: int  # the previous window's count (0 for FIXED)
    previous_ends_in: float  # how long it still weighs
    current: int  # the current window's count
    current_ends_in: float  # how long it still counts


@dataclass(frozen=True)
class LogCounts:
    """`RL.LOG.COUNTS`: what a log counts in its window, times in seconds."""

    count: int  # the units in the window
    oldest_ends_in: float  # until the oldest entry in the window leaves it
    newest_ends_in: float  # until the newest does (the log's reset)


Counts = Union[WindowCounts, LogCounts]


def counts_command(limiter: Limiter) -> list:
    """`RL.WINDOW.COUNTS` or `RL.LOG.COUNTS` for a `FIXED`/`SLIDING` window or a log."""
    if isinstance(limiter, Log):
        return ["RL.LOG.COUNTS", limiter.key, millis(limiter.window), "MS"]
    if isinstance(limiter, Window) and limiter.algorithm in ("FIXED", "SLIDING", "ANCHORED"):
        return ["RL.WINDOW.COUNTS", limiter.key, millis(limiter.window), limiter.algorithm, "MS"]
    raise ValueError("counts are read from a FIXED, SLIDING or ANCHORED window, or a log")


def counts_result(limiter: Limiter, reply: Sequence[int]) -> Counts:
    """The typed result of `counts_command(limiter)`'s reply."""
    values = [int(value) for value in reply]
    if isinstance(limiter, Log):
        return LogCounts(values[0], values[1] / 1000, values[2] / 1000)
    return WindowCounts(values[0], values[1] / 1000, values[2], values[3] / 1000)


def lease_command(
    key: str, limit: int, lease: float, quantity: int, read_only: bool = False
) -> list:
    """`RL.ACQUIRE` (or `RL.ACQUIRE_RO`, which takes nothing)."""
    name = "RL.ACQUIRE_RO" if read_only else "RL.ACQUIRE"
    return [name, key, limit, millis(lease), quantity, "MS"]


def release_command(key: str, lease_id: int) -> list:
    """`RL.RELEASE`: frees a held lease."""
    return ["RL.RELEASE", key, lease_id]


def renew_command(key: str, lease_id: int, lease: float) -> list:
    """`RL.RENEW`: extends a held lease to `lease` seconds from now."""
    return ["RL.RENEW", key, lease_id, millis(lease), "MS"]


@dataclass(frozen=True)
class Lease:
    """`RL.ACQUIRE`'s answer: the five fields, and the lease's id (0 when refused)."""

    result: RateLimit
    id: int

    @property
    def allowed(self) -> bool:
        return self.result.allowed

    @classmethod
    def from_reply(cls, reply: Sequence[int]) -> "Lease":
        return cls(RateLimit.from_fields(reply), int(reply[5]))


@dataclass(frozen=True)
class TopKey:
    """One of `RL.TOP`'s keys: refused `refusals` times over the current and the previous
    minute, overcounted by at most `error`."""

    key: str
    refusals: int
    error: int


def top_keys(replies: Sequence[Sequence], count: int) -> list[TopKey]:
    """`RL.TOP`'s replies from every primary, merged: a key lives on one primary, so its
    rows are summed only while a slot moves. Most refused first, ties by key."""
    merged: dict[str, list[int]] = {}
    for reply in replies:
        for key, refusals, error in reply:
            name = key.decode(errors="backslashreplace") if isinstance(key, bytes) else str(key)
            row = merged.setdefault(name, [0, 0])
            row[0] += int(refusals)
            row[1] += int(error)
    rows = sorted(merged.items(), key=lambda item: (-item[1][0], item[0]))
    return [TopKey(key, refusals, error) for key, (refusals, error) in rows[:count]]


def node_replies(reply: object) -> list:
    """A command's replies: one, or a Cluster client's, one per node."""
    return list(reply.values()) if isinstance(reply, dict) else [reply]
