"""The Java packages against what they replace (clients/java/bench-gateway, built by `make
deps-bench`), on a server with the module on this machine:

- JMH, one thread: the client's check (`CL.THROTTLE`), Spring Cloud Gateway's
  request_rate_limiter.lua by `EVALSHA` (as `RedisRateLimiter` sends it) and bucket4j's Lettuce
  proxy (a compare-and-swap); decisions a second, bytes allocated a decision (`-prof gc`), and
  the server's time a decision (`INFO commandstats`); and quota leases at batches 10, 50 and
  100, with their server calls a decision;
- wrk against a gateway route limited by the drop-in and by `RedisRateLimiter` (the same app,
  the drop-in's auto-configuration excluded), every limit far above the load.

Run by bench/run.py (make bench), or alone:

    python3 bench/java.py [path/to/libredis_ratelimit.so] [--json]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from nginx import free_port, start_server, wait_for, wrk

ROOT = Path(__file__).resolve().parent.parent
MODULE_DIR = ROOT / "clients/java/bench-gateway"
CLASSPATH_FILE = MODULE_DIR / "target/classpath.txt"
SECONDS = 10
# Each JMH benchmark, what the server answers its decisions with, and what else it calls.
DECISIONS = {
    "clientCheck": ("`RateLimiter.check` (`CL.THROTTLE`)", ["cl.throttle"], []),
    "scgScript": ("Spring Cloud Gateway's script (`EVALSHA`)", ["evalsha"], []),
    "bucket4jLettuce": ("bucket4j's Lettuce proxy (compare-and-swap)", ["eval"], ["get"]),
}


def classpath() -> str | None:
    if not CLASSPATH_FILE.exists():
        return None
    return f"{MODULE_DIR / 'target/classes'}:{CLASSPATH_FILE.read_text().strip()}"


def call(port: int, *words: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), *words], capture_output=True,
                          text=True, check=True).stdout


def server_micros(port: int, decided: list[str], also: list[str]) -> float | None:
    """The server's time per decision since the last reset: the decisions' command and what
    else each decision calls, over the decisions."""
    stats = {}
    for line in call(port, "INFO", "commandstats").splitlines():
        match = re.match(r"cmdstat_([^:]+):calls=(\d+),usec=(\d+)", line)
        if match:
            stats[match.group(1)] = (int(match.group(2)), int(match.group(3)))
    decisions = sum(stats.get(name, (0, 0))[0] for name in decided)
    usec = sum(stats.get(name, (0, 0))[1] for name in decided + also)
    return usec / decisions if decisions else None


def jmh(cp: str, port: int, pattern: str, work: Path) -> list[dict]:
    out = work / "jmh.json"
    subprocess.run(["java", "-cp", cp, "org.openjdk.jmh.Main", pattern, "-f", "1", "-wi", "2",
                    "-w", "2s", "-i", "3", "-r", "3s", "-prof", "gc", "-rf", "json", "-rff",
                    str(out)], env={**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}"},
                   check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def gateway(cp: str, redis_port: int, mode: str, work: Path) -> dict:
    port = free_port()
    app = subprocess.Popen(["java", "-cp", cp, "io.github.redisratelimit.bench.gateway.GatewayBench",
                            str(port), f"redis://127.0.0.1:{redis_port}", mode],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for([port], work / "none")
        script = work / "none.lua"
        script.write_text("")
        url = f"http://127.0.0.1:{port}/limited"
        wrk(url, 5, script)[1]()  # the JIT's warm-up
        call(redis_port, "CONFIG", "RESETSTAT")
        row = wrk(url, SECONDS, script)[1]()
        decided = ["cl.throttle"] if mode == "module" else ["evalsha"]
        row["server_us"] = server_micros(redis_port, decided, [])
        return row
    finally:
        app.terminate()
        app.wait()


def measure_java(module: Path) -> dict | None:
    cp = classpath()
    if cp is None or not shutil.which("java") or not shutil.which("wrk"):
        print("  skipped: no java, wrk or clients/java/bench-gateway (make deps-bench builds it)")
        return None
    work = Path(tempfile.mkdtemp(prefix="ratelimit-bench-java-"))
    port = free_port()
    server = start_server(module, port)
    try:
        wait_for([port], work / "none")
        decisions = {}
        for name, (_, decided, also) in DECISIONS.items():
            call(port, "CONFIG", "RESETSTAT")
            result = jmh(cp, port, f"DecisionBenchmark.{name}$", work)[0]
            decisions[name] = {
                "ops": result["primaryMetric"]["score"],
                "bytes": result["secondaryMetrics"]["gc.alloc.rate.norm"]["score"],
                "server_us": server_micros(port, decided, also),
            }
            print(f"  {name}: {decisions[name]['ops']:,.0f} decisions/s", flush=True)
        quota = {}
        for result in jmh(cp, port, "DecisionBenchmark.quotaLease$", work):
            batch = result["params"]["batch"]
            ops = result["primaryMetric"]["score"]
            calls = result["secondaryMetrics"]["calls"]["score"]
            # The calls are summed over the measured iterations; the decisions a rate.
            measured = result["measurementIterations"] * float(result["measurementTime"].split()[0])
            per = calls / (ops * measured) if ops else None
            quota[batch] = {"ops": ops, "calls_per_decision": per,
                            "bytes": result["secondaryMetrics"]["gc.alloc.rate.norm"]["score"]}
            print(f"  quota batch {batch}: {ops:,.0f} decisions/s", flush=True)
        routes = {}
        for mode in ("module", "script"):
            routes[mode] = gateway(cp, port, mode, work)
            print(f"  gateway, {mode}: {routes[mode]['rps']:,.0f} requests/s", flush=True)
        return {"decisions": decisions, "quota": quota, "routes": routes}
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


def java_section(result) -> list[str]:
    if not result:
        return []
    lines = [
        "## Java against Spring Cloud Gateway's script and bucket4j",
        "",
        "JMH ([clients/java/bench-gateway](clients/java/bench-gateway/src/main/java/io/github/redisratelimit/bench/gateway/DecisionBenchmark.java)): "
        "one thread, one key, every limit far above the load, on a server with the module on "
        "the same two cores; bytes allocated a decision from `-prof gc`; the server's time a "
        "decision from `INFO commandstats` (for bucket4j, its `EVAL` and `GET`).",
        "",
        "| Decision | Decisions/s | Bytes allocated | Server µs |",
        "|---|---:|---:|---:|",
    ]
    for name, (label, _, _) in DECISIONS.items():
        row = result["decisions"].get(name)
        if row:
            server = f"{row['server_us']:.2f}" if row["server_us"] else "-"
            lines.append(f"| {label} | {row['ops']:,.0f} | {row['bytes']:,.0f} | {server} |")
    lines += ["", "Quota leases (`Quota.take(1)`, one thread, a window far above the load):", "",
              "| Batch | Decisions/s | Server calls a decision | Bytes allocated |",
              "|---:|---:|---:|---:|"]
    for batch, row in sorted(result["quota"].items(), key=lambda item: int(item[0])):
        per = f"{row['calls_per_decision']:.3f}" if row["calls_per_decision"] is not None else "-"
        lines.append(f"| {batch} | {row['ops']:,.0f} | {per} | {row['bytes']:,.0f} |")
    routes = result["routes"]
    lines += ["", "A gateway route (`RequestRateLimiter`, one key, the limit far above the load; "
              "wrk, one thread, 16 connections, 10 s after 5 s of warming up; [GatewayBench]"
              "(clients/java/bench-gateway/src/main/java/io/github/redisratelimit/bench/gateway/GatewayBench.java)):",
              "", "| `redisRateLimiter` | Requests/s | p50 ms | p99 ms | Server µs a decision |",
              "|---|---:|---:|---:|---:|"]
    for mode, label in (("module", "the drop-in (`CL.THROTTLE`)"),
                        ("script", "Spring Cloud Gateway's (`EVALSHA`)")):
        row = routes[mode]
        server = f"{row['server_us']:.2f}" if row["server_us"] else "-"
        lines.append(f"| {label} | {row['rps']:,.0f} | {row['p50']:.2f} | {row['p99']:.2f} | "
                     f"{server} |")
    lines.append("")
    return lines


if __name__ == "__main__":
    arguments = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    module = Path(arguments[0] if arguments else ROOT / "target/release/libredis_ratelimit.so")
    measured = measure_java(module.resolve())
    if "--json" in sys.argv:
        print(json.dumps(measured))
    elif measured:
        print("\n".join(java_section(measured)))
