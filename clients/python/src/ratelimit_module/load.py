"""Load shedding (docs/load.md), two checks on every request, neither a server call:

- **the instance's own limit** on requests in flight (`ConcurrencyLimit`): it follows the
  measured latency, cuts when a standing queue forms and, while congested, keeps its top
  places for the more important classes. It decides at once, per request, and needs no
  server at all;
- **the fleet's level**: the instance reports its health under a service's key once an
  interval, with no code from the user (`Signals`: CPU, memory, requests in flight, latency,
  5xx share, the requests and their successes, and what `bbr` reads), and learns in the same
  call the service's level and the share of each priority class it admits. Every instance
  and gateway reporting to the key sheds by the same level.

A request goes on only when both admit it.

    from ratelimit_module.load import AsyncLoadShedder
    from ratelimit_module.starlette import LoadSheddingMiddleware

    shedder = AsyncLoadShedder(redis.asyncio.Redis(), "load:checkout")
    app.add_middleware(LoadSheddingMiddleware, shedder=shedder, priority="X-Priority")

A request's priority is `critical_plus`, `critical`, `sheddable_plus` or `sheddable`; one
it does not name is `sheddable`. A shed request is answered 503 with `Retry-After` (the
service is overloaded), where a refusal by a limit is 429. With `shadow=True` nothing is
shed: what would be is counted (`shadow`) and logged.

When a report fails, the last level holds until the report's time to live ends, then the
level is 0 (nothing shed by level): shedding on a level nobody reports any more would refuse
for no reason. The instance's own limit goes on protecting it, server or not. The limits'
own failure policy (`on_error`) is the limiter's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import threading
import time
import weakref
from functools import partial
from typing import Any, Callable, Optional

from ._answered import counts_for_service, watching
from ._calls import DEFAULT_TIMEOUT, AsyncCalls, SyncCalls
from ._protocol import PRIORITIES, LoadStanding, report_command, report_result
from ._resilience import SERVER_FAILURES
from .concurrency import ConcurrencyLimit, LimitOptions
from .signals import Signals

LOG = logging.getLogger("ratelimit_module")


def _micros(seconds: float) -> int:
    """Whole microseconds, as the instance's limit counts time."""
    return int(round(seconds * 1_000_000))


# The standing before any report, and after the last one ended: level 0, everything admitted.
NOTHING_SHED = LoadStanding(0, 0, (1.0, 1.0, 1.0, 1.0))

# A selector call that blocked this long (seconds) found the loop idle.
IDLE = 0.0002


class LoopWatch:
    """How long a request waited for an asyncio event loop before any middleware saw it.

    A request reaches the app as a task that the server (uvicorn, hypercorn...) creates once
    it has read the request: the watch installs a task factory (`loop.set_task_factory`,
    chained to one already set) that notes, for each task, when the loop's turn that created
    it began (its selector's return), so a request's wait is the time since then: its queue
    in the loop, measured, however long the loop stays busy. What it waited before that turn
    (the kernel's accept queue and the turn that accepted it; asyncio accepts every pending
    connection at once) is not seen. A task created before the watch, or under a factory set
    after it, falls back to the time since the loop was last idle (a selector call that
    waited for events, with no callback ready: nothing was queued), which bounds its wait
    from above. A loop without a selector to watch (uvloop) notes each task's creation."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.idle_at: Optional[float] = None
        self.turn_began: Optional[float] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.arrivals: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        watch = self
        previous = loop.get_task_factory()

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task:
            if previous is not None:
                task = previous(loop, coro, **kwargs)
            else:
                task = asyncio.Task(coro, loop=loop, **kwargs)
            began = watch.turn_began
            watch.arrivals[task] = began if began is not None else watch.clock()
            return task

        loop.set_task_factory(factory)  # type: ignore[arg-type]
        selector = getattr(loop, "_selector", None)
        select = getattr(selector, "select", None)
        if select is None:
            return

        def watched(timeout: Optional[float] = None) -> list:
            began = watch.clock()
            events = select(timeout)
            ended = watch.turn_began = watch.clock()
            if (timeout is None or timeout > 0) and (not events or ended - began >= IDLE):
                watch.idle_at = ended
            return events

        selector.select = watched  # type: ignore[union-attr]
        self.idle_at = self.turn_began = self.clock()

    def waited(self, now: float) -> float:
        """How long the request decided at `now`, in the running loop's current task,
        waited for it."""
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            self._watch(loop)
        task = asyncio.current_task()
        arrived = self.arrivals.get(task) if task is not None else None
        if arrived is None:
            arrived = self.idle_at
        return 0.0 if arrived is None else max(0.0, now - arrived)


def default_instance() -> str:
    """This process's name among the service's instances: `host:pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def priority_of(name: Optional[str]) -> str:
    """A class the service knows: `name` lower-cased, or `sheddable`."""
    name = (name or "").strip().lower()
    return name if name in PRIORITIES else "sheddable"


class Ticket:
    """What `admit` gives a request that goes on, for `finished`: when it began, whether the
    instance's limit counts it in flight (not in shadow mode past a refusal), how many waits
    on the rate-limit server it has going on (out of the requests in flight meanwhile), and
    whether it finished."""

    __slots__ = ("started", "counted", "waits", "done")

    def __init__(self, started: float, counted: bool):
        self.started, self.counted = started, counted
        self.waits, self.done = 0, False


def _local_limit(limit: Any, options: Optional[LimitOptions] = None) -> Optional[ConcurrencyLimit]:
    """The instance's limit: a new one for True (the default), none for False or None."""
    if limit is True:
        return ConcurrencyLimit(options)
    return limit or None


class _Shedding:
    """What the sync and async shedders share: the instance's limit, the last standing, the
    decision, metrics."""

    # How a shedder calls its client: `SyncCalls` or `AsyncCalls`.
    _calls: Callable[[Any, Optional[float]], Any]

    def __init__(
        self,
        client: Any,
        service: str,
        *,
        instance: Optional[str] = None,
        interval: float = 1.0,
        ttl: Optional[float] = None,
        shadow: bool = False,
        metrics: Optional[Any] = None,
        signals: Optional[Signals] = None,
        factors: Optional[Callable[[], dict]] = None,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        limit: Any = True,
    ):
        self.client = client
        self.call = self._calls(client, timeout)
        self.service = service
        self.limit = _local_limit(limit)
        self.instance = instance or default_instance()
        self.interval = interval
        self.ttl = ttl if ttl is not None else 3 * interval
        self.shadow, self.metrics = shadow, metrics
        self.signals = signals if signals is not None else Signals()
        self.factors = factors
        self.draw, self.clock = draw, clock
        self._standing = NOTHING_SHED
        self._reported_at = float("-inf")
        # The event loop's watch (async shedders): what a request waited before the
        # middleware saw it.
        self.watch: Optional[LoopWatch] = None
        self._prepare()

    def _prepare(self) -> None:
        """What the sync or async shedder adds: its reporting thread or task."""

    @property
    def standing(self) -> LoadStanding:
        """The service's level and shares, from the last report that answered; level 0
        once that report's time to live has passed."""
        if self.clock() - self._reported_at > self.ttl:
            return NOTHING_SHED
        return self._standing

    def _reported(self, reply: Any) -> LoadStanding:
        standing = report_result(reply)
        self._standing, self._reported_at = standing, self.clock()
        if self.metrics is not None and hasattr(self.metrics, "load_level"):
            self.metrics.load_level(self.service, standing.level)
        return standing

    def _report_failed(self, error: BaseException) -> None:
        LOG.warning("ratelimit: the load report of %s failed: %s", self.service, error)

    def _command(self) -> list:
        factors = self.signals.sample()
        if self.factors is not None:
            # The application's own numbers (a queue's backlog...): a failing callback costs
            # its factors, never the report.
            try:
                factors.update({name: float(value) for name, value in self.factors().items()})
            except Exception as error:  # noqa: BLE001 (the user's code)
                LOG.warning("ratelimit: the load factors of %s failed: %s", self.service, error)
        return report_command(self.service, self.instance, self.ttl, factors)

    def admit(self, priority: Optional[str]) -> Optional[Ticket]:
        """Whether a request of `priority` goes on: a `Ticket` (to hand to `finished` when
        it ends) when both the service's level (the share it gives the class, at random) and
        the instance's limit admit it; None when it is shed. In shadow mode always a
        ticket, counting what would be shed (`shadow`)."""
        priority = priority_of(priority)
        standing = self.standing
        by_level = self.draw() < standing.share(priority)
        now = self.clock()
        waited = self.waited(now)
        counted = (
            by_level
            and self.limit is not None
            and self.limit.admit(PRIORITIES.index(priority), _micros(now), _micros(waited))
        )
        # What the level refused is shedding too: the limit counts it among its interval's
        # refusals.
        if not by_level and self.limit is not None:
            self.limit.shed_by_level(_micros(now))
        admitted = by_level and (counted or self.limit is None)
        if admitted:
            outcome = "admitted"
        else:
            outcome = "shadow" if self.shadow else "shed" if not by_level else "shed_local"
        if self.metrics is not None and hasattr(self.metrics, "load_decision"):
            self.metrics.load_decision(self.service, priority, outcome)
        if outcome == "shadow":
            LOG.info(
                "ratelimit: shadow: %s would be shed %s of %s",
                priority,
                f"at level {standing.level}" if not by_level else "by the instance's limit",
                self.service,
            )
        if not (admitted or self.shadow):
            return None
        self.signals.started()
        # Its latency counts from when it arrived, its wait in the loop included.
        return Ticket(now - waited, counted)

    def waited(self, now: float) -> float:
        """How long a request decided at `now` waited before the middleware saw it: in the
        event loop, as its watch tells; 0 where no loop is watched (threads)."""
        return 0.0 if self.watch is None else self.watch.waited(now)

    @property
    def retry_after(self) -> float:
        """What a shed request is told to wait: one report interval, when the level may
        have changed."""
        return self.interval

    def waiting(self, ticket: Ticket, begins: bool) -> None:
        """The request `admit` gave `ticket` begins (`begins`) or ends a wait on the rate-limit
        server: it leaves the instance's requests in flight meanwhile (a frozen server's
        timeout is not the service's concurrency)."""
        if not ticket.counted or self.limit is None:
            return
        ticket.waits += 1 if begins else -1
        # The first wait to begin leaves, the last to end comes back; none once it finished.
        if not ticket.done and ticket.waits == (1 if begins else 0):
            now = _micros(self.clock())
            if begins:
                self.limit.leave(now)
            else:
                self.limit.back(now)

    def finished(self, ticket: Ticket, status: int, own: bool = False, route: Any = None) -> None:
        """The request `admit` gave `ticket` ended with HTTP `status`; `own` when the
        package answered it by its policy (`_answered`): then, as for any 429, it leaves the
        requests in flight and says nothing of the service's health, nor its latency of the
        local limit's (a failing server's timeout is not the service's time). `route` names
        its route (method and path pattern), whose latency the local limit keeps apart."""
        now = self.clock()
        latency = max(0.0, now - ticket.started)
        congested = False
        if self.limit is not None:
            if ticket.counted and ticket.waits > 0 and not ticket.done:
                # It ended while waiting on the server: in flight again, to leave as it ends.
                self.limit.back(_micros(now))
            ticket.done = True
            if ticket.counted and own:
                self.limit.leave(_micros(now))
            elif ticket.counted:
                self.limit.finish(_micros(latency), _micros(now), route)
            congested = self.limit.congested
        if counts_for_service(status, own):
            self.signals.done(latency, status, busy=congested, route=route)
        else:
            self.signals.left()


class LoadShedder(_Shedding):
    """The synchronous shedder: a daemon thread reports every `interval` seconds through a
    redis-py client (`Redis` or `RedisCluster`); `admit` decides from the last report.

    `service` is the service's key; `instance` this process's name (`host:pid`); `ttl` how
    long a report counts (3 intervals); `timeout` the most a report waits (1 s, whatever the
    client's retries); `metrics` a `PrometheusMetrics`; `factors` a function
    answering the application's own factors to add to each report (`{"queue": len(jobs)}`:
    a queue's backlog, a pool's waiters, any number a policy names); `limit` the instance's
    own limit on requests in flight (on by default; a `ConcurrencyLimit` of your options, or
    False to shed by the level alone)."""

    _calls = SyncCalls

    def _prepare(self) -> None:
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def report(self) -> Optional[LoadStanding]:
        """Reports now; the standing the server answered, or None when it failed."""
        try:
            return self._reported(self.call(*self._command()))
        except SERVER_FAILURES as error:
            self._report_failed(error)
            return None

    def start(self) -> "LoadShedder":
        """Starts reporting every interval (once; again after `stop`)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="ratelimit-load", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.report()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class AsyncLoadShedder(_Shedding):
    """The asyncio shedder: a task reports every `interval` seconds through a
    `redis.asyncio` client; `admit` decides from the last report (no await). Arguments as
    for `LoadShedder`. A request waits for the event loop before any middleware sees it:
    that wait (`LoopWatch`: since the loop's turn that created the request's task began)
    counts in its latency and, while the limit is congested, as that much work ahead of it,
    in the requests it counts. The local limit has the defaults every package ships: the
    wait is measured, not bounded, so a healthy loop's bursts are no standing queue."""

    _calls = AsyncCalls

    def _prepare(self) -> None:
        self._task: Optional[asyncio.Task] = None
        if self.limit is not None:
            self.watch = LoopWatch(self.clock)

    async def report(self) -> Optional[LoadStanding]:
        """Reports now; the standing the server answered, or None when it failed."""
        try:
            return self._reported(await self.call(*self._command()))
        except SERVER_FAILURES as error:
            self._report_failed(error)
            return None

    def start(self) -> "AsyncLoadShedder":
        """Starts reporting every interval on the running loop (once)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            await self.report()
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None


class LoadSheddingWSGI:
    """A WSGI middleware (Flask, Django...): sheds by `shedder`'s level before the app runs
    (503 with `Retry-After`), and counts every request in the shedder's signals. `priority`
    is a header's name (`X-Priority`) or a function of the WSGI environ."""

    def __init__(
        self,
        app: Callable,
        shedder: LoadShedder,
        priority: Any = "X-Priority",
    ):
        self.app, self.shedder = app, shedder
        if callable(priority):
            self.priority = priority
        else:
            header = "HTTP_" + str(priority).upper().replace("-", "_")
            self.priority = lambda environ: environ.get(header)
        shedder.start()

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        ticket = self.shedder.admit(self.priority(environ))
        if ticket is None:
            retry = str(max(1, round(self.shedder.retry_after)))
            start_response(
                "503 Service Unavailable",
                [("Content-Type", "text/plain"), ("Retry-After", retry)],
            )
            return [b"Service Unavailable"]
        status = [500]

        def recording_start_response(line: str, headers: list, *rest: Any) -> Any:
            status[0] = int(line.split()[0])
            return start_response(line, headers, *rest)

        with watching(partial(self.shedder.waiting, ticket)) as request:
            try:
                return self.app(environ, recording_start_response)
            finally:
                route = f"{environ.get('REQUEST_METHOD', '')} {environ.get('PATH_INFO', '')}"
                self.shedder.finished(ticket, status[0], request.own, route)


__all__ = [
    "AsyncLoadShedder",
    "ConcurrencyLimit",
    "LoadShedder",
    "LoadSheddingWSGI",
    "LoopWatch",
    "NOTHING_SHED",
    "Ticket",
    "default_instance",
    "priority_of",
]
