#!/usr/bin/env python3
"""`make bench`: the module against Redis' own floor (INCR, SET ... PX) and against the Lua
scripts it replaces, in one run, on servers this script starts.

Every workload (redis-benchmark, pipeline 16, 50 clients, 100,000 random keys unless said)
runs in three setups: a master with a replica attached (the headline: production runs
replicas), a server alone, and a server with an AOF. In each, the server's instructions per
request are counted by callgrind (repeatable on a noisy shared machine: the ratios to
`SET ... PX` in the same setup are what the targets judge). Time, throughput and latency
are measured in the replica setup without valgrind. Then memory: bytes per key, per logged
request and per held lease, read from used_memory once INFO keyspace shows every key.
Beside them, DELAY against polling (bench/roundtrips.py), requests through nginx with
the Lua package (bench/nginx.py), quota leases (bench/quota.py), the Rust layer against
tower_governor (bench/layer.py), the Go module and the Java packages against what they replace
(bench/golang.py, bench/java.py) and load shedding under overload (bench/overload.py).

Every limit is chosen so that no key expires during a measurement.

Writes the report to target/bench/ (BENCHMARKS.md, chart.svg) and prints its tables;
`--write` (what `make bench-update` runs) writes the tracked BENCHMARKS.md and
bench/chart.svg instead. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from golang import go_section, measure_go
from java import java_section, measure_java
from layer import layer_section, measure_layer
from nginx import measure_nginx, nginx_section
from overload import measure_overload, overload_section, overload_svg
from quota_report import quota_section, quota_svg
from resp import Resp, free_port
from roundtrips import measure_roundtrips

CLIENTS_PYTHON = Path(__file__).resolve().parent.parent / "target/clients-venv/bin/python"


def measure_quota() -> dict | None:
    """bench/quota.py, in the clients' virtualenv (it needs the package and redis-py)."""
    if not CLIENTS_PYTHON.exists():
        print("  skipped: no target/clients-venv (make clients-deps makes it)")
        return None
    out = subprocess.run([str(CLIENTS_PYTHON), str(Path(__file__).parent / "quota.py"),
                          str(MODULE), "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)

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

# Two limits all or nothing, as scripts do it: a GCRA and a fixed window, both checked
# before either is charged.
LUA_TWO_LIMITS = """
redis.replicate_commands()
local time = redis.call("TIME")
local now = (time[1] - 1483228800) + (time[2] / 1000000)
local interval = tonumber(ARGV[2]) / tonumber(ARGV[1])
local tat = tonumber(redis.call("GET", KEYS[1]) or now)
tat = math.max(tat, now)
local new_tat = tat + interval
if new_tat - now > interval * (tonumber(ARGV[3]) + 1) then return {1, 0} end
local count = tonumber(redis.call("GET", KEYS[2]) or 0)
if count + 1 > tonumber(ARGV[4]) then return {1, 1} end
redis.call("SET", KEYS[1], new_tat, "EX", math.ceil(new_tat - now))
if count == 0 then
  redis.call("SET", KEYS[2], 1, "EX", ARGV[5])
else
  redis.call("INCR", KEYS[2])
end
return {0, -1}
"""

# A concurrency limit in a sorted set of leases scored by their end: drop the ended ones,
# count, add one.
LUA_LEASES = """
local limit = tonumber(ARGV[1])
local lease_us = tonumber(ARGV[2])
local time = redis.call("TIME")
local now = time[1] * 1000000 + time[2]
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
if redis.call("ZCARD", KEYS[1]) >= limit then return {1, 0} end
local id = redis.call("INCR", KEYS[1] .. ":ids")
redis.call("ZADD", KEYS[1], now + lease_us, id)
redis.call("PEXPIRE", KEYS[1], math.ceil(lease_us / 1000))
return {0, id}
"""

SCRIPTS = {
    "gcra": LUA_GCRA,
    "fixed": LUA_FIXED_WINDOW,
    "zlog": LUA_SORTED_SET_LOG,
    "two": LUA_TWO_LIMITS,
    "leases": LUA_LEASES,
}

# A window of 10^9 seconds: aligned windows end every 31 years, so no key expires during a
# run, whatever the time of day.
LONG = "1000000000"


@dataclass
class Workload:
    """One benchmarked command line."""

    name: str
    group: str  # "redis", "module" or "lua"
    command: list[str]  # "{gcra}" and the like stand for a script's SHA
    random_keys: bool = True
    # Requests sent before measuring, so that a hot key's log is long already.
    warm_up: int = 0
    target: float | None = None  # the ratio to SET ... PX it must stay within
    # The plain call an option's workload is judged against (within OPTION_TARGET).
    plain: str | None = None
    # RL.TOP's size during the workload (CONFIG SET ratelimit.top-keys); 0, the default, is off.
    top_keys: int = 0
    # Commands run once on the empty database before the warm-up (a service's load report).
    setup: list = field(default_factory=list)
    results: dict = field(default_factory=dict)


WORKLOADS = [
    Workload("INCR", "redis", ["INCR", "incr:__rand_int__"]),
    Workload("SET ... PX", "redis", ["SET", "set:__rand_int__", "1700000000000000000", "PX", "3600000"]),
    Workload("CL.THROTTLE", "module", ["CL.THROTTLE", "gcra:__rand_int__", "15", "1", "3600"], target=1.2),
    Workload("RL.WINDOW FIXED", "module", ["RL.WINDOW", "fixed:__rand_int__", "100", LONG, "FIXED"],
             target=1.2),
    Workload("RL.WINDOW SLIDING", "module", ["RL.WINDOW", "sliding:__rand_int__", "100", LONG], target=1.2),
    Workload("RL.WINDOW BUCKETS 60", "module",
             ["RL.WINDOW", "buckets:__rand_int__", "100", LONG, "BUCKETS", "60"], target=1.3),
    Workload("RL.LOG", "module", ["RL.LOG", "log:__rand_int__", "100", "86400"], target=1.3),
    Workload("RL.LOG hot key, limit 100,000", "module", ["RL.LOG", "hot", "100000", "86400"],
             random_keys=False, warm_up=50_000, target=1.3),
    Workload("RL.ALL, a THROTTLE and a WINDOW", "module",
             ["RL.ALL", "2", "all:__rand_int__", "allw:__rand_int__", "THROTTLE", "15", "1", "3600",
              "WINDOW", "100", LONG, "FIXED"], target=2.2),
    # The load gate with the same two limits: one service, a live report at level 0.
    Workload("RL.ALL ... LOAD, a THROTTLE and a WINDOW", "module",
             ["RL.ALL", "3", "load:service", "all:__rand_int__", "allw:__rand_int__",
              "LOAD", "critical", "THROTTLE", "15", "1", "3600", "WINDOW", "100", LONG, "FIXED"],
             plain="RL.ALL, a THROTTLE and a WINDOW",
             setup=[["RL.LOAD.REPORT", "load:service", "web-1", "86400000", "cpu", "0.3",
                     "inflight", "4"]]),
    Workload("RL.ACQUIRE", "module", ["RL.ACQUIRE", "lease:__rand_int__", "100", "3600"]),
    # Refused: nothing is written; with RL.TOP on, the key is counted (100,000 keys through a
    # summary of 128: each refusal a new key, the costliest case).
    Workload("RL.LOG, every call refused", "module",
             ["RL.LOG", "refused:__rand_int__", "1", "86400", "2"]),
    Workload("RL.LOG, every call refused, RL.TOP on", "module",
             ["RL.LOG", "refused:__rand_int__", "1", "86400", "2"], top_keys=128),
    # The options a request that does not fit may take, against the plain call with as many
    # arguments (the server makes an object of each before the command runs): on the path
    # where the request fits (what most calls take), and where it does not.
    Workload("CL.THROTTLE ... 1 S", "module",
             ["CL.THROTTLE", "gcra:__rand_int__", "15", "1", "3600", "1", "S"]),
    Workload("CL.THROTTLE ... DELAY 60, admitted at once", "module",
             ["CL.THROTTLE", "gcra:__rand_int__", "15", "1", "3600", "DELAY", "60"],
             plain="CL.THROTTLE ... 1 S"),
    Workload("CL.THROTTLE ... DELAY, every call delayed", "module",
             ["CL.THROTTLE", "queue", "15", "1", "1", "DELAY", LONG], random_keys=False,
             plain="CL.THROTTLE ... 1 S"),
    Workload("RL.WINDOW ... 1 SLIDING S", "module",
             ["RL.WINDOW", "sliding:__rand_int__", "100", LONG, "1", "SLIDING", "S"]),
    Workload("RL.WINDOW ... 1 SLIDING AT_MOST", "module",
             ["RL.WINDOW", "sliding:__rand_int__", "100", LONG, "1", "SLIDING", "AT_MOST"],
             plain="RL.WINDOW ... 1 SLIDING S"),
    Workload("RL.LOG ... 1 S", "module", ["RL.LOG", "log:__rand_int__", "100", "86400", "1", "S"]),
    Workload("RL.LOG ... 1 FORCE", "module",
             ["RL.LOG", "log:__rand_int__", "100", "86400", "1", "FORCE"], plain="RL.LOG ... 1 S"),
    Workload("RL.LOG ... 2 FORCE, every call owed", "module",
             ["RL.LOG", "owed", "1000000", "86400", "2", "FORCE"], random_keys=False,
             warm_up=500_000, plain="RL.LOG ... 1 S"),
    Workload("Lua GCRA (redis_rate)", "lua",
             ["EVALSHA", "{gcra}", "1", "luagcra:__rand_int__", "15", "1", "3600", "1"]),
    Workload("Lua fixed window", "lua",
             ["EVALSHA", "{fixed}", "1", "luafixed:__rand_int__", "100", "1", "86400"]),
    Workload("Lua sorted-set log", "lua",
             ["EVALSHA", "{zlog}", "1", "luazlog:__rand_int__", "100", "86400000000", "__rand_int__"]),
    Workload("Lua two limits", "lua",
             ["EVALSHA", "{two}", "2", "luatwo:__rand_int__", "luatwow:__rand_int__", "1", "3600", "15",
              "100", "86400"]),
    Workload("Lua leases (sorted set)", "lua",
             ["EVALSHA", "{leases}", "1", "lualease:__rand_int__", "100", "3600000000"]),
]

# What each module workload is compared with: the script that does the same.
SCRIPT_FOR = {
    "CL.THROTTLE": "Lua GCRA (redis_rate)",
    "RL.WINDOW FIXED": "Lua fixed window",
    "RL.LOG": "Lua sorted-set log",
    "RL.ALL, a THROTTLE and a WINDOW": "Lua two limits",
    "RL.ACQUIRE": "Lua leases (sorted set)",
}


@dataclass
class Setup:
    """How the measured server runs."""

    key: str
    name: str
    extra: list[str]
    replica: bool = False


SETUPS = [
    Setup("replica", "A replica attached", [], replica=True),
    Setup("alone", "No replica, no AOF", []),
    Setup("aof", "AOF (appendfsync no)", ["--appendonly", "yes", "--appendfsync", "no"]),
]


class Server:
    """A redis-server with the module, on a free port, in a temporary directory."""

    def __init__(self, wrapper: list[str] | None = None, extra: list[str] | None = None,
                 module: Path | None = None):
        self.module = module or MODULE
        self.dir = tempfile.mkdtemp(prefix="ratelimit-bench-")
        self.port = free_port()
        command = (wrapper or []) + [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", self.dir,
            "--logfile", os.path.join(self.dir, "server.log"),
            "--repl-diskless-sync-delay", "0",
            "--loadmodule", str(self.module),
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

    def replica(self) -> "Server":
        """A replica of this server, once its link is up."""
        replica = Server(extra=["--replicaof", "127.0.0.1", str(self.port)], module=self.module)
        deadline = time.time() + 120
        while replica.client.info("replication").get("master_link_status") != "up":
            if time.time() > deadline:
                raise SystemExit("the replica did not sync")
            time.sleep(0.2)
        return replica

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

    def prepare(self, workload: Workload) -> bool:
        """An empty database, RL.TOP as the workload has it, then the workload's warm-up;
        False for a build without RL.TOP when the workload needs it (a baseline)."""
        self.client.call("FLUSHALL", "SYNC")
        configured = self.client.call("CONFIG", "SET", "ratelimit.top-keys", str(workload.top_keys))
        if workload.top_keys and isinstance(configured, RuntimeError):
            return False
        for command in workload.setup:
            if isinstance(self.client.call(*command), RuntimeError):
                return False
        if workload.warm_up:
            self.benchmark(workload, workload.warm_up)
        return True

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


def selected(workloads: list[Workload], only: str | None) -> list[Workload]:
    """The workloads to measure: all, or those whose name contains `only` and the floor."""
    if not only:
        return workloads
    return [w for w in workloads if only.lower() in w.name.lower() or w.name == "SET ... PX"]


def measure_speed(workloads: list[Workload], requests: int) -> None:
    """Throughput, latency and server CPU, with a replica attached, without valgrind."""
    master = Server()
    replica = master.replica()
    try:
        for workload in workloads:
            master.prepare(workload)
            before = master.cpu_seconds()
            result = master.benchmark(workload, requests)
            result["cpu_us"] = (master.cpu_seconds() - before) * 1e6 / requests
            workload.results.update(result)
            print(f"  {workload.name}: {result['rps']:,.0f} requests/s, "
                  f"{result['cpu_us']:.2f} µs of server CPU each", flush=True)
    finally:
        replica.stop()
        master.stop()


# The server's command lookups compare names in a table hashed with a seed drawn at each
# start: a name that shares its bucket costs a comparison more on every call, in one server
# process and not the next, about 1% of a module command's count either way. These
# comparisons are left out of every count, so that two builds, each in its own server, compare.
UNCOUNTED_FUNCTION = "dictSdsKeyCaseCompare"


def callgrind_total(path: Path) -> int:
    """The dump's total, less the inclusive cost of every call to UNCOUNTED_FUNCTION."""
    names: dict[str, str] = {}
    total, uncounted, callee, pending = None, 0, None, False
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            total = int(line.split()[1])
        elif line.startswith(("fn=", "cfn=")):
            match = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
            if match and match.group(2):
                names[match.group(1)] = match.group(2)
            if match and line.startswith("cfn="):
                callee = names.get(match.group(1))
        elif line.startswith("calls="):
            pending = callee == UNCOUNTED_FUNCTION
        elif pending:
            # The line after a call: its position and inclusive cost.
            uncounted += int(line.split()[1])
            pending = False
    if total is None:
        raise ValueError(f"no total in {path}")
    return total - uncounted


def measure_instructions(setup: Setup, workloads: list[Workload], requests: int,
                         module: Path | None = None, key: str | None = None) -> None:
    """Instructions per request of each workload, on a server under callgrind, stored under
    `key` (the setup's); with `module`, another build's, for the workloads it knows."""
    key = key or setup.key
    out_dir = Path(tempfile.mkdtemp(prefix="ratelimit-callgrind-"))
    server = Server(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.out"],
                    setup.extra, module)
    replica = server.replica() if setup.replica else None
    pid = str(server.process.pid)
    try:
        for workload in workloads:
            probe = server.client.call(*server.command(workload))
            # A build without the command, or without one of its options (a baseline).
            if isinstance(probe, RuntimeError):
                continue
            if not server.prepare(workload):
                continue
            subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
            server.benchmark(workload, requests)
            before = set(out_dir.iterdir())
            subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
            deadline = time.time() + 60
            while not (new := set(out_dir.iterdir()) - before) and time.time() < deadline:
                time.sleep(0.1)
            dump = max(new, key=lambda path: path.stat().st_mtime)
            workload.results[key] = callgrind_total(dump) / requests
            print(f"  {workload.name}: {workload.results[key]:,.0f} instructions", flush=True)
    finally:
        if replica:
            replica.stop()
        server.stop()
        shutil.rmtree(out_dir, ignore_errors=True)


def used_memory(client: Resp) -> int:
    """used_memory without the clients' buffers (a pipeline's grow and shrink on the server's
    schedule), once two readings 110 ms apart agree: a keyspace that just grew may still be
    rehashing into a larger table, which the server's cron finishes."""
    def now() -> int:
        info = client.info("memory")
        return int(info["used_memory"]) - int(info["mem_clients_normal"])
    # A command's latency histogram is allocated after its first call: call INFO twice.
    client.info("memory")
    reading = now()
    for _ in range(5):
        time.sleep(0.11)
        following = now()
        if following == reading:
            break
        reading = following
    return reading


def keys_in_db(client: Resp) -> int:
    line = client.info("keyspace").get("db0", "keys=0")
    return int(line.split(",")[0].split("=")[1])


def bytes_per_key(client: Resp, make, keys: int = 100_000) -> float:
    """used_memory growth per key over `keys` keys named with 8 characters; each `make(key)`
    is the list of commands that create one."""
    commands = [command for i in range(keys) for command in make(f"{i:08d}")]
    batch = 10_000
    # The same pipeline once first: the server's buffers for it grow before the baseline.
    for start in range(0, len(commands), batch):
        client.pipeline(commands[start:start + batch])
    client.call("FLUSHALL", "SYNC")
    before = used_memory(client)
    for start in range(0, len(commands), batch):
        client.pipeline(commands[start:start + batch])
    if keys_in_db(client) != keys:
        raise SystemExit(f"only {keys_in_db(client)} of {keys} keys are there: one expired")
    grown = (used_memory(client) - before) / keys
    client.call("FLUSHALL", "SYNC")
    return grown


def per_item(client: Resp, command, items: int, key: str, pipelined: bool) -> tuple[float, float]:
    """used_memory growth and MEMORY USAGE per item of one key, after `items` calls of
    `command(i)`: one call per round trip (each in a microsecond of its own) or pipelined."""
    def run():
        if pipelined:
            for start in range(0, items, 1_000):
                client.pipeline([command(i) for i in range(start, min(items, start + 1_000))])
        else:
            for i in range(items):
                client.call(*command(i))
    run()
    client.call("FLUSHALL", "SYNC")
    before = used_memory(client)
    run()
    growth = (used_memory(client) - before) / items
    usage = client.call("MEMORY", "USAGE", key, "SAMPLES", "0") / items
    client.call("FLUSHALL", "SYNC")
    return growth, usage


def measure_memory() -> dict:
    server = Server()
    client = server.client
    sha = server.shas
    try:
        now = int(time.time() * 1e6)
        keys = {
            "SET ... PX (an integer)": lambda k: [["SET", k, "1700000000000000000", "PX", "3600000"]],
            "SET ... PX (a 12-byte string)": lambda k: [["SET", k, "twelve bytes", "PX", "3600000"]],
            "CL.THROTTLE": lambda k: [["CL.THROTTLE", k, "15", "1", "3600"]],
            "RL.WINDOW FIXED": lambda k: [["RL.WINDOW", k, "100", LONG, "FIXED"]],
            "RL.WINDOW SLIDING": lambda k: [["RL.WINDOW", k, "100", LONG]],
            "RL.WINDOW BUCKETS 60": lambda k: [["RL.WINDOW", k, "100", LONG, "BUCKETS", "60"]],
            "RL.LOG, one entry": lambda k: [["RL.LOG", k, "100", "86400"]],
            "Sorted set, one member (the Lua log's first request)":
                lambda k: [["ZADD", k, str(now), f"{now}-{k}"], ["PEXPIRE", k, "86400000"]],
            "RL.ACQUIRE, one lease": lambda k: [["RL.ACQUIRE", k, "100", "3600"]],
            "Lua GCRA (a float string)":
                lambda k: [["EVALSHA", sha["gcra"], "1", k, "15", "1", "3600", "1"]],
        }
        per_key = {}
        for name, make in keys.items():
            per_key[name] = bytes_per_key(client, make)
            print(f"  {name}: {per_key[name]:.1f} bytes per key", flush=True)
        items = {
            "RL.LOG, distinct requests": per_item(
                client, lambda i: ["RL.LOG", "log", "10000", "86400"], 10_000, "log", False),
            "RL.LOG, pipelined (requests in one microsecond share an entry)": per_item(
                client, lambda i: ["RL.LOG", "log", "10000", "86400"], 10_000, "log", True),
            "Lua sorted-set log, distinct requests": per_item(
                client, lambda i: ["EVALSHA", sha["zlog"], "1", "zlog", "10000", "86400000000", str(i)],
                10_000, "zlog", False),
            "RL.ACQUIRE, held leases": per_item(
                client, lambda i: ["RL.ACQUIRE", "leases", "65536", "3600"], 10_000, "leases", True),
        }
        for name, (growth, usage) in items.items():
            print(f"  {name}: {growth:.1f} bytes each (MEMORY USAGE {usage:.1f})", flush=True)
        return {"keys": per_key, "items": items}
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
        # The commit make read before building (`BUILT_FROM`), else the tree's now.
        "module": ((os.environ.get("BUILT_FROM")
                    or run("git", "-C", str(ROOT), "describe", "--always", "--dirty"))
                   if MODULE == ROOT / "target/release/libredis_ratelimit.so" else str(MODULE)),
    }


def by_name(workloads: list[Workload], name: str) -> Workload | None:
    return next((w for w in workloads if w.name == name), None)


def ratio(workload: Workload, floor: Workload | None, key: str) -> float | None:
    value = workload.results.get(key)
    base = floor.results.get(key) if floor else None
    return value / base if value and base else None


def instruction_table(workloads: list[Workload]) -> list[str]:
    floor = by_name(workloads, "SET ... PX")
    head = "| Workload | " + " | ".join(f"{s.name}: instructions, vs `SET ... PX`" for s in SETUPS)
    lines = [head + " | Target |", "|---|" + "---:|" * (len(SETUPS) + 1)]
    for w in workloads:
        cells = []
        for setup in SETUPS:
            value, share = w.results.get(setup.key), ratio(w, floor, setup.key)
            cells.append(f"{value:,.0f}, {share:.2f}x" if value and share else "n/a")
        target = f"<= {w.target}x" if w.target else ""
        lines.append(f"| {w.name} | " + " | ".join(cells) + f" | {target} |")
    return lines


def speed_table(workloads: list[Workload]) -> list[str]:
    lines = ["| Workload | Server CPU µs / request | Requests / s | p50 ms | p99 ms |",
             "|---|---:|---:|---:|---:|"]
    for w in workloads:
        r = w.results
        if "rps" in r:
            lines.append(f"| {w.name} | {r['cpu_us']:.2f} | {r['rps']:,.0f} | {r['p50']:.3f} | {r['p99']:.3f} |")
    return lines


def scripts_table(workloads: list[Workload]) -> list[str]:
    lines = ["| Command | The script that does the same | Script's instructions / command's |",
             "|---|---|---:|"]
    for command, script in SCRIPT_FOR.items():
        ours, theirs = by_name(workloads, command), by_name(workloads, script)
        if ours and theirs and (share := ratio(theirs, ours, "replica")):
            lines.append(f"| `{command}` | {script} | {share:.1f}x |")
    return lines


# How much more an option may cost than the plain call, where the request fits.
OPTION_TARGET = 1.05


def options_table(workloads: list[Workload]) -> list[str]:
    """Each option's workload against its plain call, a replica attached."""
    lines = ["| Workload | Instructions | The plain call | Ratio |", "|---|---:|---|---:|"]
    for w in workloads:
        plain = by_name(workloads, w.plain) if w.plain else None
        if plain and (share := ratio(w, plain, "replica")):
            lines.append(f"| {w.name} | {w.results['replica']:,.0f} | {plain.name} | {share:.3f}x |")
    return lines


def baseline_table(workloads: list[Workload], name: str) -> list[str]:
    """Each module workload's instructions against baseline build `name`'s, per setup measured."""
    setups = [s for s in SETUPS if any(f"baseline:{name}:{s.key}" in w.results for w in workloads)]
    head = "| Workload | " + " | ".join(f"{s.name}: {name}, this build, change" for s in setups)
    lines = [head + " |", "|---|" + "---:|" * len(setups)]
    for w in workloads:
        if w.group != "module":
            continue
        cells = []
        for setup in setups:
            old, new = w.results.get(f"baseline:{name}:{setup.key}"), w.results.get(setup.key)
            cells.append(f"{old:,.0f}, {new:,.0f}, {100 * (new / old - 1):+.1f}%"
                         if old and new else "n/a (new)")
        lines.append(f"| {w.name} | " + " | ".join(cells) + " |")
    return lines


def memory_tables(memory: dict) -> list[str]:
    lines = ["| Per key, 100,000 keys of 8-character names | Bytes |", "|---|---:|"]
    lines += [f"| {name} | {value:.1f} |" for name, value in memory["keys"].items()]
    lines += ["", "| Per item, 10,000 in one key | used_memory growth | MEMORY USAGE |",
              "|---|---:|---:|"]
    lines += [f"| {name} | {growth:.1f} | {usage:.1f} |"
              for name, (growth, usage) in memory["items"].items()]
    return lines


def chart_svg(workloads: list[Workload], key: str) -> str:
    """Bars of instructions per request in the setup `key`, SET ... PX marked."""
    values = [(w.name, w.group, w.results.get(key, 0)) for w in workloads]
    top = max(v for _, _, v in values) * 1.1
    floor = by_name(workloads, "SET ... PX").results.get(key, 0)
    width, row, left = 900, 26, 300
    height = 50 + row * len(values) + 30
    scale = (width - left - 90) / top
    colors = {"redis": "#8c8c8c", "module": "#c0392b", "lua": "#2e86c1"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="13">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="22" font-size="15">Instructions per request, '
             f'{next(s.name for s in SETUPS if s.key == key).lower()} (callgrind): shorter is better</text>']
    x = left + floor * scale
    parts.append(f'<line x1="{x:.1f}" y1="34" x2="{x:.1f}" y2="{height - 30}" stroke="#444"/>')
    parts.append(f'<text x="{x - 3:.1f}" y="{height - 14}" font-size="11" text-anchor="end">SET ... PX</text>')
    for i, (name, group, value) in enumerate(values):
        y = 40 + i * row
        parts.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end">{name}</text>')
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{value * scale:.1f}" height="{row - 8}" '
                     f'fill="{colors[group]}"/>')
        parts.append(f'<text x="{left + value * scale + 6:.1f}" y="{y + 16}">{value:,.0f}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def roundtrips_section(result) -> list[str]:
    """What DELAY saves a client under contention: round trips per admitted request."""
    if not result:
        return []
    return [
        "## DELAY against polling",
        "",
        f"{result['clients']} clients each need {result['each']} requests through one limiter of "
        f"{result['rate']} a second (`CL.THROTTLE` without a burst), all at once, on a live server "
        "([bench/roundtrips.py](bench/roundtrips.py)). A polling client calls, sleeps the "
        "`retry_after` it is told and calls again until admitted (as upstash's `blockUntilReady` "
        "does); a `DELAY` client calls once and sleeps the wait it is told.",
        "",
        "| Client | Round trips per admitted request | Seconds for all |",
        "|---|---:|---:|",
        *(f"| {name} | {trips:.2f} | {seconds:.1f} |" for name, trips, seconds in result["rows"]),
        "",
    ]


def report(workloads, memory, info, requests, callgrind_requests, minutes, command,
           baselines: tuple[str, ...] = (), roundtrips=None, through_nginx=None,
           quota=None, overload=None, layer=None, golang=None, java=None) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Produced by `{command}` ([bench/run.py](bench/run.py)) in {minutes:.0f} minutes; the chart "
        "is [bench/chart.svg](bench/chart.svg). Every figure comes from this one run:",
        "",
        f"- Machine: {info['machine']}",
        f"- Server: {info['redis']}",
        f"- valgrind: {info['valgrind']}; {info['rustc']}; module at commit {info['module']}",
        f"- Load: redis-benchmark, pipeline 16, 50 clients, 100,000 random keys unless said, on an "
        f"empty database; {callgrind_requests:,} requests per workload under callgrind "
        f"(instructions counted over the whole server process, from zeroed counters to the dump "
        f"after the last reply, less the command table's name comparisons, whose count follows "
        f"a hash seed drawn at each start), {requests:,} for time and latency. Every limit outlives the run: "
        "no key expires during a measurement.",
        "",
        "## Instructions per request",
        "",
        "Judged against `SET ... PX` in the same setup. With a replica attached (how production "
        "runs, the headline), every write builds its effect for the replication stream; alone, "
        "the module skips building effects nothing would receive; with an AOF, effects go to "
        "the AOF.",
        "",
        *instruction_table(workloads),
        "",
        "Against the scripts that do the same (a replica attached):",
        "",
        *scripts_table(workloads),
        "",
        f"The options for a request that does not fit (`DELAY`, `AT_MOST`, `FORCE`) against the "
        f"plain call with as many arguments (a replica attached; the target where the request "
        f"fits: within {OPTION_TARGET:.2f}x). A delayed call decides twice, at now and at its "
        f"time; an owed one places its parts:",
        "",
        *options_table(workloads),
        "",
        *(line for baseline in baselines for line in (
            f"Against an earlier build, {baseline}, measured in the same run (instructions "
            "per request):", "", *baseline_table(workloads, baseline), "")),
        *roundtrips_section(roundtrips),
        *nginx_section(through_nginx),
        *quota_section(quota),
        *layer_section(layer),
        *go_section(golang),
        *java_section(java),
        *overload_section(overload),
        "## Time and latency (a replica attached, no valgrind)",
        "",
        "Server CPU is the server's own (INFO cpu), so the client's cost is left out.",
        "",
        *speed_table(workloads),
        "",
        "## Memory",
        "",
        "used_memory growth, read once INFO keyspace shows every key.",
        "",
        *memory_tables(memory),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    global MODULE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500_000)
    parser.add_argument("--callgrind-requests", type=int, default=20_000)
    parser.add_argument("--only", help="measure only the workloads whose name contains this")
    parser.add_argument("--setups", default=",".join(s.key for s in SETUPS),
                        help="comma-separated setups for instructions: " + ", ".join(s.key for s in SETUPS))
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--write", action="store_true",
                        help="write the tracked BENCHMARKS.md and bench/chart.svg")
    parser.add_argument("--module", type=Path, default=MODULE,
                        help="the module to measure (another build, to compare)")
    parser.add_argument("--baseline", type=Path, action="append", default=[],
                        help="an earlier build to measure too, in the same run and setups "
                             "(repeated for several); its tree's Lua package is measured in "
                             "nginx too, when the build sits in a checkout")
    parser.add_argument("--baseline-name", action="append", default=[],
                        help="what to call each baseline in the report (a version or commit)")
    options = parser.parse_args()
    names = options.baseline_name + [f"baseline {i + 1}" for i in
                                     range(len(options.baseline_name), len(options.baseline))]
    baselines = list(zip(names, (path.resolve() for path in options.baseline)))
    MODULE = options.module.resolve()
    if not MODULE.is_file():
        sys.exit(f"{MODULE} is not built: run `make bench`")
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        sys.exit("valgrind is needed for the instruction counts: apt-get install valgrind")
    started = time.time()
    workloads = selected(WORKLOADS, options.only)
    info = versions()
    for setup in SETUPS:
        if setup.key in options.setups.split(","):
            print(f"Instructions, {setup.name}:", flush=True)
            measure_instructions(setup, workloads, options.callgrind_requests)
            for name, module in baselines:
                print(f"Instructions, {setup.name}, {name}:", flush=True)
                module_workloads = [w for w in workloads if w.group == "module"]
                measure_instructions(setup, module_workloads, options.callgrind_requests,
                                     module, f"baseline:{name}:{setup.key}")
    if not options.no_speed:
        print("Time and latency, a replica attached:", flush=True)
        measure_speed(workloads, options.requests)
    roundtrips = None
    if not options.no_speed and not options.only:
        print("DELAY against polling:", flush=True)
        server = Server()
        try:
            roundtrips = measure_roundtrips(server.port)
        finally:
            server.stop()
    through_nginx = None
    if not options.no_speed and not options.only:
        print("Through nginx:", flush=True)
        through_nginx = measure_nginx(MODULE, baselines)
    quota = None
    if not options.no_speed and not options.only:
        print("Quota leases:", flush=True)
        quota = measure_quota()
    layer = None
    if not options.no_speed and not options.only:
        print("The Rust layer against tower_governor:", flush=True)
        layer = measure_layer(MODULE)
    golang = None
    if not options.no_speed and not options.only:
        print("The Go module against redis_rate's and go-zero's scripts:", flush=True)
        golang = measure_go(MODULE)
    java = None
    if not options.no_speed and not options.only:
        print("The Java packages against Spring Cloud Gateway's script and bucket4j:", flush=True)
        java = measure_java(MODULE)
    overload = None
    if not options.no_speed and not options.only:
        print("Load shedding under overload:", flush=True)
        overload = measure_overload(MODULE)
    memory = {"keys": {}, "items": {}}
    if not options.no_memory:
        print("Memory:", flush=True)
        memory = measure_memory()
    minutes = (time.time() - started) / 60
    complete = not (options.only or options.no_memory or options.no_speed
                    or options.setups != ",".join(s.key for s in SETUPS))
    command = ("make bench-update" if options.write else "make bench") if complete \
        else "python3 bench/run.py " + " ".join(sys.argv[1:])
    if complete and baselines:
        listed = " ".join(name for name, _ in baselines)
        command += f" BASELINE={listed}" if len(baselines) == 1 else f' BASELINE="{listed}"'
    text = report(workloads, memory, info, options.requests, options.callgrind_requests, minutes, command,
                  tuple(name for name, _ in baselines), roundtrips, through_nginx,
                  quota, overload, layer, golang, java)
    print()
    print("\n".join(line for line in text.splitlines() if line.startswith("|")))
    out = ROOT if options.write else ROOT / "target/bench"
    (out / "bench").mkdir(parents=True, exist_ok=True)
    (out / "BENCHMARKS.md").write_text(text)
    # The chart shows the headline setup, or the first one measured.
    measured = [s.key for s in SETUPS if any(s.key in w.results for w in workloads)]
    if measured:
        (out / "bench/chart.svg").write_text(chart_svg(workloads, measured[0]))
    if quota:
        (out / "bench/quota.svg").write_text(quota_svg(quota))
    if overload:
        (out / "bench/overload.svg").write_text(overload_svg(overload))
    print(f"\nWrote {out / 'BENCHMARKS.md'} and {out / 'bench/chart.svg'} in {minutes:.1f} minutes")


if __name__ == "__main__":
    main()
