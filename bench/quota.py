"""Quota leases for one hot limit: decisions per second and server calls per decision with
batch 1, 10, 50 and 100 and 1, 2, 4 and 8 processes (Python, `ratelimit_module.Quota`,
every process on one key); then, with a limit that binds, the most any window admitted
against the bound (the limit plus processes x batch); then, on the same server, the Rust
crate on one task (clients/rust/examples/bench.rs, built by `make deps-bench`): `governor`
in the process, batch 1 and quota leases. Needs the Python package and redis-py
(the clients' virtualenv `make test` makes); run by bench/run.py (make bench), or alone:

    target/clients-venv/bin/python bench/quota.py [path/to/libredis_ratelimit.so] [--json]
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from quota_report import (BATCHES, BINDING_LIMIT, BINDING_WINDOW, PROCESSES, SECONDS,
                          quota_section)
from ratelimit_module import Log, Quota, RateLimiter, Window

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker(args: tuple) -> dict:
    port, key, batch, binding = args
    client = redis.Redis(port=port)
    limiter = RateLimiter(client)
    limits = [Log(key, BINDING_LIMIT, BINDING_WINDOW)] if binding \
        else [Window(key, 1 << 40, 1, "FIXED")]
    quota = Quota(limiter, limits, batch=batch, hold=0.5)
    admitted_at, end = [], time.monotonic() + SECONDS
    while time.monotonic() < end:
        if quota.take():
            if binding:
                admitted_at.append(time.time())
        elif binding:
            time.sleep(0.001)
    quota.close()
    client.close()
    ledger = quota.ledger
    return {"decisions": ledger.decisions, "admitted": ledger.admitted, "calls": ledger.calls,
            "times": admitted_at}


def worst_window(times: list[float], window: float) -> int:
    times.sort()
    start = worst = 0
    for end, at in enumerate(times):
        while times[start] <= at - window:
            start += 1
        worst = max(worst, end - start + 1)
    return worst


RUST_BENCH = ROOT / "target/rust-clients/release/examples/bench"


def measure_rust(port: int) -> list[dict]:
    """The Rust crate's rows (clients/rust/examples/bench.rs), against the server on `port`."""
    out = subprocess.run([str(RUST_BENCH), str(port), str(SECONDS)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["rows"]


def measure_quota(module: Path) -> dict:
    port = free_port()
    work = tempfile.mkdtemp(prefix="ratelimit-bench-quota-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", work, "--loadmodule", str(module)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                redis.Redis(port=port).ping()
                break
            except redis.ConnectionError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        rows, bound_rows = [], []
        with multiprocessing.get_context("fork").Pool(max(PROCESSES)) as pool:
            for binding in (False, True):
                for batch in BATCHES:
                    for processes in PROCESSES:
                        key = f"bench:quota:{binding}:{batch}:{processes}"
                        runs = pool.map(worker, [(port, key, batch, binding)] * processes)
                        decisions = sum(run["decisions"] for run in runs)
                        admitted = sum(run["admitted"] for run in runs)
                        calls = sum(run["calls"] for run in runs)
                        if binding:
                            times = [t for run in runs for t in run["times"]]
                            bound_rows.append({
                                "batch": batch, "processes": processes,
                                "admitted": admitted, "calls": calls,
                                "worst": worst_window(times, BINDING_WINDOW),
                                "bound": BINDING_LIMIT + processes * batch})
                        else:
                            rows.append({
                                "batch": batch, "processes": processes,
                                "per_second": decisions / SECONDS,
                                "admitted_per_call": admitted / max(calls, 1),
                                "calls_per_decision": calls / max(decisions, 1)})
                        print(f"  batch {batch}, {processes} processes"
                              f"{' (binding)' if binding else ''}: done", file=sys.stderr,
                              flush=True)
        return {"rows": rows, "bound": bound_rows, "rust": measure_rust(port)}
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    arguments = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    module = Path(arguments[0] if arguments else ROOT / "target/release/libredis_ratelimit.so")
    measured = measure_quota(module.resolve())
    if "--json" in sys.argv:
        print(json.dumps(measured))
    else:
        print("\n".join(quota_section(measured)))
