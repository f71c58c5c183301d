"""A worker pool sharing a concurrency limit through RL.ACQUIRE: at most `limit` jobs of one
tenant run at once, across every worker process, and a worker that dies mid-job loses its
slot when its lease ends, without anyone cleaning up.

    make examples-deps
    target/examples-venv/bin/python examples/python/worker_pool.py
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import redis

from ratelimit_module import RateLimiter


@contextlib.contextmanager
def slot(limiter: RateLimiter, key: str, limit: int, lease: float) -> Iterator[int | None]:
    """Holds one of `limit` slots while the block runs: yields the lease id, or None when
    every slot is taken. A heartbeat renews the lease while the work goes on, so `lease`
    only needs to cover a heartbeat's interval, not the whole job."""
    taken = limiter.acquire_lease(key, limit, lease)
    if not taken.allowed:
        yield None
        return
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(lease / 3):
            if not limiter.renew_lease(key, taken.id, lease):
                return  # The lease ended (the slot was lost): the job should stop.

    beating = threading.Thread(target=heartbeat, daemon=True)
    beating.start()
    try:
        yield taken.id
    finally:
        done.set()
        beating.join()
        limiter.release_lease(key, taken.id)


def main() -> None:
    client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    limiter = RateLimiter(client)
    key = f"exports:tenant:{os.getpid()}"
    running, most, lock = 0, 0, threading.Lock()
    outcomes: list[str] = []
    # Every worker asks before any job ends, so the run is the same every time.
    all_asked = threading.Barrier(5)

    def worker(job: int) -> None:
        nonlocal running, most
        with slot(limiter, key, limit=2, lease=2.0) as lease:
            all_asked.wait()
            if lease is None:
                outcomes.append("refused")
                return
            with lock:
                running += 1
                most = max(most, running)
            time.sleep(0.3)  # the export
            with lock:
                running -= 1
            outcomes.append("ran")

    threads = [threading.Thread(target=worker, args=(job,)) for job in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"5 jobs at once, 2 slots: {outcomes.count('ran')} ran, "
          f"{outcomes.count('refused')} refused, at most {most} at a time")
    print(f"slots free afterwards: {limiter.acquire_lease(key, 2, 1, quantity=0).result.remaining}")


if __name__ == "__main__":
    main()
