#!/usr/bin/env python3
"""`make bench`: the module against Redis' own floor (INCR, SET ... PX) and against the Lua
scripts it replaces, in one run, on a server this script starts.

For each workload (redis-benchmark, pipeline 16, 50 clients, 100,000 random keys unless
said), per request: the server's own CPU time (INFO cpu, so the client's cost is left out),
throughput, p50 and p99 latency, and, when valgrind is installed, the server's instructions
counted by callgrind (repeatable on a noisy shared machine: the ratios are judged on them).
Then memory: bytes per limiter key (used_memory growth over 100,000 keys with 8-character
names) and bytes per logged request (10,000 entries in one key).

Writes BENCHMARKS.md and bench/chart.svg. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "target/release/libredis_ratelimit.so"

# The scripts the module replaces, as they are commonly written.

# GCRA as go-redis/redis_rate does it: Redis TIME, float seconds, the TAT as a float string.
LUA_GCRA = """
redis.replicate_commands()
local key = KEYS[1]
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst
local time = redis.call("TIME")
local now = (time[1] - 1483228800) + (time[2] / 1000000)
local tat = redis.call("GET", key)
if not tat then tat = now else tat = tonumber(tat) end
tat = math.max(tat, now)
local new_tat = tat + increment
local diff = now - (new_tat - burst_offset)
local remaining = diff / emission_interval
if remaining < 0 then
  return {0, 0, tostring(-diff), tostring(tat - now)}
end
local reset_after = new_tat - now
if reset_after > 0 then
  redis.call("SET", key, new_tat, "EX", math.ceil(reset_after))
end
return {cost, math.floor(remaining), "-1", tostring(reset_after)}
"""

# The fixed window: INCRBY, and EXPIRE when the window's first request created the key.
LUA_FIXED_WINDOW = """
local limit = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local count = redis.call("INCRBY", KEYS[1], cost)
if count == cost then
  redis.call("EXPIRE", KEYS[1], ARGV[3])
end
if count > limit then return {1, limit, 0} end
return {0, limit, limit - count}
"""

# The sliding log in a sorted set: drop what left the window, count, add, expire.
LUA_SORTED_SET_LOG = """
local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2])
local time = redis.call("TIME")
local now = time[1] * 1000000 + time[2]
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now - window_us)
local count = redis.call("ZCARD", KEYS[1])
if count >= limit then return {1, limit, 0} end
redis.call("ZADD", KEYS[1], now, now .. "-" .. ARGV[3])
redis.call("PEXPIRE", KEYS[1], math.ceil(window_us / 1000))
return {0, limit, limit - count - 1}
"""

SCRIPTS = {
    "gcra": LUA_GCRA,
    "fixed": LUA_FIXED_WINDOW,
    "zlog": LUA_SORTED_SET_LOG,
}


@dataclass
class Workload:
    """One benchmarked command line."""

    name: str
    group: str  # "redis", "module" or "lua"
    command: list[str]  # "{gcra}" and the like stand for a script's SHA
    random_keys: bool = True
    # Requests sent before measuring, so that a hot key's log is long already.
    warm_up: int = 0
    target: str = ""  # what the issue sets for it, as a ratio to SET ... PX
    results: dict = field(default_factory=dict)


WORKLOADS = [
    Workload("INCR", "redis", ["INCR", "incr:__rand_int__"]),
    Workload("SET ... PX", "redis", ["SET", "set:__rand_int__", "1700000000000000000", "PX", "60000"]),
    Workload("CL.THROTTLE", "module", ["CL.THROTTLE", "gcra:__rand_int__", "15", "30", "60"], target="1.5"),
    Workload("RL.WINDOW FIXED", "module", ["RL.WINDOW", "fixed:__rand_int__", "100", "60", "FIXED"], target="1.5"),
    Workload("RL.WINDOW SLIDING", "module", ["RL.WINDOW", "sliding:__rand_int__", "100", "60"], target="1.5"),
    Workload("RL.WINDOW BUCKETS 10", "module",
             ["RL.WINDOW", "buckets:__rand_int__", "100", "60", "BUCKETS", "10"], target="1.5"),
    Workload("RL.LOG", "module", ["RL.LOG", "log:__rand_int__", "100", "60"], target="1.7"),
    Workload("RL.LOG hot key, limit 100,000", "module", ["RL.LOG", "hot", "100000", "60"],
             random_keys=False, warm_up=50_000, target="1.7"),
    Workload("RL.LOG saturated, limit 100 per 1 s", "module", ["RL.LOG", "saturated", "100", "1"],
             random_keys=False, warm_up=10_000, target="1.7"),
    Workload("Lua GCRA (redis_rate)", "lua",
             ["EVALSHA", "{gcra}", "1", "luagcra:__rand_int__", "15", "30", "60", "1"]),
    Workload("Lua fixed window", "lua",
             ["EVALSHA", "{fixed}", "1", "luafixed:__rand_int__", "100", "1", "60"]),
    Workload("Lua sorted-set log", "lua",
             ["EVALSHA", "{zlog}", "1", "luazlog:__rand_int__", "100", "60000000", "__rand_int__"]),
]


class Resp:
    """A minimal Redis client: pipelined commands, RESP2 replies."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buffer = b""

    def call(self, *args):
        return self.pipeline([args])[0]

    def pipeline(self, commands) -> list:
        out = bytearray()
        for args in commands:
            out += b"*%d\r\n" % len(args)
            for arg in args:
                arg = arg if isinstance(arg, bytes) else str(arg).encode()
                out += b"$%d\r\n%s\r\n" % (len(arg), arg)
        self.sock.sendall(out)
        return [self._reply() for _ in commands]

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            length = int(rest)
            if length < 0:
                return None
            while len(self.buffer) < length + 2:
                self.buffer += self.sock.recv(1 << 16)
            data, self.buffer = self.buffer[:length], self.buffer[length + 2:]
            return data
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise ValueError(f"unexpected reply {line!r}")

    def info(self, section: str) -> dict[str, str]:
        text = self.call("INFO", section).decode()
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A redis-server with the module, on a free port, in a temporary directory."""

    def __init__(self, wrapper: list[str] | None = None, extra: list[str] | None = None):
        self.dir = tempfile.mkdtemp(prefix="ratelimit-bench-")
        self.port = free_port()
        command = (wrapper or []) + [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", self.dir,
            "--logfile", os.path.join(self.dir, "server.log"),
            "--loadmodule", str(MODULE),
        ] + (extra or [])
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        cwd=self.dir)
        deadline = time.time() + 120
        while True:
            try:
                self.client = Resp(self.port)
                if self.client.call("PING") == "PONG":
                    break
            except OSError:
                pass
            if time.time() > deadline or self.process.poll() is not None:
                raise SystemExit(f"redis-server did not start; see {self.dir}/server.log")
            time.sleep(0.2)
        self.shas = {name: self.client.call("SCRIPT", "LOAD", body).decode()
                     for name, body in SCRIPTS.items()}

    def command(self, workload: Workload) -> list[str]:
        return [re.sub(r"\{(\w+)\}", lambda m: self.shas[m.group(1)], arg) for arg in workload.command]

    def benchmark(self, workload: Workload, requests: int) -> dict[str, float]:
        args = ["redis-benchmark", "-p", str(self.port), "-n", str(requests), "-c", "50",
                "-P", "16", "--csv"]
        if workload.random_keys:
            args += ["-r", "100000"]
        output = subprocess.run(args + self.command(workload), check=True, capture_output=True,
                                text=True).stdout
        row = output.strip().splitlines()[-1].replace('"', "").split(",")
        return {"rps": float(row[-7]), "p50": float(row[-4]), "p99": float(row[-2])}

    def warm_up(self, workload: Workload) -> None:
        if workload.warm_up:
            self.benchmark(workload, workload.warm_up)

    def cpu_seconds(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def stop(self) -> None:
        try:
            self.client.call("SHUTDOWN", "NOSAVE")
        except OSError:
            pass
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def measure_speed(requests: int) -> None:
    server = Server()
    try:
        for workload in WORKLOADS:
            server.client.call("FLUSHALL")
            server.warm_up(workload)
            before = server.cpu_seconds()
            result = server.benchmark(workload, requests)
            result["cpu_us"] = (server.cpu_seconds() - before) * 1e6 / requests
            workload.results.update(result)
            print(f"  {workload.name}: {result['rps']:.0f} requests/s, "
                  f"{result['cpu_us']:.2f} µs of server CPU each", flush=True)
    finally:
        server.stop()


def callgrind_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise ValueError(f"no total in {path}")


# With an AOF, every write builds its effect for it (SET's rewritten to PXAT, the
# module's SET ... PXAT or RL.LOG.REPLAY): measured on these too, for the full picture.
AOF_WORKLOADS = ["SET ... PX", "CL.THROTTLE", "RL.WINDOW SLIDING", "RL.LOG"]


def measure_instructions(requests: int) -> bool:
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("  valgrind is not installed: no instruction counts", flush=True)
        return False
    count_instructions(WORKLOADS, requests, "instructions", [])
    print("  with an AOF (appendfsync no):", flush=True)
    with_aof = [w for w in WORKLOADS if w.name in AOF_WORKLOADS]
    count_instructions(with_aof, requests, "instructions_aof",
                       ["--appendonly", "yes", "--appendfsync", "no"])
    return True


def count_instructions(workloads: list[Workload], requests: int, key: str, extra: list[str]) -> None:
    """Instructions per request of each workload, on a server under callgrind."""
    out_dir = Path(tempfile.mkdtemp(prefix="ratelimit-callgrind-"))
    server = Server(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.out"], extra)
    pid = str(server.process.pid)
    try:
        for workload in workloads:
            server.client.call("FLUSHALL")
            server.warm_up(workload)
            subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
            server.benchmark(workload, requests)
            before = set(out_dir.iterdir())
            subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
            deadline = time.time() + 60
            while not (new := set(out_dir.iterdir()) - before) and time.time() < deadline:
                time.sleep(0.1)
            dump = max(new, key=lambda path: path.stat().st_mtime)
            workload.results[key] = callgrind_total(dump) / requests
            print(f"  {workload.name}: {workload.results[key]:.0f} instructions", flush=True)
    finally:
        server.stop()
        shutil.rmtree(out_dir, ignore_errors=True)


def used_memory(client: Resp) -> int:
    return int(client.info("memory")["used_memory"])


def bytes_per_key(client: Resp, make, keys: int = 100_000) -> float:
    """used_memory growth per key over `keys` keys named with 8 characters."""
    commands = [make(f"{i:08d}") for i in range(keys)]
    # The same pipeline once on keys then deleted: the server's buffers for it grow first.
    for batch in range(0, keys, 10_000):
        client.pipeline(commands[batch:batch + 10_000])
    client.call("FLUSHALL")
    before = used_memory(client)
    for batch in range(0, keys, 10_000):
        client.pipeline(commands[batch:batch + 10_000])
    grown = (used_memory(client) - before) / keys
    client.call("FLUSHALL")
    return grown


def measure_memory() -> dict[str, float]:
    server = Server()
    client = server.client
    try:
        sha = server.shas
        memory = {
            "SET ... PX (an integer)": bytes_per_key(client, lambda k: ["SET", k, "1700000000000000000", "PX", "60000"]),
            "CL.THROTTLE": bytes_per_key(client, lambda k: ["CL.THROTTLE", k, "15", "30", "60"]),
            "RL.WINDOW FIXED": bytes_per_key(client, lambda k: ["RL.WINDOW", k, "100", "60", "FIXED"]),
            "RL.WINDOW SLIDING": bytes_per_key(client, lambda k: ["RL.WINDOW", k, "100", "60"]),
            "RL.WINDOW BUCKETS 10": bytes_per_key(client, lambda k: ["RL.WINDOW", k, "100", "60", "BUCKETS", "10"]),
            "Lua GCRA (a float string)": bytes_per_key(
                client, lambda k: ["EVALSHA", sha["gcra"], "1", k, "15", "30", "60", "1"]),
        }
        per_entry = {}
        for name, key, command in [
            ("RL.LOG", "log", lambda i: ["RL.LOG", "log", "10000", "3600"]),
            ("Lua sorted-set log", "zlog",
             lambda i: ["EVALSHA", sha["zlog"], "1", "zlog", "10000", "3600000000", str(i)]),
        ]:
            commands = [command(i) for i in range(10_000)]
            # Pipelines of 1,000: their buffers grow once, on a key then deleted.
            for batch in range(0, 10_000, 1_000):
                client.pipeline(commands[batch:batch + 1_000])
            client.call("FLUSHALL")
            before = used_memory(client)
            for batch in range(0, 10_000, 1_000):
                client.pipeline(commands[batch:batch + 1_000])
            growth = (used_memory(client) - before) / 10_000
            usage = client.call("MEMORY", "USAGE", key, "SAMPLES", "0") / 10_000
            per_entry[name] = (growth, usage)
            client.call("FLUSHALL")
        return {"keys": memory, "entries": per_entry}
    finally:
        server.stop()


def versions() -> dict[str, str]:
    def run(*args):
        try:
            return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "machine": f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "redis": run("redis-server", "--version"),
        "valgrind": run("valgrind", "--version"),
        "rustc": run("rustc", "--version"),
        "module": run("git", "-C", str(ROOT), "describe", "--always", "--dirty"),
    }


def ratio(workload: Workload, floor: Workload, key: str) -> str:
    value, base = workload.results.get(key), floor.results.get(key)
    return f"{value / base:.2f}x" if value and base else "n/a"


def chart_svg(with_instructions: bool) -> str:
    """Bars of instructions (or CPU time) per request, SET ... PX marked."""
    key = "instructions" if with_instructions else "cpu_us"
    unit = "instructions per request (callgrind)" if with_instructions else "µs of server CPU per request"
    values = [(w.name, w.group, w.results.get(key, 0)) for w in WORKLOADS]
    top = max(v for _, _, v in values) * 1.1
    floor = next(w for w in WORKLOADS if w.name == "SET ... PX").results.get(key, 0)
    width, row, left = 860, 26, 270
    height = 50 + row * len(values) + 30
    scale = (width - left - 90) / top
    colors = {"redis": "#8c8c8c", "module": "#c0392b", "lua": "#2e86c1"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="13">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="22" font-size="15">{unit}: shorter is better</text>']
    # The reference lines first, under the bars; their labels at either end.
    for factor, dash, label_y, anchor, shift in [
        (1, "", height - 14, "end", -3),
        (1.5, ' stroke-dasharray="4,3"', height - 14, "start", 3),
    ]:
        x = left + floor * factor * scale
        parts.append(f'<line x1="{x:.1f}" y1="34" x2="{x:.1f}" y2="{height - 30}" stroke="#444"{dash}/>')
        parts.append(f'<text x="{x + shift:.1f}" y="{label_y}" font-size="11" text-anchor="{anchor}">'
                     f'{"SET ... PX" if factor == 1 else "1.5x SET ... PX"}</text>')
    for i, (name, group, value) in enumerate(values):
        y = 40 + i * row
        parts.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end">{name}</text>')
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{value * scale:.1f}" height="{row - 8}" '
                     f'fill="{colors[group]}"/>')
        label = f"{value:,.0f}" if with_instructions else f"{value:.2f}"
        label_x = max(left + value * scale, left + floor * 1.5 * scale) + 6
        parts.append(f'<text x="{label_x:.1f}" y="{y + 16}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_report(requests: int, callgrind_requests: int, memory, info, with_instructions: bool,
                 command: str) -> None:
    floor = next(w for w in WORKLOADS if w.name == "SET ... PX")
    lines = [
        "# Benchmarks",
        "",
        f"Produced by `{command}` ([bench/run.py](bench/run.py)); the chart is "
        "[bench/chart.svg](bench/chart.svg). Numbers from one run on this machine:",
        "",
        f"- Machine: {info['machine']}",
        f"- Server: {info['redis']}",
        f"- valgrind: {info['valgrind']}; {info['rustc']}; module at commit {info['module']}",
        f"- Load: redis-benchmark, pipeline 16, 50 clients, 100,000 random keys unless said; "
        f"{requests:,} requests per workload for time and latency, {callgrind_requests:,} under "
        "callgrind for instructions (counted over the whole server process, from zeroed counters "
        "to the dump after the last reply).",
        "",
        "Instructions are what the targets are judged on: they repeat from run to run on a "
        "shared machine, where times do not. CPU time is the server's own (INFO cpu), so the "
        "client's cost is left out.",
        "",
        "The server runs without AOF and replicas, where Redis propagates nothing; the module "
        "then skips building its effects as well (`SET ... PXAT`, `RL.LOG.REPLAY`: a quarter of "
        "a call's instructions) and only counts the change. With an AOF (or replicas) both Redis "
        "and the module build them: the AOF column measures that case on a second server.",
        "",
        "| Workload | Instructions / request | vs SET ... PX | Target | With an AOF: instructions, vs SET ... PX | Server CPU µs / request | Requests / s | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in WORKLOADS:
        r = w.results
        instructions = f"{r['instructions']:,.0f}" if "instructions" in r else "n/a"
        target = f"<= {w.target}x" if w.target else ""
        aof = (f"{r['instructions_aof']:,.0f}, {ratio(w, floor, 'instructions_aof')}"
               if "instructions_aof" in r else "")
        lines.append(
            f"| {w.name} | {instructions} | {ratio(w, floor, 'instructions')} | "
            f"{target} | {aof} | {r['cpu_us']:.2f} | {r['rps']:,.0f} | {r['p50']:.3f} | {r['p99']:.3f} |"
        )
    gcra = next(w for w in WORKLOADS if w.name == "Lua GCRA (redis_rate)")
    throttle = next(w for w in WORKLOADS if w.name == "CL.THROTTLE")
    zlog = next(w for w in WORKLOADS if w.name == "Lua sorted-set log")
    log = next(w for w in WORKLOADS if w.name == "RL.LOG")
    lines += [
        "",
        "Against the scripts (instructions per request; targets: at least 4x fewer than the Lua "
        "GCRA, 3x fewer than the sorted-set log):",
        "",
        f"- Lua GCRA / `CL.THROTTLE`: {ratio(gcra, throttle, 'instructions')}",
        f"- Lua sorted-set log / `RL.LOG`: {ratio(zlog, log, 'instructions')}",
        "",
        "Memory (used_memory growth; targets: at most 120 bytes per `CL.THROTTLE` or `RL.WINDOW` "
        "key, at most 16 per logged request):",
        "",
        "| Per key, 100,000 keys of 8-character names | Bytes |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {value:.1f} |" for name, value in memory["keys"].items()]
    lines += ["", "| Per logged request, 10,000 in one key | used_memory growth | MEMORY USAGE |",
              "|---|---:|---:|"]
    lines += [f"| {name} | {growth:.1f} | {usage:.1f} |"
              for name, (growth, usage) in memory["entries"].items()]
    lines.append("")
    (ROOT / "BENCHMARKS.md").write_text("\n".join(lines))
    (ROOT / "bench/chart.svg").write_text(chart_svg(with_instructions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500_000)
    parser.add_argument("--callgrind-requests", type=int, default=20_000)
    options = parser.parse_args()
    if not MODULE.is_file():
        sys.exit(f"{MODULE} is not built: run `make bench`")
    info = versions()
    print("Time and latency:", flush=True)
    measure_speed(options.requests)
    print("Instructions (callgrind):", flush=True)
    with_instructions = measure_instructions(options.callgrind_requests)
    print("Memory:", flush=True)
    memory = measure_memory()
    print(memory, flush=True)
    command = "make bench"
    if options.requests != 500_000 or options.callgrind_requests != 20_000:
        command = (f"python3 bench/run.py --requests {options.requests} "
                   f"--callgrind-requests {options.callgrind_requests}")
    write_report(options.requests, options.callgrind_requests, memory, info, with_instructions, command)
    print("Wrote BENCHMARKS.md and bench/chart.svg")


if __name__ == "__main__":
    main()
