"""The instance's own limit on requests in flight, decided at admission with no server call
(docs/load.md, "The local limit"): it follows measured latency, cuts when a standing queue
forms and grows back while none does, and reserves its top places for the more important
classes while it is congested. The same algorithm, step for step, in every package
(clients/conformance.json, `concurrency`).

- **Standing queue** (CoDel's test): an interval (100 ms) whose *fastest* request still took
  longer than the target, while the requests in flight reached half the limit (at any peak
  while congested). A burst that drains within the interval leaves a fast request in it; a
  queue that stands does not. The target is the no-load latency plus the longer of one
  no-load latency and 5 ms; while congested, plus 5 ms alone (CoDel's), so that the queue
  kept while shedding stays short where requests are slow by nature (a pool of a few slots).
- **Routes**: a request may name its route (the middlewares give its method and path
  pattern), and each route's no-load latency is kept apart (the first 32 routes; the others
  with those that name none; a route with no request for two epochs leaves its place). The
  interval is read by the route of least no-load latency that finished a request in it (of
  those past their cold start, if any is), its fastest request against its own target: a
  queue delays every route's requests, the fastest route's show the least of one, and an
  interval without a fast route's request (a health check's) is no queue.
- **No-load latency** (a route's, and the service's over every request, which converts a
  request's wait): the least latency of the current and the previous epoch (30 s each)
  that four intervals in a row (of those that finished a request) took at least, so that a
  fast request now and then does not lower it for the intervals without one; until three
  such intervals have ended, also the least any request took (a cold start's); while
  congested, after four intervals in a row whose fastest request took longer than every
  request of the peak ahead of it at the target each (no queue here explains that: a
  dependency got slower), what the fastest took.
- **Congestion** begins at the fourth standing interval in a row, or at once when the fastest
  request took over four times that target (a queue that grew fast): the limit is cut to the
  in-flight peak times `target / fastest` (Netflix's gradient, from 0.2 to 0.9), and again
  at every standing interval while congested; between them it grows by one, unless over a
  tenth of the interval's requests took longer than the target while the service never went
  idle (a queue that comes and goes at this limit: it is what the service holds, a pool's
  size, and growing past it is a queue, as Vegas holds). Congestion ends
  at the fourth interval in a row (of those that decided a request) whose peak stayed under
  half the limit and which refused fewer requests than it admitted (shedding keeps the queue
  short while the overload goes on, and one such interval is the overload's arrivals coming
  and going); an
  interval under half the limit in which the shares refused as many as were admitted grows
  it by its square root, so that a load the shares alone hold back finds room.
- **Not congested**, the limit grows by its square root (envoy's headroom) when the peak
  reached half of it, and otherwise eases down (5% an interval) towards twice the peak, so
  that the limit a new overload meets is near what the service was using.
- **Priorities** (trunk reservation): while congested, a class is admitted only while the
  requests in flight are under its share of the limit, 1, 0.6, 0.4 and 0.2 from
  critical_plus to sheddable; not congested, every class is admitted under the limit or the
  initial limit, whichever is higher: a burst that a fresh service admits, an idle one admits
  too (the limit eased down is what the standing-queue test reads, not a cap on a healthy
  service).
- **A request's own wait** (CoDel's sojourn, per request): while congested, a request below
  the top class that waited longer than its share of the target before it could be decided
  is refused, however few are in flight: what an event loop admits in a turn stays short, so
  the queue in front of it (which no middleware sees) stays short too. What the wait refuses
  is a queue, not the shares: it does not make the limit probe for room.
- **A request the package answered itself** (a refusal, or its failure policy's answer while
  the server fails) leaves the requests in flight without its latency: it took the server's
  time, or none, not the service's (`leave`).

Plain Python, no I/O: the clock is passed in, so the conformance traces replay it exactly.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Optional

PRIORITIES = ("critical_plus", "critical", "sheddable_plus", "sheddable")

# How many intervals in a row (of those that finished a request) must have taken a latency for
# it to be the no-load latency.
CONFIRMING = 4

# How many calm intervals in a row (of those that decided a request) end congestion: one is
# an overload's arrivals coming and going.
CALM_INTERVALS_TO_END = 4

# The most routes whose latencies are kept apart; a request of any other route is counted with
# those that name none.
ROUTES = 32


class _Latencies:
    """The no-load latency of one route (or of the whole service): the least of the current
    and the previous epoch that CONFIRMING intervals in a row (of those that finished one of
    its requests) took at least; until CONFIRMING - 1 such intervals have ended, also the least
    any request took (a cold start's)."""

    __slots__ = ("noload_now", "noload_before", "recent_fastest", "window_min")

    def __init__(self):
        self.noload_now = self.noload_before = math.inf
        # The fastest request of each of the last intervals that finished any, oldest first.
        self.recent_fastest = [math.inf] * (CONFIRMING - 1)
        # The fastest request of the current interval.
        self.window_min = math.inf

    @property
    def noload(self) -> float:
        now, before = self.noload_now, self.noload_before
        return now if now < before else before

    @property
    def confirmed(self) -> bool:
        """Whether CONFIRMING - 1 intervals have finished a request: past the cold start."""
        return self.recent_fastest[0] < math.inf

    def finished(self, latency: int) -> None:
        # Comparisons rather than min() and the property: this runs twice a request.
        if latency < self.window_min:
            self.window_min = latency
        if latency < self.noload_now and self.recent_fastest[0] == math.inf:
            self.noload_now = latency

    def close_interval(self) -> None:
        """The interval ended: its fastest lowers the no-load latency as far as the intervals
        before it agree (a fast request now and then is not what the others take)."""
        if self.window_min < math.inf:
            agreed = max(self.window_min, *self.recent_fastest)
            self.noload_now = min(self.noload_now, agreed)
            self.recent_fastest = self.recent_fastest[1:] + [self.window_min]
        self.window_min = math.inf

    def next_epoch(self) -> None:
        self.noload_before, self.noload_now = self.noload_now, math.inf


@dataclass(frozen=True)
class LimitOptions:
    """The local limit's parameters; the defaults are what every package ships. Times are
    whole microseconds, so that every package compares them exactly."""

    initial: float = 20.0
    floor: float = 4.0
    ceiling: float = 1000.0
    interval_us: int = 100_000
    target_us: int = 5_000
    enter: int = 4
    deep: float = 4.0
    epoch_us: int = 30_000_000
    decay: float = 0.95
    shares: tuple = (1.0, 0.6, 0.4, 0.2)
    # While congested, a request below the top class is refused once its wait passes
    # `sojourn` times its share of the target; inf: never (a package whose wait is only a bound).
    sojourn: float = 1.0


def priority_index(priority) -> int:
    """0 (critical_plus) to 3 (sheddable), from a class's name or number."""
    if isinstance(priority, int):
        return 0 if priority < 0 else 3 if priority > 3 else priority
    return PRIORITIES.index(priority)


class ConcurrencyLimit:
    """See the module's documentation. Thread-safe: a WSGI app's requests run on many
    threads. `admit` and `finish` take the time of the event in whole microseconds of a
    monotonic clock, and `finish` the latency in whole microseconds."""

    def __init__(self, options: Optional[LimitOptions] = None):
        self.options = options or LimitOptions()
        self.limit = self.options.initial
        self.inflight = 0
        self.congested = False
        # How many times the limit changed, and congestion began (for the bench).
        self.changes = 0
        self.congestions = 0
        self._window_end: Optional[int] = None
        self._peak = 0
        # The interval's admitted and refused requests, and of those refused, how many for
        # their own wait.
        self._admitted = self._refused = self._waited_out = 0
        # Of the refused, how many the service's level refused (not this limit's shares).
        self._by_level = 0
        # Whether the limit refused a request while not congested: the requests in flight
        # reached it (or the initial limit).
        self._full = False
        # The interval's finished requests, how many of them took longer than the target, and
        # the fewest requests in flight or waiting it saw.
        self._finished = self._queued = self._trough = 0
        # The requests waiting when the last request finished, where the package counts them
        # (a run queue's, in no-load latencies): a service whose requests in flight fall to
        # none between two requests while the next ones wait is not idle.
        self._behind = 0.0
        self._standing_run = 0
        # While congested, intervals in a row (of those that decided a request) that ended
        # with the peak under half the limit and fewer refused than admitted.
        self._calm_run = 0
        # Intervals in a row whose latency no queue here explains.
        self._unexplained = 0
        # Every request's latencies (what admission converts a wait with), and each route's
        # (what the standing-queue test reads: a route's fastest against its own target), the
        # requests that name none, or a route past the first ROUTES, under None.
        self._service = _Latencies()
        self._routes: dict = {None: _Latencies()}
        self._epoch_end = 0
        self._lock = threading.Lock()

    @property
    def noload(self) -> float:
        """The service's no-load latency, over every route: the least of this epoch and the
        last (inf before any)."""
        return self._service.noload

    @property
    def routes(self) -> list:
        """The routes whose latencies are kept apart, as their requests named them."""
        with self._lock:
            return [route for route in self._routes if route is not None]

    def _target(self, noload: float) -> float:
        """The latency a request may take without a queue standing: the no-load latency plus
        the longer of one more and `target_us` (a burst's queue), or, while congested, plus
        `target_us` alone (CoDel's), so that the queue kept while shedding stays short where
        requests are slow by nature, behind a pool of a few slots (inf before any latency)."""
        queue = self.options.target_us if self.congested else max(noload, self.options.target_us)
        return noload + queue

    def _roll(self, now: int) -> None:
        """Closes the interval that ended at or before `now`, if any."""
        o = self.options
        if self._window_end is None:
            self._window_end, self._epoch_end = now + o.interval_us, now + o.epoch_us
            return
        while now >= self._epoch_end:
            self._service.next_epoch()
            for route in list(self._routes):
                self._routes[route].next_epoch()
                # A route with no request for two epochs leaves its place to another.
                if route is not None and self._routes[route].noload == math.inf:
                    del self._routes[route]
            self._epoch_end += o.epoch_us
        if now < self._window_end:
            return
        bound = self._peak >= self.limit / 2
        # The interval is read by the fastest route that finished a request in it (of those past
        # their cold start, if any is): a queue delays every route's requests, and the fastest
        # route's show the least of one; a route's fastest is set against its own target, so
        # that an interval without a fast route's request (a health check's) is no queue.
        judge = self._judging_route()
        measured = judge is not None
        fastest = judge.window_min if measured else math.inf
        target = self._target(judge.noload) if measured else math.inf
        # While congested, a queue stands whatever the peak: the probe may raise the limit past it.
        standing = measured and (bound or self.congested) and fastest > target
        # While congested, a fastest request slower than every request of the peak ahead of it
        # at the target each: no queue here explains it, the service itself got slower (a
        # dependency). After `enter` such intervals the no-load latency is what it takes now.
        unexplained = standing and self.congested and fastest > max(1, self._peak) * target
        self._unexplained = self._unexplained + 1 if unexplained else 0
        if self._unexplained >= o.enter:
            for latencies in (self._service, *self._routes.values()):
                if latencies.window_min < math.inf:
                    latencies.noload_now = latencies.noload_before = latencies.window_min
            self._unexplained = 0
            standing = False
        self._standing_run = self._standing_run + 1 if standing else 0
        before = self.limit
        calm = False
        # A queue that stands while the limit, not congested, is full is an overload already:
        # a burst a healthy service holds neither fills it nor stands.
        at_once = standing and (fastest > o.deep * target or self._full)
        if standing and (self.congested or at_once or self._standing_run >= o.enter):
            gradient = max(0.2, min(0.9, target / fastest))
            self.limit = max(o.floor, min(self.limit, self._peak) * gradient)
            if not self.congested:
                self.congestions += 1
            self.congested = True
        elif standing:
            pass  # Not yet: a queue must stand for `enter` intervals, be deep, or fill the limit.
        elif bound and measured:
            if not self.congested:
                self.limit = min(o.ceiling, self.limit + math.sqrt(self.limit))
            elif self._queued * 10 <= self._finished or self._trough == 0:
                # Congested, it grows by one, unless a queue came and went at this limit (over
                # a tenth of the requests took longer than the target) while the service never
                # went idle: the limit is what it can hold (a pool's size), and probing past it
                # is a queue.
                self.limit = min(o.ceiling, self.limit + 1.0)
        elif not bound:
            if self.congested:
                # Shedding keeps the queue short: what it refused is the overload going on.
                # One calm interval is no end (an overload's arrivals come and go).
                if self._refused < self._admitted:
                    calm = True
                    if self._calm_run + 1 >= CALM_INTERVALS_TO_END:
                        self.congested = False
                elif self._refused - self._waited_out - self._by_level >= self._admitted:
                    # Refusing by the shares alone, under half the limit: room is probed for
                    # as headroom, so that a load the shares hold back cannot keep it. (What
                    # a request's own wait refused is a queue, not the shares; what the level
                    # refused is the level's: counted, the limit grew to hundreds while a
                    # level refused, and let a flood in as the level eased.)
                    self.limit = min(o.ceiling, self.limit + math.sqrt(self.limit))
            else:
                self.limit = max(o.floor, float(2 * self._peak), self.limit * o.decay)
        if calm:
            self._calm_run = self._calm_run + 1 if self.congested else 0
        elif self._admitted or self._refused:
            # An interval that decided nothing neither continues a calm run nor breaks it.
            self._calm_run = 0
        if self.limit != before:
            self.changes += 1
        for latencies in (self._service, *self._routes.values()):
            latencies.close_interval()
        self._peak = self.inflight
        self._trough = self.inflight + self._behind
        self._finished = self._queued = 0
        self._admitted = self._refused = self._waited_out = self._by_level = 0
        self._full = False
        self._window_end = now + o.interval_us

    def _judging_route(self) -> Optional[_Latencies]:
        """The route whose fastest request of the interval reads it: of the routes that
        finished a request in it with a no-load latency known (past their cold start, if any
        is), the fastest by nature (then by its fastest, so that the order never matters);
        None if no route did."""
        measured = [
            r for r in self._routes.values() if r.window_min < math.inf and r.noload < math.inf
        ]
        past_cold_start = [r for r in measured if r.confirmed]
        candidates = past_cold_start or measured
        return min(candidates, key=lambda r: (r.noload, r.window_min), default=None)

    def admit(self, priority, now: int, backlog: int = 0) -> bool:
        """Whether a request of `priority` (a name or 0 to 3) is admitted at `now`; an
        admitted one is in flight until `finish`. `backlog` is how long the request waited
        before it could be decided (µs; an event loop's lag): the work ahead of it, counted
        as that many no-load latencies' worth of requests in flight (for every class but the
        top one), and, while congested, its own wait, refused past its share of the target."""
        with self._lock:
            self._roll(now)
            noload = self.noload
            waiting = backlog / noload if backlog > 0 and noload < math.inf else 0
            load = self.inflight + waiting
            # The backlog refuses only while congested: a burst's wait is no standing queue.
            index = priority_index(priority)
            # The top class counts only what is in flight: the backlog is a guess of the
            # queue (the time since the loop was last idle), and its places are kept.
            counted = self.inflight if index == 0 else load
            waited_out = False
            if self.congested:
                share = self.options.shares[index]
                admitted = counted < self.limit * share
                if admitted and index > 0 and waiting > 0:
                    waited_out = backlog >= self.options.sojourn * share * self._target(noload)
                    admitted = not waited_out
            else:
                admitted = self.inflight < max(self.limit, self.options.initial)
                self._full = self._full or not admitted
            # The peak is what the limit counted the request against: for the top class, what
            # is in flight alone, so that a loop kept busy by the top class (a readiness
            # probe's, a load test's), whose backlog is a guess, reads as no queue to cut.
            if admitted:
                self._admitted += 1
                self.inflight += 1
                self._peak = max(self._peak, counted + 1)
                return True
            self._peak = max(self._peak, counted)
            self._refused += 1
            self._waited_out += waited_out
            return False

    def finish(self, latency: int, now: int, route=None, backlog: int = 0) -> None:
        """An admitted request of `route` (its method and path pattern; None: unnamed) ended at
        `now` after `latency` (microseconds both), leaving `backlog` µs of work waiting for the
        service where the package counts it (Go's run queue; 0 elsewhere): the service is not
        idle while it waits, though none is in flight."""
        with self._lock:
            self._roll(now)
            self.inflight = max(0, self.inflight - 1)
            noload = self.noload
            self._behind = backlog / noload if backlog > 0 and noload < math.inf else 0.0
            self._trough = min(self._trough, self.inflight + self._behind)
            self._service.finished(latency)
            latencies = self._route(route)
            latencies.finished(latency)
            self._finished += 1
            self._queued += latency > self._target(latencies.noload)

    def _route(self, route) -> _Latencies:
        """`route`'s latencies, kept apart for the first ROUTES routes named."""
        latencies = self._routes.get(route)
        if latencies is None:
            if len(self._routes) > ROUTES:
                return self._routes[None]
            latencies = self._routes[route] = _Latencies()
        return latencies

    def shed_by_level(self, now: int) -> None:
        """A request the service's level refused at `now` before this limit decided it: one
        more refusal of the interval, as shedding's own (the overload goes on while anything
        is refused: the level's refusals keep congestion from ending when they leave this
        limit only a trickle to decide), never in flight."""
        with self._lock:
            self._roll(now)
            self._refused += 1
            self._by_level += 1

    def leave(self, now: int) -> None:
        """An admitted request ended at `now` with an answer that says nothing of the service's
        latency (the package's own: a refusal, a failure policy's answer while the server
        failed), or began to wait on the rate-limit server (until `back`): it leaves the
        requests in flight, and no latency is counted."""
        with self._lock:
            self._roll(now)
            self.inflight = max(0, self.inflight - 1)
            self._trough = min(self._trough, self.inflight)

    def back(self, now: int) -> None:
        """A request that left the requests in flight (`leave`) while it waited on the
        rate-limit server got its answer, or gave up on it, at `now`: it is in flight again,
        whatever the limit (it was admitted). A frozen server's timeout is not the service's
        concurrency: counted, a service whose requests wait on it refuses its other routes."""
        with self._lock:
            self._roll(now)
            self.inflight += 1
            if self.inflight > self._peak:
                self._peak = self.inflight


__all__ = ["ConcurrencyLimit", "LimitOptions", "PRIORITIES", "priority_index"]
