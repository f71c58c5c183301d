"""The Go module's decision against the scripts it replaces (clients/go/compat/bench_test.go):
`go test -bench`, one goroutine, one key, every limit far above the load, on a server with the
module on this machine: the client's check, the redis_rate and go-zero `TokenLimiter` drop-ins,
and go-redis/redis_rate's and go-zero's own Lua scripts. Per decision: the time a call takes,
what it allocates, and the server's time (`INFO commandstats`: the command's `usec` over the
decisions, `EVALSHA` for a script). Run by bench/run.py (make bench), or alone:

    python3 bench/golang.py [path/to/libredis_ratelimit.so] [--json]
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

from nginx import free_port, start_server, wait_for

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "clients/go/compat"
ROWS = {
    "client-check": "`Client.Check` (`CL.THROTTLE`)",
    "redis_rate-drop-in": "`redis_rate` drop-in (`CL.THROTTLE`)",
    "redis_rate-script": "go-redis/redis_rate v10 (its Lua script)",
    "go-zero-TokenLimiter-drop-in": "`gozero/limit.TokenLimiter` drop-in (`CL.THROTTLE`)",
    "go-zero-TokenLimiter-script": "go-zero's `TokenLimiter` (its Lua script)",
}
BENCHTIME = "3s"
LINE = re.compile(r"^BenchmarkDecision/(\S+?)(?:-\d+)?\s+\d+\s+(.*)$")


def measure_go(module: Path) -> dict | None:
    if not shutil.which("go") or not COMPAT.exists():
        print("  skipped: no go")
        return None
    work = Path(tempfile.mkdtemp(prefix="ratelimit-bench-go-"))
    port = free_port()
    server = start_server(module, port)
    try:
        wait_for([port], work / "none")
        output = subprocess.run(
            ["go", "test", "-run", "^$", "-bench", "BenchmarkDecision", "-benchtime", BENCHTIME,
             "."], cwd=COMPAT, capture_output=True, text=True,
            env={**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}"})
        if output.returncode != 0:
            print("  go test -bench failed:\n" + output.stdout + output.stderr)
            return None
        rows = {}
        for line in output.stdout.splitlines():
            match = LINE.match(line)
            if not match:
                continue
            values = match.group(2).split()
            metrics = {unit: float(value) for value, unit in zip(values[::2], values[1::2])}
            rows[match.group(1)] = metrics
            print(f"  {match.group(1)}: {metrics.get('ns/op', 0) / 1000:.1f} µs, "
                  f"{metrics.get('server-µs/op', 0):.2f} server µs", flush=True)
        return {"rows": rows}
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


def go_section(result) -> list[str]:
    if not result:
        return []
    rows = result["rows"]
    lines = [
        "## Go against redis_rate's and go-zero's scripts",
        "",
        "`go test -bench` ([clients/go/compat/bench_test.go](clients/go/compat/bench_test.go)), "
        "one goroutine, one key, every limit far above the load, on a server with the module on "
        "the same two cores. Server µs: `INFO commandstats`' time for the decisions' command "
        "over the decisions (`EVALSHA` for a script).",
        "",
        "| Decision | µs a call | Server µs | Bytes allocated | Allocations |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in ROWS.items():
        row = rows.get(name)
        if row is None:
            continue
        lines.append(f"| {label} | {row.get('ns/op', 0) / 1000:.1f} | "
                     f"{row.get('server-µs/op', 0):.2f} | {row.get('B/op', 0):,.0f} | "
                     f"{row.get('allocs/op', 0):.0f} |")
    pairs = [("redis_rate-drop-in", "redis_rate-script", "redis_rate's script"),
             ("go-zero-TokenLimiter-drop-in", "go-zero-TokenLimiter-script",
              "go-zero's `TokenLimiter` script")]
    shares = []
    for ours, theirs, name in pairs:
        if ours in rows and theirs in rows and rows[theirs].get("server-µs/op"):
            share = rows[ours]["server-µs/op"] / rows[theirs]["server-µs/op"]
            shares.append(f"{share:.0%} of {name}'s")
    if shares:
        lines += ["", "The server's time per decision: " + "; ".join(shares) + "."]
    lines.append("")
    return lines


if __name__ == "__main__":
    arguments = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    module = Path(arguments[0] if arguments else ROOT / "target/release/libredis_ratelimit.so")
    measured = measure_go(module.resolve())
    if "--json" in sys.argv:
        print(json.dumps(measured))
    elif measured:
        print("\n".join(go_section(measured)))
