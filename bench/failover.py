#!/usr/bin/env python3
"""What an unplanned failover costs: admissions a client was told about that the promoted
replica does not remember.

A master with the module and one replica; a client admits requests on one limiter as fast as
it can (one connection, 16 requests a round trip); the master is killed with SIGKILL at a random
moment; the replica is promoted (REPLICAOF NO ONE) and asked how many admissions the limiter
records. Replication is asynchronous, so the last few admissions may not have reached it.
Three ways to run, each over --runs runs (20 by default):

- plain: the client writes and goes on;
- WAIT 1 100: one request at a time, and after each admission the client waits (at most
  100 ms) for the replica to acknowledge it; an admission WAIT acknowledged must never be
  lost;
- min-replicas-to-write 1: the master refuses writes unless a replica is connected (and
  lagging at most 10 s); the client writes and goes on.

Prints a Markdown table; --write puts it in docs/guarantees.md, between the markers there.
Needs redis-server (or $REDIS_SERVER) and the module built (target/release). Only the
standard library is used.

    python3 bench/failover.py [--runs 20] [--write]
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resp import Resp, free_port  # noqa: E402
from run import MODULE, ROOT  # noqa: E402

SERVER = os.environ.get("REDIS_SERVER", "redis-server")
GUARANTEES = ROOT / "docs/guarantees.md"
BEGIN, END = "<!-- failover: begin -->", "<!-- failover: end -->"

# A fixed window of 10^9 s (the next boundary is in 2033) and a limit no run reaches: the
# limiter admits every request, and limit - remaining is what it records.
LIMIT = 1_000_000_000
CALL = ("RL.WINDOW", "failover", LIMIT, 1_000_000_000, 1, "FIXED")
PEEK = ("RL.WINDOW_RO", "failover", LIMIT, 1_000_000_000, 0, "FIXED")

# Requests a round trip, as fast as one connection goes: pipelined, as a client with many
# requests in flight sends them (redis-benchmark -P 16).
DEPTH = 16

MODES = [
    ("plain", f"{DEPTH} requests a round trip (asynchronous replication, the default)", [],
     False),
    ("wait", "One request, then `WAIT 1 100`", [], True),
    ("min-replicas", f"{DEPTH} requests a round trip, `min-replicas-to-write 1`",
     ["--min-replicas-to-write", "1"], False),
]


# Where the replica is: on the same machine (the master process is killed, the kernel still
# delivers what it had written), or 1 ms away with the master's machine lost (what was on
# the link is dropped).
LINKS = [
    (0.0, "Same machine"),
    (0.001, "1 ms away, machine lost"),
]


class DelayedLink:
    """A TCP proxy between a replica and its master that holds every chunk `delay` seconds
    each way, as a link to another machine does. When the master's side closes, what the
    link still holds is dropped: what had not reached the replica when the master died is
    lost, as when the master's machine fails."""

    def __init__(self, master_port: int, delay: float):
        self.delay = delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.master_port = master_port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                replica, _ = self.listener.accept()
            except OSError:
                return
            try:
                master = socket.create_connection(("127.0.0.1", self.master_port))
            except OSError:
                replica.close()  # The master is gone: the replica retries, in vain.
                continue
            for source, target in ((master, replica), (replica, master)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        held: queue.Queue = queue.Queue()

        def deliver() -> None:
            while (item := held.get()) is not None:
                due, chunk = item
                time.sleep(max(0.0, due - time.monotonic()))
                try:
                    target.sendall(chunk)
                except OSError:
                    return

        threading.Thread(target=deliver, daemon=True).start()
        while True:
            try:
                chunk = source.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                # Closed: drop what is held, then close the other side.
                while not held.empty():
                    held.get_nowait()
                held.put(None)
                for end in (source, target):
                    end.close()
                return
            held.put((time.monotonic() + self.delay, chunk))

    def close(self) -> None:
        self.listener.close()


class Node:
    """A redis-server with the module, on a free port, in a temporary directory."""

    def __init__(self, extra: list[str]):
        self.dir = tempfile.mkdtemp(prefix="ratelimit-failover-")
        self.port = free_port()
        self.process = subprocess.Popen(
            [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--dir", self.dir, "--logfile", os.path.join(self.dir, "server.log"),
             "--repl-diskless-sync-delay", "0", "--loadmodule", str(MODULE)] + extra,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while True:
            try:
                self.client = Resp(self.port)
                if self.client.call("PING") == "PONG":
                    return
            except OSError:
                pass
            if time.time() > deadline or self.process.poll() is not None:
                raise SystemExit(f"{SERVER} did not start; see {self.dir}/server.log")
            time.sleep(0.05)

    def wait_for_link(self) -> None:
        deadline = time.time() + 30
        while self.client.info("replication").get("master_link_status") != "up":
            if time.time() > deadline:
                raise SystemExit(f"the replica did not sync; see {self.dir}/server.log")
            time.sleep(0.05)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def one_run(extra: list[str], wait: bool, delay: float) -> tuple[int, int, int]:
    """One failover: (admissions the client saw, of them acknowledged by WAIT, admissions
    the promoted replica records). With a `delay`, the replica's link to the master is a
    [`DelayedLink`]."""
    master = Node(extra)
    link = DelayedLink(master.port, delay) if delay else None
    replica = Node(["--replicaof", "127.0.0.1", str(link.port if link else master.port)])
    try:
        replica.wait_for_link()
        deadline = time.time() + 30
        while "--min-replicas-to-write" in extra and master.client.info("replication").get(
                "min_slaves_good_slaves", "0") == "0":
            if time.time() > deadline:
                raise SystemExit("the master never counted its replica as good")
            time.sleep(0.05)
        client = Resp(master.port)
        # The master streams to a replica once it has acknowledged the initial sync (up to
        # a second after it): the run starts from a replica that is up to date.
        if client.call("SET", "warm-up", 1) != "OK" or client.call("WAIT", 1, 5000) != 1:
            raise SystemExit("the replica did not acknowledge the master's stream")
        seen = acknowledged = 0
        batch = [CALL, ("WAIT", 1, 100)] if wait else [CALL] * DEPTH
        killer = threading.Timer(random.uniform(0.3, 0.8), master.kill)
        killer.start()
        try:
            while True:
                client.send(batch)
                for command in batch:
                    reply = client.read()
                    if isinstance(reply, Exception):
                        raise SystemExit(f"the master refused {command[0]}: {reply}")
                    if command is CALL:
                        seen += reply[0] == 0
                    elif reply >= 1:
                        acknowledged = seen
        except OSError:
            pass  # The master died.
        killer.join()
        # What reached the replica is applied before it is promoted, as a failover's
        # detection (seconds) allows.
        time.sleep(0.2 + delay)
        replica.client.call("REPLICAOF", "NO", "ONE")
        recorded = LIMIT - replica.client.call(*PEEK)[2]
        return seen, acknowledged, recorded
    finally:
        replica.stop()
        master.stop()
        if link:
            link.close()


def table(runs: int) -> str:
    rows = [
        "| Replica | Client and server | Admissions a run | Lost a run: median | Lost: worst | "
        "Acknowledged by `WAIT` and lost |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for delay, where in LINKS:
        for key, name, extra, wait in MODES:
            results = [one_run(extra, wait, delay) for _ in range(runs)]
            lost = [max(seen - recorded, 0) for seen, _, recorded in results]
            acknowledged_lost = max(max(ack - recorded, 0) for _, ack, recorded in results)
            admissions = statistics.median(seen for seen, _, _ in results)
            print(f"  {where}, {key}: lost {lost}", flush=True)
            rows.append(
                f"| {where} | {name} | {admissions:,.0f} | {statistics.median(lost):g} | "
                f"{max(lost)} | " + (f"{acknowledged_lost}" if wait else "n/a") + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--write", action="store_true", help="update docs/guarantees.md")
    args = parser.parse_args()
    if not MODULE.is_file():
        raise SystemExit(f"build the module first: {MODULE} is missing (make build)")
    started = time.time()
    result = table(args.runs)
    version = subprocess.run([SERVER, "--version"], capture_output=True, text=True).stdout.split()
    note = (f"From one run of `python3 bench/failover.py --runs {args.runs}` "
            f"({' '.join(version[:3])}, {os.cpu_count()} cores, "
            f"{(time.time() - started) / 60:.0f} minutes): {args.runs} failovers a row.")
    block = f"{BEGIN}\n{note}\n\n{result}\n{END}"
    print(block)
    if args.write:
        text = GUARANTEES.read_text()
        if BEGIN not in text:
            raise SystemExit(f"{GUARANTEES} has no {BEGIN} marker")
        GUARANTEES.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END),
                                     lambda _: block, text, flags=re.S))


if __name__ == "__main__":
    main()
