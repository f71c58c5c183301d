"""What an instance measures of itself between two reports of its load, with no code from
the user: the process's or its cgroup's CPU and memory, the requests in flight, their
latency and their 5xx share over the interval, and over a recent window the requests and
successes (envoy's admission control, `admission`) and, from its busy seconds only, the most
requests completed in a second and the latency of their mix with no queue (Sentinel's check,
`bbr`): a second when the service was not busy measures the demand, not the capacity. Only
the standard library; the clock and the files read are injectable, for the tests.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from typing import Any, Callable, Iterable, Optional


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii") as file:
            return file.read()
    except OSError:
        return None


# The routes a second keeps apart for min_rt; past them, the others share one entry.
ROUTES_KEPT = 32
OTHER_ROUTES = object()


def no_load_latency(seconds: Iterable[dict]) -> float:
    """The latency (ms) of the busy seconds' mix of requests with no queue, BBR's min RTT:
    each route's least latency over them (its no-load latency), weighted by how many
    requests it completed in them. With one route, its least latency; with a fast health
    check beside slow work, the work's, not the check's (the least latency of all would
    shrink the pipe to what the check holds, and read a service at its capacity as many
    times over it). `seconds` are each second's {route: [completed, least latency]}."""
    routes: dict[Any, list] = {}
    for second in seconds:
        for route, (completed, least) in second.items():
            total = routes.setdefault(route, [0, math.inf])
            total[0] += completed
            total[1] = min(total[1], least)
    completed = sum(count for count, _ in routes.values())
    return sum(count * least for count, least in routes.values()) / completed


class CpuMeter:
    """The CPU in use since the last reading, 0 to 1 of what the instance may use. In a
    container with a CPU quota (cgroup v2 `cpu.max`), the cgroup's use (`cpu.stat`) over the
    quota: every process of the container counts. Otherwise the process's own use over one
    core, capped at 1: a Python process runs its Python on one core at a time (the GIL), so
    one core is what it can use however many the host has, and a saturated worker reads 1,
    not 1 over the host's cores. `process` (CPU seconds the process used) is injectable."""

    def __init__(
        self,
        cgroup: str = "/sys/fs/cgroup",
        clock: Callable[[], float] = time.monotonic,
        process: Optional[Callable[[], float]] = None,
    ):
        self.cgroup, self.clock = cgroup, clock
        self.process = process if process is not None else _process_seconds
        self.last: Optional[tuple[float, float, Optional[float]]] = None

    def _quota(self) -> Optional[float]:
        """The cgroup's quota in cores, or None when it has none."""
        quota = _read(os.path.join(self.cgroup, "cpu.max"))
        parts = quota.split() if quota else []
        if len(parts) == 2 and parts[0] != "max":
            return max(float(parts[0]) / float(parts[1]), 0.01)
        return None

    def _used(self, quota: Optional[float]) -> Optional[float]:
        """CPU seconds used so far: the cgroup's under a quota, else the process's."""
        if quota is not None:
            stat = _read(os.path.join(self.cgroup, "cpu.stat")) or ""
            for line in stat.splitlines():
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value) / 1e6
            return None
        return self.process()

    def read(self) -> Optional[float]:
        """The share of CPU used since the last reading; None at the first."""
        quota = self._quota()
        now, used = self.clock(), self._used(quota)
        last, self.last = self.last, (now, used, quota) if used is not None else None
        # A quota set or lifted since changes what is counted: a new baseline.
        if last is None or used is None or now <= last[0] or (last[2] is None) != (quota is None):
            return None
        return max(0.0, min(1.0, (used - last[1]) / ((now - last[0]) * (quota or 1.0))))


def _process_seconds() -> float:
    times = os.times()
    return times.user + times.system


def memory_share(cgroup: str = "/sys/fs/cgroup", proc: str = "/proc") -> Optional[float]:
    """Memory in use over what is allowed, 0 to 1: the cgroup's (`memory.current` over
    `memory.max`), else the host's (`MemTotal - MemAvailable` over `MemTotal`)."""
    current = _read(os.path.join(cgroup, "memory.current"))
    limit = _read(os.path.join(cgroup, "memory.max"))
    if current and limit and limit.strip() != "max":
        return max(0.0, min(1.0, int(current) / max(int(limit), 1)))
    meminfo = _read(os.path.join(proc, "meminfo"))
    if not meminfo:
        return None
    values = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[name] = int(parts[0])
    total, available = values.get("MemTotal"), values.get("MemAvailable")
    if not total or available is None:
        return None
    return max(0.0, min(1.0, (total - available) / total))


def host_load() -> Optional[float]:
    """The host's run queue over its cores (load1 / cores, Sentinel's system load): above 1,
    more runnable threads than cores."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return None


class Signals:
    """The requests an instance serves, counted as they start and finish, and read once a
    report interval (`sample`). Thread-safe: the sync shedder's requests may run on many
    threads."""

    def __init__(
        self,
        window: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        cpu: Optional[Callable[[], Optional[float]]] = None,
        memory: Optional[Callable[[], Optional[float]]] = None,
        load: Optional[Callable[[], Optional[float]]] = None,
    ):
        self.window, self.clock = window, clock
        self.load = load if load is not None else host_load
        self.cpu = cpu if cpu is not None else CpuMeter(clock=clock).read
        self.memory = memory if memory is not None else memory_share
        # The CPU meter's first reading is its baseline: taken now, the first report has a
        # share to give.
        self.cpu()
        self.lock = threading.Lock()
        self.inflight = 0
        # The interval since the last sample.
        self.latencies = 0.0
        self.finished = 0
        self.failed = 0
        # Per second of the window: (second, completed, {route: [completed, least latency]},
        # requests, successes, busy): only a busy second (the instance's limit congested in
        # it, a queue standing) counts towards max_rps and min_rt, as TCP BBR keeps
        # app-limited samples out.
        self.seconds: deque[list] = deque()

    def _second(self, now: float) -> list:
        second = math.floor(now)
        if not self.seconds or self.seconds[-1][0] != second:
            self.seconds.append([second, 0, {}, 0, 0, False])
        while self.seconds and self.seconds[0][0] <= second - self.window:
            self.seconds.popleft()
        return self.seconds[-1]

    def started(self) -> None:
        """A request began."""
        with self.lock:
            self.inflight += 1

    def left(self) -> None:
        """A request ended with an answer that says nothing of the service (a limit's
        refusal, the failure policy's): it leaves the requests in flight, and nothing else
        counts it."""
        with self.lock:
            self.inflight = max(0, self.inflight - 1)

    def done(self, latency: float, status: int, busy: bool = False, route: Any = None) -> None:
        """A request ended after `latency` seconds with HTTP `status` (5xx: failed);
        `busy` when the instance's limit was congested (its throughput was capacity, not
        demand); `route` names its route, whose least latency is kept apart (min_rt)."""
        with self.lock:
            self.inflight = max(0, self.inflight - 1)
            self.latencies += latency
            self.finished += 1
            failed = status >= 500
            self.failed += failed
            second = self._second(self.clock())
            second[1] += 1
            routes = second[2]
            kept = routes.get(route)
            if kept is None and len(routes) >= ROUTES_KEPT:
                route = OTHER_ROUTES
                kept = routes.get(route)
            if kept is None:
                routes[route] = [1, latency * 1000]
            else:
                kept[0] += 1
                kept[1] = min(kept[1], latency * 1000)
            second[3] += 1
            second[4] += not failed
            second[5] = second[5] or busy

    def sample(self) -> dict[str, float]:
        """The factors to report now, and the interval starts again."""
        cpu, memory, load = self.cpu(), self.memory(), self.load()
        with self.lock:
            self._second(self.clock())
            factors: dict[str, float] = {"inflight": float(self.inflight)}
            if cpu is not None:
                factors["cpu"] = cpu
            if memory is not None:
                factors["memory"] = memory
            if load is not None:
                factors["load"] = load
            if self.finished:
                factors["latency"] = self.latencies / self.finished * 1000
                factors["errors"] = self.failed / self.finished
            full = [second for second in self.seconds if second[1] and second[5]]
            if full:
                factors["max_rps"] = float(max(second[1] for second in full))
                factors["min_rt"] = no_load_latency(second[2] for second in full)
            factors["requests"] = float(sum(second[3] for second in self.seconds))
            factors["successes"] = float(sum(second[4] for second in self.seconds))
            self.latencies, self.finished, self.failed = 0.0, 0, 0
        return factors
