"""Writes the `concurrency` part of clients/conformance.json: traces of the local limit
(docs/load.md, "The local limit"), arrivals and latencies in, decisions and the limit out,
which every package replays exactly.

Each trace is a serial service (one request served at a time, `service` µs each), a pool of a
few slots, or an event loop, under arrivals drawn once here with a fixed seed; an admitted
request finishes when the service has served it, so its latency is its wait plus its service.
The events and what the reference implementation (ratelimit_module.concurrency) answered are
stored: the table is the specification's worked record, and a package that disagrees on any
event fails.

    python clients/python/tests/concurrency_traces.py   # rewrites the part
"""

from __future__ import annotations

import heapq
import json
import random
from pathlib import Path

from ratelimit_module.concurrency import PRIORITIES, ConcurrencyLimit, LimitOptions

TABLE = Path(__file__).resolve().parents[2] / "conformance.json"
MIX = (0.10, 0.15, 0.15, 0.60)

# (name, what it shows, service µs, phases of (µs, offered load), options over the defaults,
# the arrivals' seed)
TRACES = (
    (
        "healthy",
        "half the capacity: nothing refused, the limit eases down towards twice the peak",
        4_500,
        ((1_200_000, 0.5),),
        {},
        51,
    ),
    (
        "overload",
        "half, three times, half the capacity: a deep queue begins congestion at once, "
        "the classes are refused from the least important, congestion ends after",
        4_500,
        ((400_000, 0.5), (800_000, 3.0), (600_000, 0.5)),
        {},
        52,
    ),
    (
        "long overload",
        "half, three times for two seconds, half the capacity: shedding keeps the queue short "
        "and the peak low, but what it refuses holds congestion until the overload ends",
        4_500,
        ((400_000, 0.5), (2_000_000, 3.0), (600_000, 0.5)),
        {},
        53,
    ),
    (
        "creeping",
        "a queue that stands but stays shallow begins congestion at the fourth "
        "standing interval; short epochs move the no-load latency",
        4_500,
        ((600_000, 0.5), (1_200_000, 1.0)),
        {"epoch_us": 400_000},
        51,
    ),
)
# A serial service whose level, entered during the overload, refuses before the limit decides:
# (name, what it shows, service µs, phases, options, the arrivals' seed, ((from, to) µs, the
# share each class is admitted)).
LEVEL = (
    "level",
    "half, three times for two seconds, half the capacity, the service's level refusing all "
    "sheddable and half of sheddable_plus from 0.6 s into the overload to 0.2 s after it: what "
    "the level refuses counts among the interval's refusals, so congestion holds while the "
    "level leaves the limit only what it can serve, and ends once the overload does; they are "
    "not the shares' refusals, so the limit does not probe for room while the level refuses: "
    "it stays at about 14 (with them counted as the shares', it grew to about 51 by the level's "
    "end)",
    4_500,
    ((400_000, 0.5), (2_000_000, 3.0), (600_000, 0.5)),
    {},
    59,
    ((1_000_000, 2_600_000), (1.0, 1.0, 0.5, 0.0)),
)

# A pool: SLOTS requests served at a time, each `service` µs, the others queued in order (an
# upstream's connections, a database's pool). (name, what it shows, service µs, phases,
# options, the arrivals' seed)
SLOTS = 4
POOL = (
    "pool",
    "a pool of 4 slots, 20 ms a request, at half, one and a half times, half its capacity: "
    "while congested the target is the no-load latency plus 5 ms (not plus one more no-load "
    "latency), so a queue of one request behind the slots stands; and the initial limit, full "
    "while a queue stands, begins congestion at once",
    20_000,
    ((400_000, 0.5), (800_000, 1.5), (600_000, 0.5)),
    {},
    56,
)

# A dependency that gets slower: every request calls it and waits, none waits for another (no
# queue here), at a steady rate; the dependency's latency goes from FAST to SLOW µs and back.
# (name, what it shows, requests a second, phases of (µs, latency µs), options, the seed)
DEPENDENCY = (
    "slower dependency",
    "25 requests a second, each waiting on a dependency whose latency goes from 5 ms to "
    "300 ms for 1.5 s and back: congestion begins, but the limit's floor of requests in "
    "flight, at the target each, explains no such wait, so after four such intervals the "
    "no-load latency is what the service takes now and the limit grows to hold it",
    25,
    ((1_000_000, 5_000), (1_500_000, 300_000), (1_000_000, 5_000)),
    {},
    57,
)

# An event loop: a request waits for the loop before it can be decided (its wait is the
# backlog it is decided with), and a refusal costs the loop REFUSAL µs. (name, what it shows,
# service µs, phases, options, the arrivals' seed, the classes' mix)
EVENT_LOOPS = (
    (
        "event loop",
        "half, three times, half the capacity of one event loop: a request is decided when "
        "the loop reaches it, its wait the backlog; while congested, one below the top class "
        "that waited past its share of the target is refused; a refusal costs 300 µs of the "
        "loop",
        4_500,
        ((400_000, 0.5), (800_000, 3.0), (600_000, 0.5)),
        {},
        53,
        MIX,
    ),
    (
        "event loop, one class",
        "every request sheddable (no priority given), half, three times, then 0.8 of the "
        "capacity: what the wait refuses is a queue, not the shares, so the limit probes for "
        "nothing, and congestion ends once the overload does",
        4_500,
        ((400_000, 0.5), (800_000, 3.0), (800_000, 0.8)),
        {},
        54,
        (0.0, 0.0, 0.0, 1.0),
    ),
    (
        "event loop, a calm interval",
        "half, three times for 1.2 s, half the capacity of one event loop: 0.86 s into the "
        "overload one interval's arrivals stay under half the limit and fewer are refused "
        "than admitted, but congestion ends only after four such intervals in a row, so it "
        "holds until the overload ends (ended by that one interval, the limit admitted up to "
        "the initial limit whatever the backlog, and a request 0.9 to 1.1 s into the "
        "overload took up to 169 ms, against 20 ms)",
        4_500,
        ((400_000, 0.5), (1_200_000, 3.0), (600_000, 0.5)),
        {},
        56,
        MIX,
    ),
)
REFUSAL = 300

# A loop kept busy by a closed loop of the top class, then a healthy load, where a request's
# wait is known only as a bound, the time since the loop was last idle (Node's): `clients`
# clients of the top class each send their next request as their last one is answered, for
# `closed` µs (the loop never idles, so the bound grows as the busy period does), the loop
# idles `gap` µs, then `phases` of arrivals with the mix. Options as Node's event loop's
# (`enter` 8; `deep` and `sojourn` never). (name, what it shows, service µs, clients, closed
# µs, gap µs, phases, options, the arrivals' seed)
BUSY_LOOP = (
    "busy loop, top class",
    "four clients of the top class in a closed loop for 1 s keep a loop busy (a readiness "
    "probe's, a load test's), each request's wait known only as the time since the loop was "
    "last idle; then 0.8 of the capacity with the mix: the top class counts only what is in "
    "flight, in the peak as in its admission, so the busy loop begins no congestion and "
    "nothing is refused after it (with the backlog in the peak, congestion began 0.93 s into "
    "the loop and held to the trace's end, refusing 50 of the 177 requests that followed)",
    4_500,
    4,
    1_000_000,
    10_000,
    ((1_000_000, 0.8),),
    {"enter": 8, "deep": 1e9, "sojourn": 1e9},
    60,
)

# One core, as a Go service's: a request is decided when it reaches the CPU, with the work
# waiting for the CPU counted as its backlog (a request's service each, as Go counts its run
# queue), and leaves the work still waiting as its backlog when it finishes; the CPU runs the
# newest arrival next (Go's scheduler runs a goroutine it just readied before the others), so
# an interval's fastest request can be quick while a queue stands. A refusal costs REFUSAL µs.
# `sojourn` one over the least share, as in Go. (name, what it shows, service µs, phases,
# options, the seed)
RUN_QUEUE = (
    "one core",
    "one core that runs its newest arrival next (Go's scheduler), half, three times for 2 s, "
    "then half the capacity: between two requests none is in flight while the next ones wait "
    "for the CPU, and the backlog a finished request leaves behind says the core is not idle, "
    "so, congested, the limit grows by one only in an interval where few requests queued: at "
    "most 7 through the overload (with no backlog at finish, it grew by one 15 times, to 13, "
    "and was cut again)",
    4_500,
    ((400_000, 0.5), (2_000_000, 3.0), (600_000, 0.5)),
    {"sojourn": 5.0},
    63,
)

# A burst at an idle service: a serial service, `service` µs a request, at `rate` requests a
# second, and `burst` more requests at once at `at` µs. (name, what it shows, service µs,
# rate, length µs, burst, at µs, options, the seed)
IDLE_BURST = (
    "idle burst",
    "a serial service of 2 ms at 10 requests a second for 4 s, and 16 requests at once after "
    "3 s: the limit has eased down under 9, but while not congested a request is admitted "
    "under the initial limit too, so nothing is refused",
    2_000,
    10,
    4_000_000,
    16,
    3_000_000,
    {},
    58,
)

# The rate-limit server freezes under a service: every request takes `service` µs and none
# waits for another, but one in two calls the server first (CALL µs), leaving the requests in
# flight while it waits (`leave`, then `back` with the answer), and while the server is frozen
# that call waits the client's timeout and the package answers the request itself (a 503):
# such a request leaves the requests in flight with no latency. (name, what it shows, service
# µs, requests a second, length µs, the freeze (from, to) µs, the timeout µs, options, the seed)
# How long the server takes to answer a call when it is not frozen (µs).
CALL = 200
OUTAGE = (
    "server outage",
    "50 requests a second of 1 ms, one in two calling the rate-limit server, which freezes "
    "for 1.5 s after 3 s: each of those waits the client's 1 s timeout out of the requests in "
    "flight and leaves unmeasured (the package's own answer), and nothing is refused (in "
    "flight while they wait and counted as 1 s latencies, they would begin congestion and 49 "
    "requests be refused)",
    1_000,
    50,
    5_500_000,
    (3_000_000, 4_500_000),
    1_000_000,
    {},
    60,
)
OUTAGE_BUSY = (
    "server outage, busy",
    'as "server outage", at 200 requests a second for 2.5 s, the server frozen for 1 s after '
    "1 s: a hundred requests a second wait the timeout, out of the requests in flight, and "
    "nothing is refused (in flight while they wait, they filled the limit, not congested, and "
    "161 of the 514 requests were refused, those that call no server too)",
    1_000,
    200,
    2_500_000,
    (1_000_000, 2_000_000),
    1_000_000,
    {},
    61,
)

# Routes of different latency: every request waits on a dependency for `slow` µs (none waits
# for another: no queue here), at `rate` requests a second with the mix, and a sheddable
# request of `fast` µs (a health check) every `every` µs. (name, what it shows, requests a
# second, slow µs, fast µs, every µs, length µs, options, the seed)
HEALTH_CHECK = (
    "health check",
    "100 requests a second that each wait 50 ms on a dependency, and a health check of 1 ms "
    "every second, for 4 s: the no-load latency is what four intervals in a row took at "
    "least, so the health check alone does not lower it, and nothing is refused (with one "
    "interval's fastest as the no-load latency, congestion began and 118 of the 411 requests "
    "were refused)",
    100,
    50_000,
    1_000,
    1_000_000,
    4_000_000,
    {},
    61,
)

# Two routes of different latencies, each request naming its own: (name, what it shows,
# requests a second of the slow route, its µs, the fast route's µs, its requests a second,
# length µs, options, the seed)
ROUTES = (
    "routes",
    "100 requests a second to a route that waits 50 ms on a dependency, and 5 a second at "
    "random to a route of 1 ms, for 4 s, each request naming its route: an interval is read "
    "by its fastest route's fastest request against that route's own target, so the intervals "
    "without a fast request are no queue, and nothing is refused (with one no-load latency for "
    "both routes, congestion began and 97 of the 405 requests were refused)",
    100,
    50_000,
    1_000,
    5,
    4_000_000,
    {},
    62,
)


def events_of(service: int, phases, seed: int, mix=MIX) -> list[tuple[int, int, object]]:
    """Arrivals, each with a class drawn from `mix`, as (µs, 0, class index)."""
    draw = random.Random(seed)
    arrivals, start = [], 0
    for length, load in phases:
        at = float(start)
        while True:
            at += draw.expovariate(load / service)
            if at >= start + length:
                break
            pick, total, index = draw.random(), 0.0, 3
            for number, share in enumerate(mix):
                total += share
                if pick < total:
                    index = number
                    break
            arrivals.append((int(at), 0, index))
        start += length
    return arrivals


def served(
    name: str,
    about: str,
    options: dict,
    arrivals,
    finish_at,
    own=None,
    level=None,
    route=None,
    make=None,
) -> dict:
    """The trace of `arrivals` through a limit with `options`: an admitted request finishes
    when `finish_at(now)`, the service's model, says; one that `own(now)` says the package
    answers itself leaves then, unmeasured; one that `level(now, class)` says the service's
    level refuses never reaches the limit's decision; `route(now)` names the route of the
    request that arrived at `now` (none unless given); `make(options)` makes the limit (a
    variant's, for a trace's counterfactual)."""
    limit = (make or ConcurrencyLimit)(LimitOptions(**options))
    queue = list(arrivals)
    heapq.heapify(queue)
    events, expect = [], []
    while queue:
        now, kind, value, *named = heapq.heappop(queue)
        if kind == 0 and level is not None and level(now, value):
            limit.shed_by_level(now)
            events.append([now, "level"])
            expect.append([None, limit.limit, limit.congested])
            continue
        if kind == 0:
            admitted = limit.admit(value, now)
            events.append([now, "admit", PRIORITIES[value]])
            if admitted:
                done = finish_at(now)
                named = route(now) if route else ""
                heapq.heappush(queue, (done, 2 if own and own(now) else 1, done - now, named))
            decision = admitted
        elif kind == 2:
            limit.leave(now)
            events.append([now, "leave"])
            decision = None
        elif named and named[0]:
            limit.finish(value, now, named[0])
            events.append([now, "finish", value, named[0]])
            decision = None
        else:
            limit.finish(value, now)
            events.append([now, "finish", value])
            decision = None
        expect.append([decision, limit.limit, limit.congested])
    return {"name": name, "about": about, "options": options, "events": events, "expect": expect}


def serial(service: int):
    """A serial service's model for `served`: one request at a time, `service` µs each, the
    others queued in order."""
    free_at = 0

    def finish_at(now: int) -> int:
        nonlocal free_at
        free_at = max(now, free_at) + service
        return free_at

    return finish_at


def trace(name: str, about: str, service: int, phases, options: dict, seed: int) -> dict:
    """A serial service: one request at a time, the others queued in order."""
    return served(name, about, options, events_of(service, phases, seed), serial(service))


def level_trace(
    name: str, about: str, service: int, phases, options: dict, seed: int, level, make=None
) -> dict:
    """A serial service, and the service's level refusing, over `level`'s (from, to) µs, the
    share it gives each class (drawn with its own seed)."""
    draw = random.Random(seed + 1)
    (begins, ends), shares = level

    def refuses(now: int, index: int) -> bool:
        return begins <= now < ends and draw.random() >= shares[index]

    arrivals = events_of(service, phases, seed)
    return served(name, about, options, arrivals, serial(service), level=refuses, make=make)


def pool_trace(name: str, about: str, service: int, phases, options: dict, seed: int) -> dict:
    """SLOTS requests at a time, the others queued in order for the first slot free."""
    free = [0] * SLOTS  # when each slot is next free

    def finish_at(now: int) -> int:
        slot = min(range(SLOTS), key=free.__getitem__)
        free[slot] = max(now, free[slot]) + service
        return free[slot]

    return served(name, about, options, events_of(service // SLOTS, phases, seed), finish_at)


def dependency_trace(name: str, about: str, rate: int, phases, options: dict, seed: int) -> dict:
    """Every request waits on a dependency whose latency the phases give, none on another."""

    def finish_at(now: int) -> int:
        begun = 0
        for length, latency in phases:
            if now < begun + length:
                return now + latency
            begun += length
        return now + phases[-1][1]

    length = sum(each for each, _ in phases)
    arrivals = events_of(1_000_000 // rate, [(length, 1.0)], seed)
    return served(name, about, options, arrivals, finish_at)


def health_check_trace(
    name: str, about: str, rate: int, slow: int, fast: int, every: int, length: int, options, seed
) -> dict:
    """Requests of `slow` µs at `rate`, and one of `fast` µs every `every` µs, none waiting for
    another."""
    arrivals = events_of(1_000_000 // rate, [(length, 1.0)], seed)
    checks = set(range(every // 2, length, every))
    arrivals += [(at, 0, 3) for at in checks]
    arrivals.sort()
    return served(
        name, about, options, arrivals, lambda now: now + (fast if now in checks else slow)
    )


def routes_trace(
    name: str,
    about: str,
    rate: int,
    slow: int,
    fast: int,
    fast_rate: int,
    length: int,
    options,
    seed,
    named: bool = True,
) -> dict:
    """Requests of `slow` µs at `rate` on one route, and of `fast` µs at `fast_rate` on
    another, both at random, none waiting for another; each names its route if `named`."""
    arrivals = events_of(1_000_000 // rate, [(length, 1.0)], seed)
    checks = {at for at, _, _ in events_of(1_000_000 // fast_rate, [(length, 1.0)], seed + 1)}
    arrivals += [(at, 0, 3) for at in checks]
    arrivals.sort()
    return served(
        name,
        about,
        options,
        arrivals,
        lambda now: now + (fast if now in checks else slow),
        route=(lambda now: "GET /health" if now in checks else "GET /orders") if named else None,
    )


def idle_burst_trace(
    name: str, about: str, service: int, rate: int, length: int, burst: int, at: int, options, seed
) -> dict:
    """A serial service at `rate`, and `burst` sheddable requests at once at `at`."""
    arrivals = events_of(1_000_000 // rate, [(length, 1.0)], seed)
    arrivals += [(at, 0, 3)] * burst
    return served(name, about, options, arrivals, serial(service))


def outage_trace(
    name: str,
    about: str,
    service: int,
    rate: int,
    length: int,
    frozen,
    timeout: int,
    options,
    seed,
    aside: bool = True,
    counted: bool = False,
) -> dict:
    """Requests at `rate`, `service` µs each, none queued; every other one first calls the
    server, which answers in CALL µs, and while it is `frozen` waits `timeout` and is the
    package's own answer. A request waiting on the server leaves the requests in flight until
    it has the answer (`aside`; else it stays in flight); with `counted`, a frozen call's
    request is measured as the service's (its timeout a latency), not the package's own."""
    limit = ConcurrencyLimit(LimitOptions(**options))
    queue = events_of(1_000_000 // rate, [(length, 1.0)], seed)
    calling = {at for number, (at, _, _) in enumerate(queue) if number % 2 == 0}
    heapq.heapify(queue)
    events, expect = [], []

    def record(event: list, decision=None) -> None:
        events.append(event)
        expect.append([decision, limit.limit, limit.congested])

    while queue:
        now, kind, value = heapq.heappop(queue)
        if kind == 0:
            admitted = limit.admit(value, now)
            record([now, "admit", PRIORITIES[value]], admitted)
            if not admitted:
                continue
            if now not in calling:
                heapq.heappush(queue, (now + service, 1, service))
                continue
            if aside:
                limit.leave(now)
                record([now, "leave"])
            fails = frozen[0] <= now < frozen[1]
            heapq.heappush(queue, (now + (timeout if fails else CALL), 3, now))
        elif kind == 3:
            if aside:
                limit.back(now)
                record([now, "back"])
            fails = frozen[0] <= value < frozen[1]
            if fails and not counted:
                limit.leave(now)
                record([now, "leave"])
            else:
                done = now if fails else now + service
                heapq.heappush(queue, (done, 1, done - value))
        else:
            limit.finish(value, now)
            record([now, "finish", value])
    return {"name": name, "about": about, "options": options, "events": events, "expect": expect}


def event_loop_trace(
    name: str, about: str, service: int, phases, options: dict, seed: int, mix, make=None
) -> dict:
    """One event loop, serial: a request is decided when the loop reaches it, with its wait as
    the backlog, and a refusal costs the loop REFUSAL µs; `make(options)` makes the limit (a
    variant's, for a trace's counterfactual)."""
    limit = (make or ConcurrencyLimit)(LimitOptions(**options))
    free_at, events, expect = 0, [], []
    for at, _, index in events_of(service, phases, seed, mix):
        start = max(at, free_at)
        admitted = limit.admit(index, start, start - at)
        events.append([start, "admit", PRIORITIES[index], start - at])
        expect.append([admitted, limit.limit, limit.congested])
        if admitted:
            free_at = start + service
            limit.finish(free_at - at, free_at)
            events.append([free_at, "finish", free_at - at])
            expect.append([None, limit.limit, limit.congested])
        else:
            free_at = start + REFUSAL
    return {"name": name, "about": about, "options": options, "events": events, "expect": expect}


def busy_loop_trace(
    name: str,
    about: str,
    service: int,
    clients: int,
    closed: int,
    gap: int,
    phases,
    options: dict,
    seed: int,
    make=None,
) -> dict:
    """A serial event loop whose requests are decided with the time since the loop was last
    idle as their backlog, and measured from then (a bound of their wait, as Node's);
    `make(options)` makes the limit (a variant's, for a trace's counterfactual)."""
    limit = (make or ConcurrencyLimit)(LimitOptions(**options))
    events, expect = [], []

    def decide(start: int, idle_at: int, index: int) -> int:
        """Decides a request the loop reaches at `start`; when the loop is free again."""
        backlog = start - idle_at
        admitted = limit.admit(index, start, backlog)
        events.append([start, "admit", PRIORITIES[index], backlog])
        expect.append([admitted, limit.limit, limit.congested])
        if not admitted:
            return start + REFUSAL
        done = start + service
        limit.finish(done - idle_at, done)
        events.append([done, "finish", done - idle_at])
        expect.append([None, limit.limit, limit.congested])
        return done

    # The closed loop: another request waits whenever one is answered, so the loop never idles.
    free_at = 0
    while free_at < closed:
        free_at = decide(free_at, 0, 0)
    # Then the mix, after the loop idled.
    start_at = free_at + gap
    idle_at = free_at = start_at
    for at, _, index in events_of(service, phases, seed):
        at += start_at
        if at >= free_at:
            idle_at = at
        free_at = decide(max(at, free_at), idle_at, index)
    return {"name": name, "about": about, "options": options, "events": events, "expect": expect}


def run_queue_trace(
    name: str, about: str, service: int, phases, options: dict, seed: int, behind: bool = True
) -> dict:
    """One core that runs the newest arrival next: a request is decided as it reaches the CPU,
    the work waiting then its backlog, and finishes with the work waiting then as its backlog
    (none with `behind` false: the counterfactual of a package that does not count it)."""
    limit = ConcurrencyLimit(LimitOptions(**options))
    arrivals = events_of(service, phases, seed)
    events, expect = [], []
    waiting: list[tuple[int, int]] = []  # (arrival µs, class), oldest first
    arrived, free_at, last_pick = 0, 0, 0

    def come(until: int) -> None:
        nonlocal arrived
        while arrived < len(arrivals) and arrivals[arrived][0] <= until:
            waiting.append((arrivals[arrived][0], arrivals[arrived][2]))
            arrived += 1

    while arrived < len(arrivals) or waiting:
        if not waiting:
            free_at = max(free_at, arrivals[arrived][0])
        come(free_at)
        # The newest arrival runs next if it came since the last request was picked.
        pick = len(waiting) - 1 if waiting[-1][0] > last_pick else 0
        at, index = waiting.pop(pick)
        start = last_pick = free_at
        backlog = len(waiting) * service
        admitted = limit.admit(index, start, backlog)
        events.append([start, "admit", PRIORITIES[index], backlog])
        expect.append([admitted, limit.limit, limit.congested])
        if not admitted:
            free_at = start + REFUSAL
            continue
        free_at = start + service
        come(free_at)
        latency = free_at - start + backlog
        left = len(waiting) * service if behind else 0
        limit.finish(latency, free_at, None, left)
        events.append([free_at, "finish", latency, None, left])
        expect.append([None, limit.limit, limit.congested])
    return {"name": name, "about": about, "options": options, "events": events, "expect": expect}


def main() -> None:
    table = json.loads(TABLE.read_text())
    defaults = LimitOptions()
    table["concurrency"] = {
        "about": "The local limit (docs/load.md). Options over `defaults` (times in whole µs, "
        'shares most important first); events [µs, "admit", class] (or [µs, "admit", '
        'class, backlog µs]), [µs, "finish", latency µs] (or [µs, "finish", latency µs, '
        'route], or [µs, "finish", latency µs, route or null, backlog µs]: the work left '
        'waiting), [µs, "leave"] (a request the package answered itself: no latency; or one '
        'that begins to wait on the rate-limit server), [µs, "back"] (a request that waited on '
        'the server has its answer: in flight again) or [µs, "level"] (a request the service\'s '
        "level refused before the limit decided it); after each, [admitted or null, limit, "
        "congested].",
        "defaults": {
            "initial": defaults.initial,
            "floor": defaults.floor,
            "ceiling": defaults.ceiling,
            "interval_us": defaults.interval_us,
            "target_us": defaults.target_us,
            "enter": defaults.enter,
            "deep": defaults.deep,
            "epoch_us": defaults.epoch_us,
            "decay": defaults.decay,
            "shares": list(defaults.shares),
            "sojourn": defaults.sojourn,
        },
        "traces": [trace(*spec) for spec in TRACES]
        + [level_trace(*LEVEL)]
        + [pool_trace(*POOL), dependency_trace(*DEPENDENCY)]
        + [idle_burst_trace(*IDLE_BURST), outage_trace(*OUTAGE), outage_trace(*OUTAGE_BUSY)]
        + [health_check_trace(*HEALTH_CHECK), routes_trace(*ROUTES)]
        + [event_loop_trace(*spec) for spec in EVENT_LOOPS]
        + [busy_loop_trace(*BUSY_LOOP), run_queue_trace(*RUN_QUEUE)],
    }
    TABLE.write_text(dumps(table))


def dumps(table: dict) -> str:
    """The table as the other parts are written (one space an indent), but an event, or what
    follows it, on one line: the traces stay readable, a line per step."""
    rest = {name: part for name, part in table.items() if name != "concurrency"}
    text = json.dumps(rest, indent=1, ensure_ascii=False)
    part = table["concurrency"]
    lines = ["{"]
    for name in ("about", "defaults"):
        lines.append(f' "{name}": {json.dumps(part[name], ensure_ascii=False)},')
    lines.append(' "traces": [')
    for number, one in enumerate(part["traces"]):
        lines.append("  {")
        for name in ("name", "about", "options"):
            lines.append(f'   "{name}": {json.dumps(one[name], ensure_ascii=False)},')
        for name in ("events", "expect"):
            steps = ",\n".join(f"    {json.dumps(step)}" for step in one[name])
            lines.append(f'   "{name}": [\n{steps}\n   ]' + ("," if name == "events" else ""))
        lines.append("  }" + ("," if number + 1 < len(part["traces"]) else ""))
    lines.append(" ]")
    lines.append("}")
    concurrency = "\n ".join(lines)
    return text[:-2] + ',\n "concurrency": ' + concurrency + "\n}\n"


if __name__ == "__main__":
    main()
