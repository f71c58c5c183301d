"""Graded limiting by load under overload (docs/load.md): the example HTTP service
(examples/http/server.py, one Python process whose requests each cost CPU_MS of CPU: a
service of bounded capacity) under open-loop arrivals, Poisson, 10 s at half its capacity,
30 s at three times it, 10 s at half again, with a priority mix in the X-Priority header;
compared in one run with no protection, a fixed rate limit at the nominal capacity, and graded
limiting by load (the service reports its CPU once a second and sheds by the level's shares).
A client gives up after TIMEOUT seconds: a late answer is not goodput.

Then the fleet run: two instances of the service share one backend that struggles for 20 s
(its latency 60 times what it was); each reports the backend's mean latency as a factor, and
both shed, then admit again when it recovers.

Only the standard library; the services run in the clients' virtualenv (they need the
package and redis-py). Run by bench/run.py (make bench), or alone:

    python3 bench/overload.py [path/to/libredis_ratelimit.so] [--json]
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / "target/clients-venv/bin/python"

CPU_MS = 10.0
TIMEOUT = 2.0
# (seconds, offered load as a multiple of the nominal capacity)
PHASES = ((10, 0.5), (30, 3.0), (10, 0.5))
OVERLOAD_STARTS, OVERLOAD_ENDS = 10.0, 40.0
# The overload's first seconds queue what arrived before the level rose; from then on, the
# level's own latency.
SETTLED_AFTER = 10.0
# The mix: 10% critical, 30% split between critical_plus and sheddable_plus, 60%
# sheddable; most important first.
MIX = (("critical_plus", 0.15), ("critical", 0.10), ("sheddable_plus", 0.15),
       ("sheddable", 0.60))
PRIORITIES = tuple(name for name, _ in MIX)
# The graded run's policy: levels on the service's CPU (the process over one core), each
# entered at its threshold and left 20% below it (the shedding lowers the CPU it reads).
POLICY = ["HYSTERESIS", "0.2", "HOLD", "1000",
          "LEVEL", "cpu", "0.75", "SHARES", "1", "1", "1", "0.5",
          "LEVEL", "cpu", "0.8", "SHARES", "1", "1", "0.5", "0",
          "LEVEL", "cpu", "0.85", "SHARES", "1", "1", "0", "0"]
MODES = (("none", "no protection"), ("fixed", "a fixed rate limit"),
         ("graded", "graded limiting by load"))

# The fleet run: two instances, a backend whose latency goes from FAST to SLOW and back.
FLEET_RATE = 25.0  # requests a second to each instance
FLEET_PHASES = ((10, 0.005), (20, 0.300), (10, 0.005))  # (seconds, backend latency)
FLEET_SLOW_STARTS, FLEET_SLOW_ENDS = 10.0, 30.0
FLEET_POLICY = ["HOLD", "0", "FACTOR", "backend_ms", "MAX",
                "LEVEL", "backend_ms", "50", "SHARES", "1", "1", "0", "0"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(port: int, *args) -> bytes:
    """One command on a new connection; the raw reply (enough to set a policy)."""
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


class Redis:
    """A redis-server with the module on a free port."""

    def __init__(self, module: Path):
        self.port, self.dir = free_port(), tempfile.mkdtemp(prefix="ratelimit-bench-load-")
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--loadmodule", str(module)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, "redis-server")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Service:
    """examples/http/server.py on a free port with `args`; killed by `stop` (a service that
    was overloaded may have thousands of requests still queued)."""

    def __init__(self, redis_port: int, args: list[str]):
        self.port = free_port()
        self.process = subprocess.Popen(
            [str(PYTHON), str(ROOT / "examples/http/server.py"), "--port", str(self.port),
             "--redis-url", f"redis://127.0.0.1:{redis_port}", "--quiet", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, "the HTTP service")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


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
            pick, total = draw.random(), 0.0
            for name, share in MIX:
                total += share
                if pick < total:
                    break
            schedule.append((at, name))
        start += seconds
    return schedule


async def offer(ports: list[int], schedule) -> list[tuple[float, str, int, float, int]]:
    """Sends the schedule open loop (each request at its time, whatever the others do),
    spread over `ports` in turn: (at, priority, status, latency, port's index) each."""
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


def capacity(redis_port: int) -> float:
    """The service's requests a second at saturation: four clients in a closed loop, 3 s."""
    service = Service(redis_port, ["--policy", "none", "--cpu-ms", str(CPU_MS)])
    try:
        async def run() -> int:
            done, end = 0, time.perf_counter() + 3.0

            async def client() -> None:
                nonlocal done
                while time.perf_counter() < end:
                    status, _ = await request(service.port, "critical")
                    done += status == 200

            await asyncio.gather(*(client() for _ in range(4)))
            return done

        asyncio.run(run())  # warm up
        return asyncio.run(run()) / 3.0
    finally:
        service.stop()


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def summarise(records, seconds: int) -> dict:
    """Per phase and priority: offered, goodput (answered 200 in time) and the admitted
    requests' p50 and p99; per second and priority, goodput and the admitted p99; when
    shedding started and stopped."""
    bounds = {"before": (0.0, OVERLOAD_STARTS), "overload": (OVERLOAD_STARTS, OVERLOAD_ENDS),
              "settled": (OVERLOAD_STARTS + SETTLED_AFTER, OVERLOAD_ENDS),
              "after": (OVERLOAD_ENDS, float(seconds))}
    phases = {}
    for phase, (low, high) in bounds.items():
        rows = {}
        for priority in PRIORITIES:
            mine = [r for r in records if r[1] == priority and low <= r[0] < high]
            good = [r[3] for r in mine if r[2] == 200]
            rows[priority] = {
                "offered": len(mine), "good": len(good),
                "shed": sum(r[2] == 503 for r in mine),
                "limited": sum(r[2] == 429 for r in mine),
                "failed": sum(r[2] not in (200, 429, 503) for r in mine),
                "p50": percentile(good, 0.50), "p99": percentile(good, 0.99)}
        admitted = [r[3] for r in records if low <= r[0] < high and r[2] == 200]
        rows["all"] = {"p50": percentile(admitted, 0.5), "p99": percentile(admitted, 0.99)}
        phases[phase] = rows
    series = {priority: [0] * seconds for priority in PRIORITIES}
    p99 = []
    for second in range(seconds):
        within = [r for r in records if second <= r[0] < second + 1]
        for r in within:
            if r[2] == 200:
                series[r[1]][second] += 1
        p99.append(percentile([r[3] for r in within if r[2] == 200], 0.99))
    shed = [r[0] for r in records if r[2] == 503]
    started = [at for at in shed if at >= OVERLOAD_STARTS]
    after = [at for at in shed if at >= OVERLOAD_ENDS]
    return {
        "phases": phases, "goodput": series, "p99": p99,
        "shedding_starts": (min(started) - OVERLOAD_STARTS) if started else None,
        "shedding_stops": (max(after) - OVERLOAD_ENDS) if after else 0.0 if started else None,
    }


def overload(module: Path) -> dict:
    redis = Redis(module)
    try:
        nominal = capacity(redis.port)
        print(f"  capacity: {nominal:.0f} requests a second", file=sys.stderr, flush=True)
        seconds = sum(length for length, _ in PHASES)
        schedule = arrivals(PHASES, lambda x: x * nominal, seed=45)
        runs = {}
        for mode, _ in MODES:
            call(redis.port, "FLUSHALL")
            args = ["--cpu-ms", str(CPU_MS)]
            if mode == "none":
                args += ["--policy", "none"]
            elif mode == "fixed":
                # One key for every caller (one address): the service's whole rate.
                rate = round(nominal)
                args += ["--policy", f"capacity=THROTTLE:{max(1, rate // 10)}:{rate}:1"]
            else:
                key = "load:bench"
                call(redis.port, "RL.LOAD.POLICY", key, *POLICY)
                args += ["--policy", "none", "--load-service", key]
            service = Service(redis.port, args)
            try:
                records = asyncio.run(offer([service.port], schedule))
            finally:
                service.stop()
            runs[mode] = summarise(records, seconds)
            print(f"  {mode}: done", file=sys.stderr, flush=True)
        return {"capacity": nominal, "requests": len(schedule), "runs": runs}
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
    redis, backend = Redis(module), Backend()
    services = []
    try:
        key = "load:fleet"
        call(redis.port, "RL.LOAD.POLICY", key, *FLEET_POLICY)
        url = f"http://127.0.0.1:{backend.port}/"
        services = [Service(redis.port, ["--policy", "none", "--load-service", key,
                                         "--backend", url, "--cpu-ms", "1"])
                    for _ in range(2)]
        seconds = sum(length for length, _ in FLEET_PHASES)
        # The same rate all along: the backend, not the load, changes.
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
        instances = []
        for index in range(len(services)):
            mine = [r for r in records if r[4] == index]
            shed = [r[0] for r in mine if r[2] == 503]
            started = [at for at in shed if at >= FLEET_SLOW_STARTS]
            after = [at for at in shed if at >= FLEET_SLOW_ENDS]
            instances.append({
                "requests": len(mine), "shed": len(shed),
                "shed_before": sum(at < FLEET_SLOW_STARTS for at in shed),
                "critical_shed": sum(r[2] == 503 and r[1] in ("critical", "critical_plus")
                                     for r in mine),
                "shedding_starts": (min(started) - FLEET_SLOW_STARTS) if started else None,
                "shedding_stops": (max(after) - FLEET_SLOW_ENDS) if after else 0.0,
            })
        return {"instances": instances}
    finally:
        for service in services:
            service.stop()
        backend.stop()
        redis.stop()


def measure_overload(module: Path) -> dict | None:
    if not PYTHON.exists():
        print("  skipped: no target/clients-venv (make clients-deps makes it)")
        return None
    result = overload(module)
    result["fleet"] = fleet(module)
    return result


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def millis(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def overload_section(result) -> list[str]:
    if not result:
        return []
    capacity_rps = result["capacity"]
    lines = [
        "## Load shedding",
        "",
        f"The example HTTP service ([examples/http/server.py](examples/http/server.py), one "
        f"Python process, each request costing {CPU_MS:.0f} ms of CPU: {capacity_rps:.0f} "
        f"requests a second at saturation) under open-loop Poisson arrivals: 10 s at half its "
        f"capacity, 30 s at three times it, 10 s at half; {result['requests']:,} requests, the "
        f"same schedule in every mode, {', '.join(f'{share:.0%} {name}' for name, share in MIX)}"
        f" in X-Priority. A client gives up after {TIMEOUT:.0f} s: goodput is what was answered "
        f"200 in time. The fixed limit is GCRA at the nominal capacity; graded limiting sheds by "
        f"the service's CPU, reported once a second (levels at 0.75, 0.8 and 0.85, each left "
        f"20% below it: half the sheddable, then all of it and half the sheddable_plus, then "
        f"only the critical classes). The chart is [bench/overload.svg](bench/overload.svg) "
        f"([bench/overload.py](bench/overload.py)).",
        "",
        "During the overload, per priority: goodput over the offered requests, and the admitted "
        "requests' p50 / p99 in ms (before it, at half the capacity, the admitted p99 was the "
        "unloaded one in the last column):",
        "",
        "| Mode | " + " | ".join(PRIORITIES) + " | Unloaded p99 |",
        "|---|" + "---:|" * (len(PRIORITIES) + 1),
    ]
    for mode, name in MODES:
        run = result["runs"][mode]
        cells = []
        for priority in PRIORITIES:
            row = run["phases"]["overload"][priority]
            share = row["good"] / row["offered"] if row["offered"] else 0.0
            cells.append(f"{share:.0%}, {millis(row['p50'])} / {millis(row['p99'])}")
        before = run["phases"]["before"]["all"]["p99"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {millis(before)} |")
    graded = result["runs"]["graded"]
    overload_p99 = graded["phases"]["overload"]["all"]["p99"]
    settled_p99 = graded["phases"]["settled"]["all"]["p99"]
    unloaded_p99 = graded["phases"]["before"]["all"]["p99"]
    critical = [graded["phases"]["overload"][p] for p in ("critical_plus", "critical")]
    critical_share = sum(r["good"] for r in critical) / max(1, sum(r["offered"] for r in critical))
    lines += [
        "",
        f"Graded limiting: shedding began {seconds(graded['shedding_starts'])} after the "
        f"overload began and ended {seconds(graded['shedding_stops'])} after it ended (the "
        f"aim: within two report intervals, 2 s, each way); the critical classes kept "
        f"{critical_share:.0%} of their goodput (the aim: 95%); the admitted p99 over the "
        f"whole overload was {millis(overload_p99)} ms against {millis(unloaded_p99)} ms "
        f"unloaded (the aim: at most twice), and {millis(settled_p99)} ms from "
        f"{SETTLED_AFTER:.0f} s into it: what arrived in the second or two before the level "
        f"rose queues at three times the capacity, and drains only as fast as the level's "
        f"headroom allows (the critical classes alone are "
        f"{sum(share for name, share in MIX[:2]) * 3:.0%} of the capacity at three times it).",
        "",
    ]
    fleet_result = result.get("fleet")
    if fleet_result:
        lines += [
            f"The fleet run: two instances of the service ({FLEET_RATE:.0f} requests a second "
            f"each, the same mix) call one backend, whose latency goes from "
            f"{FLEET_PHASES[0][1] * 1000:.0f} ms to {FLEET_PHASES[1][1] * 1000:.0f} ms for "
            f"{FLEET_PHASES[1][0]} s and back; each reports the backend's mean latency as "
            f"`backend_ms`, and a level at 50 ms sheds the sheddable classes:",
            "",
            "| Instance | Requests | Shed | Shed before | Critical shed | Shedding began after "
            "| Ended after recovery |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for index, row in enumerate(fleet_result["instances"]):
            lines.append(f"| {index + 1} | {row['requests']} | {row['shed']} | "
                         f"{row['shed_before']} | {row['critical_shed']} | "
                         f"{seconds(row['shedding_starts'])} | {seconds(row['shedding_stops'])} |")
        lines += [
            "",
            "The level is the worst instance's (`MAX`), and each instance learns it from its own "
            "report: after the recovery, the calls in flight still finish slow, and the other "
            "instance's last report counts until it reports again, so admitting again takes "
            "up to about two intervals after the backend's calls are fast again.",
            "",
        ]
    return lines


def overload_svg(result) -> str:
    """Per mode, goodput per second by priority (top) and the admitted p99 (bottom)."""
    panel_w, panel_h, gap, left, top = 300, 150, 40, 50, 30
    seconds_total = len(result["runs"]["none"]["p99"])
    width = left + len(MODES) * (panel_w + gap)
    height = top + 2 * (panel_h + gap) + 30
    colours = dict(zip(PRIORITIES, ["#d62728", "#ff7f0e", "#1f77b4", "#7f7f7f"]))
    peak = max(max(series) for run in result["runs"].values() for series in run["goodput"].values())
    slowest = max((v for run in result["runs"].values() for v in run["p99"] if v), default=1.0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">']

    def x(origin: float, second: float) -> float:
        return origin + second / seconds_total * panel_w

    for column, (mode, name) in enumerate(MODES):
        run, origin = result["runs"][mode], left + column * (panel_w + gap)
        for row, label in enumerate(("goodput, requests/s", "admitted p99, ms (log)")):
            y0 = top + row * (panel_h + gap)
            parts.append(f'<rect x="{origin}" y="{y0}" width="{panel_w}" height="{panel_h}" '
                         'fill="none" stroke="#ccc"/>')
            shade = (f'<rect x="{x(origin, OVERLOAD_STARTS):.1f}" y="{y0}" '
                     f'width="{x(origin, OVERLOAD_ENDS) - x(origin, OVERLOAD_STARTS):.1f}" '
                     f'height="{panel_h}" fill="#f4f4f4"/>')
            parts.append(shade)
            parts.append(f'<text x="{origin}" y="{y0 - 6}">{name}: {label}</text>')
        for priority in PRIORITIES:
            points = " ".join(
                f"{x(origin, s + 0.5):.1f},{top + panel_h - v / peak * panel_h:.1f}"
                for s, v in enumerate(run["goodput"][priority]))
            parts.append(f'<polyline fill="none" stroke="{colours[priority]}" stroke-width="1.5" '
                         f'points="{points}"/>')
        y0 = top + panel_h + gap
        low, high = math.log10(0.005), math.log10(max(slowest, 0.01))
        points = " ".join(
            f"{x(origin, s + 0.5):.1f},"
            f"{y0 + panel_h - (math.log10(max(v, 0.005)) - low) / (high - low) * panel_h:.1f}"
            for s, v in enumerate(run["p99"]) if v)
        parts.append(f'<polyline fill="none" stroke="#000" stroke-width="1.5" points="{points}"/>')
        parts.append(f'<text x="{origin}" y="{y0 + panel_h + 14}">0 s</text>')
        parts.append(f'<text x="{origin + panel_w}" y="{y0 + panel_h + 14}" '
                     f'text-anchor="end">{seconds_total} s</text>')
    legend_y = height - 8
    for index, priority in enumerate(PRIORITIES):
        parts.append(f'<text x="{left + index * 130}" y="{legend_y}" '
                     f'fill="{colours[priority]}">{priority}</text>')
    parts.append(f'<text x="{left + 4 * 130}" y="{legend_y}">grey band: the overload; '
                 f'peak {peak}/s, p99 up to {slowest * 1000:.0f} ms</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)


if __name__ == "__main__":
    arguments = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    module = Path(arguments[0] if arguments else ROOT / "target/release/libredis_ratelimit.so")
    measured = measure_overload(module.resolve())
    if "--json" in sys.argv:
        print(json.dumps(measured))
    elif measured:
        print("\n".join(overload_section(measured)))
