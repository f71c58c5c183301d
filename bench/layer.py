"""The Rust crate's tower layer against tower_governor's, in one axum app
(clients/rust/examples/layer_bench.rs, built by `make deps-bench`): requests per second and
latency by wrk on four routes, no limit, tower_governor (in the process), this crate's
`RateLimitLayer` (a server call a request, the server on this machine) and a bare `PING`
through the same app (the round trip alone), every limit far above the load. Run by
bench/run.py (make bench), or alone:

    python3 bench/layer.py [path/to/libredis_ratelimit.so] [--json]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from nginx import free_port, start_server, wait_for, wrk

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "target/rust-clients/release/examples/layer_bench"
ROUTES = {
    "/bare": "No limit",
    "/governor": "tower_governor (in the process)",
    "/module": "`RateLimitLayer` (this crate)",
    "/ping": "A bare `PING` a request",
}
SECONDS = 5
CONNECTIONS = 16


def measure_layer(module: Path) -> dict | None:
    if not PROGRAM.exists() or not shutil.which("wrk"):
        print("  skipped: no wrk or no layer_bench (make deps-bench builds it)")
        return None
    work = Path(tempfile.mkdtemp(prefix="ratelimit-bench-layer-"))
    redis_port, http_port = free_port(), free_port()
    server = start_server(module, redis_port)
    app = None
    try:
        wait_for([redis_port], work / "none")
        app = subprocess.Popen([str(PROGRAM), str(redis_port), str(http_port)])
        wait_for([http_port], work / "none")
        script = work / "key.lua"
        script.write_text('wrk.headers["x-api-key"] = "bench"\n')
        rows = {}
        for route in ROUTES:
            url = f"http://127.0.0.1:{http_port}{route}"
            wrk(url, 1, script)[1]()  # warm up
            rows[route] = wrk(url, SECONDS, script)[1]()
            print(f"  {route}: {rows[route]['rps']:,.0f} requests/s", flush=True)
        return {"rows": rows}
    finally:
        for process in (app, server):
            if process is not None:
                process.terminate()
                process.wait()
        shutil.rmtree(work, ignore_errors=True)


def layer_section(result) -> list[str]:
    if not result:
        return []
    rows = result["rows"]
    bare = rows["/bare"]
    lines = [
        "## The Rust layer against tower_governor",
        "",
        f"One axum app ([clients/rust/examples/layer_bench.rs](clients/rust/examples/layer_bench.rs)), "
        f"wrk (one thread, {CONNECTIONS} connections, {SECONDS} s a route), the server with the "
        "module on the same two cores; every limit keyed by `x-api-key` and far above the "
        "load. Added latency is the route's median less the unlimited route's.",
        "",
        "| Route | Requests/s | p50 ms | p99 ms | Added p50 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for route, name in ROUTES.items():
        row = rows[route]
        lines.append(f"| {name} | {row['rps']:,.0f} | {row['p50']:.2f} | {row['p99']:.2f} | "
                     f"{row['p50'] - bare['p50']:+.2f} |")
    module, ping = rows["/module"], rows["/ping"]
    lines += [
        "",
        f"tower_governor decides in the process and its limits hold in that process only; the "
        f"module's hold across every instance, for a server round trip a request: the layer "
        f"adds {module['p50'] - bare['p50']:.2f} ms at the median where a bare `PING` adds "
        f"{ping['p50'] - bare['p50']:.2f} ms.",
        "",
    ]
    return lines


if __name__ == "__main__":
    arguments = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    module = Path(arguments[0] if arguments else ROOT / "target/release/libredis_ratelimit.so")
    measured = measure_layer(module.resolve())
    if "--json" in sys.argv:
        print(json.dumps(measured))
    elif measured:
        print("\n".join(layer_section(measured)))
