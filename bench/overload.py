"""Load shedding under overload (docs/load.md), each service shape protected as its package's
docs show, every option at its default and the default policy, nothing tuned to this bench:

  (a) one async Python worker (uvicorn, Starlette, `LoadSheddingMiddleware`), CPU-bound;
  (b) a threaded WSGI app (Flask under waitress' pool of 4 threads, `LoadSheddingWSGI`),
      CPU-bound;
  (c) an Express service (Node, `loadShedding`), CPU-bound;
  (d) nginx (the Lua package's `load.shed`/`record`) in front of a slow upstream that serves
      4 requests at a time, 20 ms each, and queues the rest;
  (e) two instances of (a) calling one backend whose latency goes from 5 ms to 300 ms for
      20 s and back (the fleet run);
  (f) a Go net/http service on one core (GOMAXPROCS=1, `load.Middleware`), CPU-bound, beside
      go-zero's adaptive shedder with its defaults;
  (g) a Spring MVC service (Tomcat's 200 threads, the starter's load shedding), CPU-bound,
      beside Netflix's concurrency-limits (Gradient2) with its defaults;
  (h) the app of (b) under gunicorn's gthread worker (one worker of 4 threads).

Shapes (a) to (d) and (f) to (h): open-loop Poisson arrivals, 10 s at half the capacity, 30 s at three
times it, 10 s at half again, each request with a class drawn from the mix (10%
critical_plus, 15% critical, 15% sheddable_plus, 60% sheddable) in `X-Priority`; a client
gives up after TIMEOUT seconds (a late answer is not goodput). Each shape runs with no
protection, with the package's fixed limit (a rate limit at the measured capacity), and
with load shedding, one after the other on the same schedule; then 20 s at 0.8 of the
capacity with load shedding (and each peer a shape names for it), for what it refuses from a
healthy service. Only the standard
library here; the services run in the clients' virtualenv, node and nginx.

    python3 bench/overload.py [path/to/libredis_ratelimit.so] [--json] [--shapes abcdefgh]
        [--modes none,fixed,shed,...] [--no-steady]

With `--closed-loop`, only what load shedding refuses of a closed loop instead: each shape's
service, its defaults, sent CLOSED_SECONDS of `sheddable` requests (each on a new connection)
by 1, 2, 4 and 8 clients that each ask again as soon as they are answered (a load test's),
as a table (docs/load.md cites it).
"""

from __future__ import annotations

import asyncio
import json
import os
import math
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / "target/clients-venv/bin/python"
SHAPES_DIR = ROOT / "bench/shapes"
# Shape (f), built by `make deps-bench` from clients/go/compat/shape.
GO_SHAPE = ROOT / "target/go-bench/shape"
# Shape (g): clients/java/bench-servlet, its classpath written by `make deps-bench`.
JAVA_SHAPE = ROOT / "clients/java/bench-servlet"

TIMEOUT = 2.0
# Before a run, each service is sent requests closed-loop for this long, as a readiness probe
# warms it: a JVM's first seconds (its JIT) are no measure of its health.
WARMUP = 3.0
CPU_MS = 4.5
# (seconds, offered load as a multiple of the capacity)
PHASES = ((10, 0.5), (30, 3.0), (10, 0.5))
OVERLOAD_STARTS, OVERLOAD_ENDS = 10.0, 40.0
STEADY = (20, 0.8)
MIX = (("critical_plus", 0.10), ("critical", 0.15), ("sheddable_plus", 0.15),
       ("sheddable", 0.60))
PRIORITIES = tuple(name for name, _ in MIX)
MODES = (("none", "no protection"), ("fixed", "the package's fixed limit"),
         ("shed", "load shedding, defaults"))

# The fleet run: two instances, a backend whose latency goes from FAST to SLOW and back.
FLEET_RATE = 25.0  # requests a second to each instance
FLEET_PHASES = ((10, 0.005), (20, 0.300), (10, 0.005))  # (seconds, backend latency)
FLEET_SLOW_STARTS, FLEET_SLOW_ENDS = 10.0, 30.0

# The modes the aims apply to: load shedding as each package's docs set it up (for the threaded
# WSGI shape, its documented setup is the nginx package in front).
AIMED = ("shed", "nginx")

# The aims of the issue that asked for this bench, per shape.
AIMS = {"top": 0.95, "goodput": 0.90, "p99": 2.0, "starts": 1.0, "stops": 2.0,
        "outside": 0.01}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(port: int, *args) -> bytes:
    """One command on a new connection; the raw reply."""
    out = b"*%d\r\n" % len(args)
    for arg in args:
        arg = str(arg).encode()
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(out)
        reply = sock.recv(1 << 16)
    if reply.startswith(b"-"):
        raise RuntimeError(reply.decode().strip())
    return reply


def wait_for_port(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline or process.poll() is not None:
                raise SystemExit(f"{what} did not start")
            time.sleep(0.05)


class Process:
    """A program on a port, killed by `stop` (an overloaded one may hold thousands of
    requests)."""

    def __init__(self, args: list, port: int, what: str, cwd: Path = ROOT):
        self.port = port
        self.process = subprocess.Popen([str(arg) for arg in args], cwd=cwd,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(port, self.process, what)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Redis(Process):
    def __init__(self, module: Path):
        port = free_port()
        self.dir = tempfile.mkdtemp(prefix="ratelimit-bench-load-")
        super().__init__(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", self.dir, "--loadmodule", module],
                         port, "redis-server")

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def stop_nginx(nginx: Process) -> None:
    """SIGTERM, nginx's fast shutdown: its master stops its workers (killed, it leaves them
    running, their timers reporting, through the shapes that follow)."""
    nginx.process.terminate()
    try:
        nginx.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        nginx.stop()


def slow_upstream(redis_port: int) -> Process:
    """Shape (d)'s upstream: 4 requests at a time, 20 ms each, the others queued."""
    upstream = free_port()
    return Process([PYTHON, SHAPES_DIR / "upstream.py", upstream, 4, 20], upstream,
                   "the upstream")


class Nginx:
    """nginx with the Lua package in front of an upstream (shape (d)'s slow one unless
    `upstream` starts another, given the server's port), protected per `mode`."""

    def __init__(self, redis_port: int, mode: str, capacity: float,
                 upstream: Callable[[int], Process] = slow_upstream):
        self.upstream = upstream(redis_port)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ratelimit-bench-nginx-"))
        (self.dir / "tmp").mkdir()
        redis = f'{{ host = "127.0.0.1", port = {redis_port}, timeout = 1000 }}'
        rate = max(1, round(capacity))
        access, log, init = "", "", ""
        if mode == "shed":
            init = (f'require("resty.ratelimit_module.load").start({redis}, '
                    f'{{ service = "load:{self.port}", dict = "ratelimit_load" }})')
            access = 'require("resty.ratelimit_module.load").shed(ngx.var.http_x_priority)'
            log = 'require("resty.ratelimit_module.load").record()'
        elif mode == "fixed":
            init = (f'LIMIT = assert(require("resty.ratelimit_module.req").new({redis}, '
                    f'{rate}, {max(1, rate // 10)}))')
            access = ('local delay, err = LIMIT:incoming("bench:capacity", true) '
                      'if not delay then return ngx.exit(err == "rejected" and 429 or 500) end')
        stats = ('local limit = require("resty.ratelimit_module.load").limit '
                 'ngx.say(require("cjson").encode({ changes = limit and limit.changes or 0, '
                 'congestions = limit and limit.congestions or 0 }))')
        config = f"""
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log {self.dir}/error.log warn;
pid {self.dir}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {self.dir}/tmp;
    proxy_temp_path {self.dir}/tmp;
    lua_package_path "{ROOT}/clients/lua/lib/?.lua;/usr/share/lua/5.1/?.lua;;";
    lua_shared_dict ratelimit_load 1m;
    init_worker_by_lua_block {{ {init} }}
    upstream slow {{ server 127.0.0.1:{self.upstream.port}; }}
    server {{
        listen 127.0.0.1:{self.port} backlog=4096;
        location = / {{
            access_by_lua_block {{ {access} }}
            proxy_pass http://slow;
            proxy_read_timeout 60s;
            log_by_lua_block {{ {log} }}
        }}
        location = /stats {{ content_by_lua_block {{ {stats} }} }}
    }}
}}
"""
        (self.dir / "nginx.conf").write_text(config)
        self.nginx = Process(["nginx", "-p", self.dir, "-c", self.dir / "nginx.conf", "-g",
                              "daemon off;"], self.port, "nginx")

    def stop(self) -> None:
        stop_nginx(self.nginx)
        self.upstream.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Shape:
    letter: str
    name: str
    start: Callable[[int, str, float], object]
    # Peers run on this shape beside the three modes, each with its documented defaults:
    # (mode, what the table calls it).
    peers: tuple = ()
    # The modes also run at a steady 0.8 of the capacity.
    steady_modes: tuple = ("shed",)

    def modes(self) -> tuple:
        return MODES + self.peers


def python_service(script: str, nginx_mode: bool = False,
                   extra: tuple = ()) -> Callable[[int, str, float], object]:
    """The Python service `script` in `mode`, `extra` its further arguments; with
    `nginx_mode`, mode "nginx" is the service unprotected behind nginx's load shedding
    (`behind_nginx`)."""
    def start(redis_port: int, mode: str, capacity: float) -> object:
        if nginx_mode and mode == "nginx":
            return behind_nginx(script, extra)(redis_port, mode, capacity)
        port = free_port()
        return Process([PYTHON, SHAPES_DIR / script, port, f"redis://127.0.0.1:{redis_port}",
                        mode, CPU_MS, capacity, *extra], port, script)
    return start


def behind_nginx(script: str, extra: tuple = ()) -> Callable[[int, str, float], "Nginx"]:
    """The Python service `script`, unprotected, behind nginx with the Lua package's load
    shedding (the documented setup for a threaded WSGI server): mode "nginx"."""
    def start(redis_port: int, mode: str, capacity: float) -> Nginx:
        app = python_service(script, extra=extra)
        return Nginx(redis_port, "shed", capacity,
                     upstream=lambda port: app(port, "none", capacity))
    return start


def express_service(redis_port: int, mode: str, capacity: float) -> Process:
    port = free_port()
    return Process(["node", SHAPES_DIR / "express_service.js", port,
                    f"redis://127.0.0.1:{redis_port}", mode, CPU_MS, capacity], port,
                   "the Express service")


def go_service(redis_port: int, mode: str, capacity: float) -> Process:
    port = free_port()
    return Process([GO_SHAPE, port, f"redis://127.0.0.1:{redis_port}", mode, CPU_MS, capacity],
                   port, "the Go service")


def java_service(redis_port: int, mode: str, capacity: float) -> Process:
    port = free_port()
    classpath = (f"{JAVA_SHAPE / 'target/classes'}:"
                 f"{(JAVA_SHAPE / 'target/classpath.txt').read_text().strip()}")
    return Process(["java", "-cp", classpath, "io.github.redisratelimit.bench.ServletShape", port,
                    f"redis://127.0.0.1:{redis_port}", mode, CPU_MS, capacity], port,
                   "the Spring MVC service")


SHAPES = (
    Shape("a", "one async Python worker (uvicorn, Starlette), CPU-bound",
          python_service("starlette_service.py")),
    Shape("b", "a threaded WSGI app (Flask under waitress, 4 threads), CPU-bound",
          python_service("flask_service.py", nginx_mode=True),
          peers=(("nginx", "the nginx package in front (its docs' setup), defaults"),)),
    Shape("h", "a threaded WSGI app (Flask under gunicorn's gthread worker, 4 threads), "
          "CPU-bound", python_service("flask_service.py", nginx_mode=True, extra=("gunicorn",)),
          peers=(("nginx", "the nginx package in front (its docs' setup), defaults"),)),
    Shape("c", "an Express service (Node), CPU-bound", express_service,
          peers=(("toobusy", "toobusy-js, defaults"),
                 ("overload-protection", "overload-protection, defaults"))),
    Shape("d", "nginx in front of a slow upstream (4 at a time, 20 ms each)", Nginx),
    Shape("f", "a Go net/http service on one core (GOMAXPROCS=1), CPU-bound", go_service,
          peers=(("gozero", "go-zero's adaptive shedder, defaults"),),
          steady_modes=("shed", "gozero")),
    Shape("g", "a Spring MVC service (Tomcat, 200 threads), CPU-bound", java_service,
          peers=(("gradient2", "concurrency-limits' Gradient2, defaults"),),
          steady_modes=("shed", "gradient2")),
)


async def request(port: int, priority: str) -> tuple[int, float]:
    """One request: its status (0 when the client gave up) and its latency."""
    started = time.perf_counter()

    async def exchange() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"GET / HTTP/1.0\r\nX-Priority: {priority}\r\n\r\n".encode())
            head = await reader.readline()
            await reader.read()
            return int(head.split()[1])
        finally:
            writer.close()

    try:
        status = await asyncio.wait_for(exchange(), TIMEOUT)
    except (asyncio.TimeoutError, OSError, IndexError, ValueError):
        status = 0
    return status, time.perf_counter() - started


def arrivals(phases, rate_of, seed: int) -> list[tuple[float, str]]:
    """Poisson arrivals over the phases (each `(seconds, x)` at `rate_of(x)` a second), each
    with a priority drawn from the mix: a fixed schedule, the same in every mode."""
    draw = random.Random(seed)
    schedule, start = [], 0.0
    for seconds, x in phases:
        at, rate = start, rate_of(x)
        while True:
            at += draw.expovariate(rate)
            if at >= start + seconds:
                break
            pick, total, name = draw.random(), 0.0, MIX[-1][0]
            for one, share in MIX:
                total += share
                if pick < total:
                    name = one
                    break
            schedule.append((at, name))
        start += seconds
    return schedule


LOADGEN = ROOT / "target/loadgen/release/loadgen"


async def offer(ports: list[int], schedule) -> list[tuple[float, str, int, float, int]]:
    """Sends the schedule open loop, spread over `ports` in turn: (at, priority, status,
    latency, port's index) each. By bench/loadgen (Rust, `make deps-bench` builds it), whose
    own lag is not in the latency it measures; by this process's loop without it."""
    if LOADGEN.exists():
        lines = "".join(f"{at:.6f} {ports[number % len(ports)]} {priority}\n"
                        for number, (at, priority) in enumerate(schedule))
        done = await asyncio.to_thread(subprocess.run, [str(LOADGEN), str(TIMEOUT)],
                                       input=lines, capture_output=True, text=True, check=True)
        records = []
        for number, ((at, priority), line) in enumerate(zip(schedule, done.stdout.split("\n"))):
            status, latency = line.split()
            records.append((at, priority, int(status), float(latency), number % len(ports)))
        return sorted(records)
    loop = asyncio.get_running_loop()
    began = loop.time()
    records: list = []

    async def one(at: float, priority: str, index: int) -> None:
        status, latency = await request(ports[index], priority)
        records.append((at, priority, status, latency, index))

    tasks = []
    for number, (at, priority) in enumerate(schedule):
        delay = began + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(at, priority, number % len(ports))))
    await asyncio.gather(*tasks)
    return sorted(records)


def capacity(start: Callable, redis_port: int) -> float:
    """The shape's requests a second at saturation, unprotected: eight clients in a closed
    loop after 2 s of warming up, the lower of two 3 s readings (a single reading of the Go
    shape once came out 28% above what the same shape measured alone right after, which put
    its steady "0.8" above its capacity)."""
    service = start(redis_port, "none", 0.0)
    try:
        async def run(seconds: float) -> int:
            done, end = 0, time.perf_counter() + seconds

            async def client() -> None:
                nonlocal done
                while time.perf_counter() < end:
                    status, _ = await request(service.port, "critical")
                    done += status == 200

            await asyncio.gather(*(client() for _ in range(8)))
            return done

        asyncio.run(run(2.0 + WARMUP))
        return min(asyncio.run(run(3.0)), asyncio.run(run(3.0))) / 3.0
    finally:
        service.stop()


def warm(port: int) -> None:
    """Four clients in a closed loop for WARMUP seconds, as the top class (never shed)."""
    asyncio.run(closed_run(port, 4, "critical_plus", WARMUP))


async def closed_run(port: int, clients: int, priority: str, seconds: float) -> tuple[int, int]:
    """(sent, refused) of `clients` clients of `priority` that each ask again as soon as they
    are answered, for `seconds`."""
    end = time.perf_counter() + seconds
    counts = [0, 0]

    async def client() -> None:
        while time.perf_counter() < end:
            status, _ = await request(port, priority)
            counts[0] += 1
            counts[1] += refused(status)

    await asyncio.gather(*(client() for _ in range(clients)))
    return counts[0], counts[1]


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process `pid` and its threads have used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def refusal_cost(shape: "Shape", redis_port: int, nominal: float) -> Optional[float]:
    """What one refusal costs the service, in its own CPU seconds: the service under load
    shedding with a policy that admits no class, sent requests closed-loop by 16 clients for
    3 s; its CPU time over the 503s it answered. None for a shape with no single process."""
    service = shape.start(redis_port, "shed", nominal)
    try:
        pid = getattr(service, "process", None)
        if pid is None:
            return None
        pid = pid.pid
        warm(service.port)
        key = f"load:{service.port}"
        call(redis_port, "RL.LOAD.POLICY", key, "LEVEL", "inflight", "0", "SHARES",
             "0", "0", "0", "0")

        async def closed_loop(seconds: float) -> int:
            refused_count, end = 0, time.perf_counter() + seconds

            async def client() -> None:
                nonlocal refused_count
                while time.perf_counter() < end:
                    status, _ = await request(service.port, "critical_plus")
                    refused_count += status == 503

            await asyncio.gather(*(client() for _ in range(16)))
            return refused_count

        # The shedder's first report under the policy: every class shed from then on.
        deadline = time.monotonic() + 10
        while asyncio.run(closed_loop(0.2)) == 0 and time.monotonic() < deadline:
            pass
        before = cpu_seconds(pid)
        answered = asyncio.run(closed_loop(3.0))
        return (cpu_seconds(pid) - before) / answered if answered else None
    finally:
        service.stop()


def goodput_bound(nominal: float, cost: Optional[float], load: float = 3.0) -> Optional[float]:
    """The most of the capacity a service can serve at `load` times it when each refusal
    costs `cost` of its time: serving G (a share of the capacity) takes G of it, refusing
    the rest (load - G) times the capacity takes that many refusals' cost."""
    if cost is None:
        return None
    per = nominal * cost
    return max(0.0, min(1.0, (1 - load * per) / (1 - per)))


def stats(port: int) -> dict:
    """The instance's limit's counters; empty when an overloaded service did not answer in
    time (then its changes are unknown, not 0)."""
    # As the top class: a service shedding would refuse the read of a request with no priority.
    ask = urllib.request.Request(f"http://127.0.0.1:{port}/stats",
                                 headers={"X-Priority": "critical_plus"})
    try:
        with urllib.request.urlopen(ask, timeout=5) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError):
        return {}


def counted(start: dict, end: dict, name: str) -> Optional[int]:
    """How much a counter of the instance's limit grew, or None when a read failed."""
    if name not in start or name not in end:
        return None
    return end[name] - start[name]


class Watch(threading.Thread):
    """Polls the service's level (`RL.LOAD.STATUS`) every 100 ms, and reads the instance's
    limit's counters when the overload begins and ends."""

    def __init__(self, redis_port: int, port: int, key: str, began: float):
        super().__init__(daemon=True)
        self.redis_port, self.port, self.key, self.began = redis_port, port, key, began
        self.levels: list[tuple[float, int]] = []
        self.at: dict[str, dict] = {}
        self.done = threading.Event()

    def run(self) -> None:
        marks = {"start": OVERLOAD_STARTS, "end": OVERLOAD_ENDS}
        while not self.done.wait(0.1):
            now = time.monotonic() - self.began
            for name, at in list(marks.items()):
                if now >= at:
                    self.at[name] = stats(self.port)
                    del marks[name]
            try:
                reply = call(self.redis_port, "RL.LOAD.STATUS", self.key)
                # *12, $5, level, :N, ...
                level = int(reply.split(b"\r\n")[3].lstrip(b":"))
            except (OSError, RuntimeError, ValueError, IndexError):
                continue
            if not self.levels or self.levels[-1][1] != level:
                self.levels.append((now, level))


def percentile(values: list[float], share: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def refused(status: int) -> bool:
    return status in (429, 503)


def summarise(records, seconds: int, nominal: float) -> dict:
    """Per phase and priority: offered, served (200 in time), the admitted p99; when
    shedding started and stopped; refusals outside the overload; goodput."""
    bounds = {"before": (0.0, OVERLOAD_STARTS), "overload": (OVERLOAD_STARTS, OVERLOAD_ENDS),
              "after": (OVERLOAD_ENDS, float(seconds))}
    phases = {}
    for phase, (low, high) in bounds.items():
        within = [r for r in records if low <= r[0] < high]
        rows = {}
        for priority in PRIORITIES:
            mine = [r for r in within if r[1] == priority]
            rows[priority] = {"offered": len(mine), "served": sum(r[2] == 200 for r in mine)}
        admitted = [r[3] for r in within if r[2] == 200]
        rows["p99"] = percentile(admitted, 0.99)
        rows["refused"] = sum(refused(r[2]) for r in within)
        rows["requests"] = len(within)
        rows["served"] = len(admitted)
        phases[phase] = rows
    series = {priority: [0] * seconds for priority in PRIORITIES}
    for r in records:
        if r[2] == 200 and int(r[0]) < seconds:
            series[r[1]][int(r[0])] += 1
    p99_series = [percentile([r[3] for r in records if r[2] == 200 and int(r[0]) == second],
                             0.99) for second in range(seconds)]
    settled = [r[3] for r in records if r[2] == 200 and OVERLOAD_STARTS + 1 <= r[0] < OVERLOAD_ENDS]
    shed = [r[0] for r in records if refused(r[2])]
    started = [at for at in shed if at >= OVERLOAD_STARTS]
    after = [at for at in shed if at >= OVERLOAD_ENDS]
    outside = phases["before"]["requests"] + phases["after"]["requests"]
    return {
        "phases": phases, "goodput_series": series, "p99_series": p99_series,
        "p99_settled": percentile(settled, 0.99),
        "shedding_starts": (min(started) - OVERLOAD_STARTS) if started else None,
        "shedding_stops": (max(after) - OVERLOAD_ENDS) if after else 0.0 if started else None,
        "refused_outside": (phases["before"]["refused"] + phases["after"]["refused"])
        / max(1, outside),
        "goodput": phases["overload"]["served"] / (OVERLOAD_ENDS - OVERLOAD_STARTS) / nominal,
    }


def run_shape(shape: Shape, module: Path, only: Optional[set] = None,
              steady: bool = True) -> dict:
    redis = Redis(module)
    try:
        nominal = capacity(shape.start, redis.port)
        print(f"  ({shape.letter}) capacity: {nominal:.0f} requests a second", file=sys.stderr,
              flush=True)
        seconds = sum(length for length, _ in PHASES)
        schedule = arrivals(PHASES, lambda x: x * nominal, seed=51)
        runs = {}
        for mode, _ in shape.modes():
            if only is not None and mode not in only:
                continue
            call(redis.port, "FLUSHALL")
            service = shape.start(redis.port, mode, nominal)
            warm(service.port)
            watch = Watch(redis.port, service.port, f"load:{service.port}", time.monotonic())
            watch.start()
            try:
                records = asyncio.run(offer([service.port], schedule))
            finally:
                watch.done.set()
                watch.join()
                service.stop()
            run = summarise(records, seconds, nominal)
            start, end = watch.at.get("start", {}), watch.at.get("end", {})
            run["limit_changes"] = counted(start, end, "changes")
            run["congestions"] = counted(start, end, "congestions")
            in_overload = [lv for at, lv in watch.levels if OVERLOAD_STARTS <= at < OVERLOAD_ENDS]
            run["level_changes"] = len(in_overload)
            run["levels"] = watch.levels
            runs[mode] = run
            print(f"  ({shape.letter}) {mode}: done", file=sys.stderr, flush=True)
        measured = {"capacity": nominal, "requests": len(schedule), "runs": runs}
        if only is None or "shed" in only:
            call(redis.port, "FLUSHALL")
            cost = refusal_cost(shape, redis.port, nominal)
            measured["refusal_cost"] = cost
            measured["goodput_bound"] = goodput_bound(nominal, cost)
            if cost is not None:
                print(f"  ({shape.letter}) a refusal costs {cost * 1e6:.0f} µs of the service's "
                      f"CPU: goodput at 3x at most {measured['goodput_bound']:.0%}",
                      file=sys.stderr, flush=True)
        if steady:
            measured["steady"] = {}
            for mode in shape.steady_modes:
                call(redis.port, "FLUSHALL")
                service = shape.start(redis.port, mode, nominal)
                try:
                    warm(service.port)
                    records = asyncio.run(offer([service.port], arrivals(
                        [STEADY], lambda x: x * nominal, seed=52)))
                finally:
                    service.stop()
                measured["steady"][mode] = {
                    "refused": sum(refused(r[2]) for r in records) / max(1, len(records)),
                    "requests": len(records)}
        return measured
    finally:
        redis.stop()


class Backend:
    """The fleet's shared backend: answers after `latency` seconds, which the run changes."""

    def __init__(self):
        backend = self
        self.latency = FLEET_PHASES[0][1]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                time.sleep(backend.latency)
                self.send_response(200)
                self.send_header("Content-Length", "3")
                self.end_headers()
                self.wfile.write(b"ok\n")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


def fleet(module: Path) -> dict:
    """Shape (e): two instances of (a) calling one backend that slows down; each protected
    by its defaults, nothing declared."""
    redis, backend = Redis(module), Backend()
    services = []
    try:
        url = f"http://127.0.0.1:{backend.port}/"
        for _ in range(2):
            port = free_port()
            services.append(Process([PYTHON, SHAPES_DIR / "starlette_service.py", port,
                                     f"redis://127.0.0.1:{redis.port}", "shed", 1, 0, url],
                                    port, "the fleet's service"))
        seconds = sum(length for length, _ in FLEET_PHASES)
        schedule = arrivals([(seconds, 1.0)], lambda _: 2 * FLEET_RATE, seed=46)

        def struggle() -> None:
            began = time.monotonic()
            start = 0.0
            for length, latency in FLEET_PHASES:
                time.sleep(max(0.0, began + start - time.monotonic()))
                backend.latency = latency
                start += length

        changer = threading.Thread(target=struggle)
        changer.start()
        records = asyncio.run(offer([service.port for service in services], schedule))
        changer.join()
        slow = [r for r in records if FLEET_SLOW_STARTS <= r[0] < FLEET_SLOW_ENDS]
        fast = [r for r in records if not FLEET_SLOW_STARTS <= r[0] < FLEET_SLOW_ENDS]
        shed = [r[0] for r in records if refused(r[2])]
        started = [at for at in shed if at >= FLEET_SLOW_STARTS]
        after = [at for at in shed if at >= FLEET_SLOW_ENDS]
        served = {p: (sum(r[2] == 200 for r in slow if r[1] == p),
                      sum(r[1] == p for r in slow)) for p in PRIORITIES}
        return {
            "requests": len(records),
            "served": served,
            "p99_fast": percentile([r[3] for r in fast if r[2] == 200 and r[0] < 10], 0.99),
            "p99_slow": percentile([r[3] for r in slow if r[2] == 200], 0.99),
            "refused_outside": sum(refused(r[2]) for r in fast) / max(1, len(fast)),
            "shedding_starts": (min(started) - FLEET_SLOW_STARTS) if started else None,
            "shedding_stops": (max(after) - FLEET_SLOW_ENDS) if after else 0.0,
            "stats": [stats(service.port) for service in services],
        }
    finally:
        for service in services:
            service.stop()
        backend.stop()
        redis.stop()


def local_check_cost() -> dict:
    """What the local check costs a request in each package, in-process (admit and finish
    of the instance's limit, and the shedder's whole admit and finished with no level)."""
    costs = {}
    python = (
        "import time\n"
        "from ratelimit_module.concurrency import ConcurrencyLimit\n"
        "limit = ConcurrencyLimit(); n = 200000; t = time.perf_counter()\n"
        "for i in range(n):\n"
        "    limit.admit(3, i * 100); limit.finish(50, i * 100 + 50)\n"
        "print((time.perf_counter() - t) / n * 1e9)\n")
    out = subprocess.run([PYTHON, "-c", python], capture_output=True, text=True, check=True)
    costs["Python"] = float(out.stdout)
    node = (
        "const { ConcurrencyLimit } = require('./clients/node/concurrency');"
        "const limit = new ConcurrencyLimit(); const n = 2000000;"
        "for (let i = 0; i < n; i++) { limit.admit(3, i * 100); limit.finish(50, i * 100 + 50); }"
        "const t = process.hrtime.bigint();"
        "for (let i = 0; i < n; i++) { limit.admit(3, i * 100); limit.finish(50, i * 100 + 50); }"
        "console.log(Number(process.hrtime.bigint() - t) / n);")
    out = subprocess.run(["node", "-e", node], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    costs["Node"] = float(out.stdout)
    rust = ROOT / "target/rust-clients/release/examples/bench"
    if rust.exists():
        out = subprocess.run([rust, "--local-limit"], capture_output=True, text=True)
        if out.returncode == 0:
            costs["Rust"] = float(out.stdout)
    lua = nginx_local_cost()
    if lua is not None:
        costs["Lua (nginx worker)"] = lua
    return costs


def nginx_local_cost() -> Optional[float]:
    """ns per admit and finish of a worker's limit, timed in an nginx worker (LuaJIT)."""
    work = Path(tempfile.mkdtemp(prefix="ratelimit-bench-lua-"))
    port = free_port()
    body = ('local limit = require("resty.ratelimit_module.concurrency").new() '
            'local n = 2000000 '
            'for i = 0, n - 1 do limit:admit(4, i * 100) limit:finish(50, i * 100 + 50) end '
            'local t = os.clock() '
            'for i = 0, n - 1 do limit:admit(4, i * 100) limit:finish(50, i * 100 + 50) end '
            'ngx.say((os.clock() - t) / n * 1e9)')
    (work / "tmp").mkdir()
    (work / "nginx.conf").write_text(f"""
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log {work}/error.log warn;
pid {work}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {work}/tmp;
    lua_package_path "{ROOT}/clients/lua/lib/?.lua;;";
    server {{ listen 127.0.0.1:{port}; location = / {{ content_by_lua_block {{ {body} }} }} }}
}}
""")
    try:
        nginx = Process(["nginx", "-p", work, "-c", work / "nginx.conf", "-g", "daemon off;"],
                        port, "nginx")
    except SystemExit:
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as reply:
            return float(reply.read())
    except (OSError, ValueError):
        return None
    finally:
        stop_nginx(nginx)
        shutil.rmtree(work, ignore_errors=True)


def measure_overload(module: Path, letters: str = "abcdefgh", only: Optional[set] = None,
                     steady: bool = True) -> dict | None:
    """Every shape of `letters`, in every mode (or those of `only`), with the steady run at
    0.8 of the capacity unless `steady` is False."""
    if not PYTHON.exists():
        print("  skipped: no target/clients-venv (make clients-deps makes it)")
        return None
    result: dict = {"shapes": {}}
    for shape in SHAPES:
        if shape.letter in letters:
            result["shapes"][shape.letter] = run_shape(shape, module, only, steady)
    if "e" in letters:
        result["fleet"] = fleet(module)
    result["local_cost"] = local_check_cost()
    return result


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def millis(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def mark(met: bool) -> str:
    return "" if met else " ✗"


def overload_section(result) -> list[str]:
    if not result:
        return []
    names = {shape.letter: shape.name for shape in SHAPES}
    lines = [
        "## Load shedding",
        "",
        "Each service shape protected as its package's docs show, every option at its "
        "default, the default policy, nothing tuned to this bench "
        "([bench/overload.py](bench/overload.py)): open-loop Poisson arrivals, 10 s at half "
        "the shape's capacity, 30 s at three times it, 10 s at half; "
        f"{', '.join(f'{share:.0%} {name}' for name, share in MIX)} in `X-Priority`; a client "
        f"gives up after {TIMEOUT:.0f} s. Each service is first sent {WARMUP:.0f} s of requests "
        "by four clients in a closed loop, as a readiness probe warms it (a JVM's first seconds "
        "are its JIT's). Each request on a new connection, sent and timed "
        "from the instant it was due by [bench/loadgen](bench/loadgen/main.rs) (Rust: its "
        "own lag is not in what it measures). The same schedule with no protection, with the "
        "package's fixed limit (a rate limit at the measured capacity: the lower of two 3 s "
        "readings of eight clients in a closed loop, unprotected), with load shedding, "
        "and with the peers a shape names. Served: answered 200 in time, over what was "
        "offered during the overload; p99: the admitted requests' during the whole overload "
        "and after its first second, against before it; goodput: what was served during the "
        "overload over the capacity, and in brackets the most a refusal's measured cost "
        "allows (the service's CPU time per 503 while it refused everything: serving G of the "
        "capacity at 3× leaves (3 − G) × capacity refusals to pay for). A ✗ marks a missed "
        "aim (top class ≥ 95%, goodput ≥ 90% or within 3 points of its bound, p99 over the "
        "whole overload ≤ 2× unloaded, shedding starting within 1 s and stopping within 2 s, "
        "≤ 1% refused outside the overload and at a steady 0.8 of the capacity). The chart is "
        "[bench/overload.svg](bench/overload.svg).",
        "",
        "| Shape | Capacity | Mode | " + " | ".join(PRIORITIES)
        + " | p99 ms: overload / settled (unloaded) | Goodput (bound) | Starts / stops | Refused outside | Level / limit changes |",
        "|---|---:|---|" + "---:|" * (len(PRIORITIES) + 5),
    ]
    shapes = {one.letter: one for one in SHAPES}
    for letter, shape in result["shapes"].items():
        first = True
        for mode, name in shapes[letter].modes():
            if mode not in shape["runs"]:
                continue
            run = shape["runs"][mode]
            over = run["phases"]["overload"]
            cells = []
            for number, priority in enumerate(PRIORITIES):
                row = over[priority]
                share = row["served"] / row["offered"] if row["offered"] else 0.0
                miss = mode in AIMED and number == 0 and share < AIMS["top"]
                cells.append(f"{share:.0%}{mark(not miss)}")
            before = run["phases"]["before"]["p99"]
            ratio_ok = (over["p99"] or 0) <= AIMS["p99"] * (before or 0)
            p99 = (f"{millis(over['p99'])} / {millis(run['p99_settled'])} ({millis(before)})"
                   f"{mark(mode not in AIMED or ratio_ok)}")
            bound = shape.get("goodput_bound")
            goodput_ok = run["goodput"] >= AIMS["goodput"] or (
                bound is not None and run["goodput"] >= bound - 0.03)
            bound_cell = f" ({bound:.0%})" if bound is not None and mode in AIMED else ""
            goodput = f"{run['goodput']:.0%}{bound_cell}{mark(mode not in AIMED or goodput_ok)}"
            starts, stops = run["shedding_starts"], run["shedding_stops"]
            timing_ok = (starts is not None and starts <= AIMS["starts"]
                         and stops is not None and stops <= AIMS["stops"])
            timing = f"{seconds(starts)} / {seconds(stops)}{mark(mode not in AIMED or timing_ok)}"
            outside = f"{run['refused_outside']:.1%}{mark(mode not in AIMED or run['refused_outside'] <= AIMS['outside'])}"
            limit_changes = "unknown" if run["limit_changes"] is None else run["limit_changes"]
            changes = f"{run['level_changes']} / {limit_changes}" if mode in AIMED else "-"
            label = f"({letter}) {names[letter]}" if first else ""
            capacity_cell = f"{shape['capacity']:.0f}/s" if first else ""
            first = False
            lines.append(f"| {label} | {capacity_cell} | {name} | " + " | ".join(cells)
                         + f" | {p99} | {goodput} | {timing} | {outside} | {changes} |")
    lines += ["", "At a steady 0.8 of the capacity, with load shedding and its defaults (and a "
              "shape's peer), refused:", ""]
    lines += ["| Shape | Mode | Requests | Refused |", "|---|---|---:|---:|"]
    for letter, shape in result["shapes"].items():
        modes = dict(shapes[letter].modes())
        for mode, steady_run in shape.get("steady", {}).items():
            ok = mode not in AIMED or steady_run["refused"] <= AIMS["outside"]
            lines.append(f"| ({letter}) | {modes[mode]} | {steady_run['requests']:,} | "
                         f"{steady_run['refused']:.2%}{mark(ok)} |")
    fleet_result = result.get("fleet")
    if fleet_result:
        served = fleet_result["served"]
        cells = ", ".join(f"{name} {s / max(1, n):.0%}" for name, (s, n) in served.items())
        lines += [
            "",
            f"(e) The fleet: two instances of (a) ({FLEET_RATE:.0f} requests a second each, "
            f"the same mix, 1 ms of CPU a request) call one backend, whose latency goes from "
            f"{FLEET_PHASES[0][1] * 1000:.0f} ms to {FLEET_PHASES[1][1] * 1000:.0f} ms for "
            f"{FLEET_PHASES[1][0]} s and back; nothing declared, the defaults. While the "
            f"backend is slow, served: {cells}; the admitted p99 "
            f"{millis(fleet_result['p99_slow'])} ms against {millis(fleet_result['p99_fast'])} "
            f"ms before; shedding began {seconds(fleet_result['shedding_starts'])} after the "
            f"backend slowed and ended {seconds(fleet_result['shedding_stops'])} after it "
            f"recovered; refused outside: {fleet_result['refused_outside']:.1%}; limit changes "
            f"per instance: {', '.join(str(s.get('changes', 'unknown')) for s in fleet_result['stats'])}.",
        ]
    costs = result.get("local_cost") or {}
    if costs:
        lines += ["", "What the local check costs a request (its limit's admit and finish, "
                  "in-process, no server call): "
                  + ", ".join(f"{name} {ns:.0f} ns" for name, ns in costs.items()) + "."]
    lines.append("")
    return lines


def overload_svg(result) -> str:
    """Per shape (rows) and mode (columns), goodput per second by priority."""
    shapes = list(result["shapes"].items())
    panel_w, panel_h, gap, left, top = 260, 110, 30, 60, 30
    width = left + len(MODES) * (panel_w + gap)
    height = top + len(shapes) * (panel_h + gap) + 30
    colours = dict(zip(PRIORITIES, ["#d62728", "#ff7f0e", "#1f77b4", "#7f7f7f"]))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">']
    for row, (letter, shape) in enumerate(shapes):
        y0 = top + row * (panel_h + gap)
        peak = max(max(series) for run in shape["runs"].values()
                   for series in run["goodput_series"].values()) or 1
        for column, (mode, name) in enumerate(MODES):
            if mode not in shape["runs"]:
                continue
            run, x0 = shape["runs"][mode], left + column * (panel_w + gap)
            seconds_total = len(run["goodput_series"][PRIORITIES[0]])

            def x(second: float) -> float:
                return x0 + second / seconds_total * panel_w

            parts.append(f'<rect x="{x0}" y="{y0}" width="{panel_w}" height="{panel_h}" '
                         'fill="none" stroke="#ccc"/>')
            parts.append(f'<rect x="{x(OVERLOAD_STARTS):.1f}" y="{y0}" '
                         f'width="{x(OVERLOAD_ENDS) - x(OVERLOAD_STARTS):.1f}" '
                         f'height="{panel_h}" fill="#f4f4f4"/>')
            parts.append(f'<text x="{x0}" y="{y0 - 6}">({letter}) {name}</text>')
            for priority in PRIORITIES:
                points = " ".join(
                    f"{x(s + 0.5):.1f},{y0 + panel_h - v / peak * panel_h:.1f}"
                    for s, v in enumerate(run["goodput_series"][priority]))
                parts.append(f'<polyline fill="none" stroke="{colours[priority]}" '
                             f'stroke-width="1.5" points="{points}"/>')
    legend_y = height - 8
    for index, priority in enumerate(PRIORITIES):
        parts.append(f'<text x="{left + index * 130}" y="{legend_y}" '
                     f'fill="{colours[priority]}">{priority}</text>')
    parts.append(f'<text x="{left + 4 * 130}" y="{legend_y}">served per second; grey: the '
                 'overload</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)


CLOSED_SECONDS = 8.0
CLOSED_CLIENTS = (1, 2, 4, 8)


def closed_loop(module: Path, letters: str) -> list[str]:
    """What load shedding at its defaults refuses of a closed loop of `sheddable` requests, by
    1, 2, 4 and 8 clients, in each shape of `letters`: a table."""
    lines = ["| Shape | " + " | ".join(f"{n} client{'s' * (n > 1)}: refused of sent"
                                       for n in CLOSED_CLIENTS) + " |",
             "|---|" + "---:|" * len(CLOSED_CLIENTS)]
    redis = Redis(module)
    try:
        for shape in SHAPES:
            if shape.letter not in letters:
                continue
            cells = []
            for clients in CLOSED_CLIENTS:
                call(redis.port, "FLUSHALL")
                # The capacity argument sets only the fixed limit's rate, unused in "shed".
                service = shape.start(redis.port, "shed", 200.0)
                try:
                    counts = asyncio.run(
                        closed_run(service.port, clients, "sheddable", CLOSED_SECONDS))
                finally:
                    service.stop()
                sent, shed = counts
                cells.append(f"{shed:,} of {sent:,}")
                print(f"  ({shape.letter}) {clients} clients: {shed} refused of {sent}",
                      file=sys.stderr, flush=True)
            lines.append(f"| ({shape.letter}) | " + " | ".join(cells) + " |")
    finally:
        redis.stop()
    return lines


if __name__ == "__main__":
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        # Any other word is the module's path: a stray --help would start a whole run.
        print(__doc__)
        sys.exit(0)
    arguments = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    letters = "abcdefgh"
    if "--shapes" in sys.argv:
        letters = sys.argv[sys.argv.index("--shapes") + 1]
        arguments = [arg for arg in arguments if arg != letters]
    only = None
    if "--modes" in sys.argv:
        named = sys.argv[sys.argv.index("--modes") + 1]
        arguments = [arg for arg in arguments if arg != named]
        only = set(named.split(","))
    module = Path(arguments[0] if arguments else ROOT / "target/release/libredis_ratelimit.so")
    if "--closed-loop" in sys.argv:
        print("\n".join(closed_loop(module.resolve(), letters)))
        sys.exit(0)
    measured = measure_overload(module.resolve(), letters, only, "--no-steady" not in sys.argv)
    if "--json" in sys.argv:
        print(json.dumps(measured))
    elif measured:
        print("\n".join(overload_section(measured)))
