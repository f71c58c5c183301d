"""What DELAY saves a client under contention: round trips per admitted request.

Clients all need the same limiter at once. A polling client calls, sleeps the retry_after
it is told and calls again until admitted (upstash's blockUntilReady); a DELAY client calls
once and sleeps the wait it is told. Run by bench/run.py (make bench), or alone on a
server that has the module loaded:

    python3 bench/roundtrips.py PORT
"""

from __future__ import annotations

import sys
import threading
import time

from resp import Resp

CLIENTS = 20
EACH = 5
RATE = 50  # a second, one at a time (no burst)


def _client(port: int, key: str, delay: bool, trips: list[int]) -> None:
    con = Resp(port)
    count = 0
    for _ in range(EACH):
        while True:
            args = ["CL.THROTTLE", key, "0", str(RATE), "1000", "MS"]
            if delay:
                args += ["DELAY", "60000"]
            reply = con.call(*args)
            count += 1
            if reply[0] == 0:
                if delay and reply[5] > 0:
                    time.sleep(reply[5] / 1000)
                break
            time.sleep(max(reply[3], 1) / 1000)
    trips.append(count)


def run_strategy(port: int, key: str, delay: bool) -> tuple[float, float]:
    """Round trips per admitted request, and the seconds until every client is done."""
    trips: list[int] = []
    threads = [threading.Thread(target=_client, args=(port, key, delay, trips))
               for _ in range(CLIENTS)]
    started = time.time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(trips) / (CLIENTS * EACH), time.time() - started


def measure_roundtrips(port: int) -> dict:
    """Both strategies against the server on `port` (the module loaded)."""
    rows = []
    for name, delay in [("Polling (sleep retry_after, call again)", False),
                        ("DELAY (one call, sleep the wait)", True)]:
        trips, seconds = run_strategy(port, f"roundtrips:{delay}", delay)
        rows.append((name, trips, seconds))
    return {"clients": CLIENTS, "each": EACH, "rate": RATE, "rows": rows}


if __name__ == "__main__":
    result = measure_roundtrips(int(sys.argv[1]))
    for name, trips, seconds in result["rows"]:
        print(f"{name}: {trips:.2f} round trips per admitted request, {seconds:.1f} s")
