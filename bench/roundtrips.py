"""What DELAY saves a client under contention: round trips per admitted request.

Clients all need the same limiter at once. A polling client calls, sleeps the retry_after
it is told and calls again until admitted (upstash's blockUntilReady); a DELAY client calls
once and sleeps the wait it is told. Run by bench/run.py (make bench), or alone:

    python3 bench/roundtrips.py [path/to/libredis_ratelimit.so]
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

CLIENTS = 20
EACH = 5
RATE = 50  # a second, one at a time (no burst)


def _client(port: int, key: str, delay: bool, trips: list[int]) -> None:
    # Imported here: bench/run.py imports this module, and the client lives there.
    from run import Resp

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


def measure_roundtrips(module: Path) -> dict:
    from run import Server

    server = Server(module=module)
    try:
        rows = []
        for name, delay in [("Polling (sleep retry_after, call again)", False),
                            ("DELAY (one call, sleep the wait)", True)]:
            trips, seconds = run_strategy(server.port, f"roundtrips:{delay}", delay)
            rows.append((name, trips, seconds))
        return {"clients": CLIENTS, "each": EACH, "rate": RATE, "rows": rows}
    finally:
        server.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    default = Path(__file__).resolve().parent.parent / "target/release/libredis_ratelimit.so"
    result = measure_roundtrips(Path(sys.argv[1]) if len(sys.argv) > 1 else default)
    for name, trips, seconds in result["rows"]:
        print(f"{name}: {trips:.2f} round trips per admitted request, {seconds:.1f} s")
