"""A small web service that rate-limits each client IP with one or several policies at once,
and answers with the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11):

    RateLimit-Policy: "burst";q=5;w=300, "daily";q=1000;w=86400
    RateLimit: "burst";r=4;t=60, "daily";r=999;t=86400

and `429 Too Many Requests` with `Retry-After` when any policy refuses. Several policies are
checked in one RL.ALL call: a request is counted by all of them or by none.

    make examples-deps
    target/examples-venv/bin/python examples/http/server.py --port 8080 \\
        --policy burst=THROTTLE:4:1:60 --policy daily=WINDOW:1000:86400
    curl -i http://127.0.0.1:8080/

Graded limiting by load (docs/load.md): `--load-service KEY` reports this process's health
under the service's key once a second and sheds by the priority in each request's
`X-Priority` header (critical_plus, critical, sheddable_plus, sheddable), 503 with
Retry-After. For experiments with a service of bounded capacity (what `make bench`'s overload
run starts): `--cpu-ms MS` makes each request cost MS milliseconds of CPU, and `--backend URL`
makes it call a backend first, reporting the backend's mean latency as the factor
`backend_ms` (declare it in the policy: FACTOR backend_ms MAX). `--policy none` limits
nothing; `--quiet` logs no request.

A policy is NAME=THROTTLE:max_burst:count:period, NAME=WINDOW:limit:window[:FIXED|SLIDING|
BUCKETS:n] or NAME=LOG:limit:window, times in seconds. `--shape PATH=SECONDS` shapes one
route instead of refusing at once: a request to PATH that does not fit waits for its turn
(the handler sleeps the wait the module gives: the package's `acquire`, RL's DELAY), up to SECONDS, and only a request
whose turn is further away gets 429. `--legacy-headers` adds the older
RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset fields. If Redis cannot be reached,
requests are let through (fail open) and a warning is logged.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

import redis

from ratelimit_module import Limiter, Log, RateLimiter, Throttle, Window, headers
from ratelimit_module.load import LoadShedder


def parse_policy(text: str) -> Optional[tuple[str, str, list[str]]]:
    """NAME=KIND:arg:...: the name, the kind and its arguments; `none`: no policy."""
    if text == "none":
        return None
    name, _, spec = text.partition("=")
    kind, *arguments = spec.split(":")
    if not name or kind.upper() not in ("THROTTLE", "WINDOW", "LOG"):
        raise argparse.ArgumentTypeError(f"not a policy: {text!r}")
    return name, kind.upper(), arguments


def limiters_for(client_ip: str, policies: list[tuple[str, str, list[str]]]) -> list[Limiter]:
    """The client's limiters: one key per policy, all in the client's hash slot."""
    limiters: list[Limiter] = []
    for name, kind, arguments in policies:
        key = f"ratelimit:{{{client_ip}}}:{name}"
        if kind == "THROTTLE":
            max_burst, count, period = arguments
            limiters.append(Throttle(key, int(max_burst), int(count), float(period), name))
        elif kind == "WINDOW":
            limit, window, *algorithm = arguments
            limiters.append(Window(key, int(limit), float(window),
                                   " ".join(algorithm) or "SLIDING", name))
        else:
            limit, window = arguments
            limiters.append(Log(key, int(limit), float(window), name))
    return limiters


class Backend:
    """Calls the backend and keeps the mean latency of its calls since the last report."""

    def __init__(self, url: str):
        self.url, self.lock = url, threading.Lock()
        self.total_ms, self.calls = 0.0, 0

    def call(self) -> None:
        started = time.perf_counter()
        with urllib.request.urlopen(self.url, timeout=10) as response:
            response.read()
        with self.lock:
            self.total_ms += (time.perf_counter() - started) * 1000
            self.calls += 1

    def factors(self) -> dict[str, float]:
        """`backend_ms`, the interval's mean; then the interval starts again."""
        with self.lock:
            mean = self.total_ms / self.calls if self.calls else None
            self.total_ms, self.calls = 0.0, 0
        return {} if mean is None else {"backend_ms": mean}


def burn(cpu_ms: float) -> None:
    """Costs `cpu_ms` milliseconds of this thread's CPU."""
    until = time.thread_time() + cpu_ms / 1000
    while time.thread_time() < until:
        pass


def parse_shape(text: str) -> tuple[str, float]:
    """PATH=SECONDS: a route that waits up to SECONDS for its turn."""
    path, _, seconds = text.partition("=")
    try:
        return path, float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a shaped route: {text!r}") from None


def make_handler(client: redis.Redis, policies, legacy: bool, shaped: dict[str, float],
                 shedder: Optional[LoadShedder] = None, cpu_ms: float = 0.0,
                 backend: Optional[Backend] = None, quiet: bool = False):
    limiter = RateLimiter(client)

    class RateLimitedHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if shedder is None:
                self.serve()
                return
            ticket = shedder.admit(self.headers.get("X-Priority"))
            if ticket is None:
                retry = {"Retry-After": str(max(1, round(shedder.retry_after)))}
                self.answer(503, b"overloaded\n", retry)
                return
            status = 500
            try:
                status = self.serve()
            finally:
                shedder.finished(ticket, status)

        def serve(self) -> int:
            """Limits, then does the request's work; the status answered."""
            if not policies:
                return self.work({})
            limiters = limiters_for(self.client_address[0], policies)
            try:
                if self.path in shaped:
                    # Wait for the turn the module gives, up to the bound; then answer.
                    result = limiter.acquire(limiters, timeout=shaped[self.path])
                else:
                    result = limiter.check(limiters)
            except redis.RedisError as error:
                # Fail open: an unavailable limiter must not take the service down with it.
                logging.warning("rate limiter unavailable, request let through: %s", error)
                return self.work({})
            fields = headers(result, limiters, legacy=legacy)
            if result.allowed:
                return self.work(fields)
            self.answer(429, b"too many requests\n", fields)
            return 429

        def work(self, fields: dict[str, str]) -> int:
            """The request's own work (a backend call, CPU), then 200."""
            if backend is not None:
                try:
                    backend.call()
                except OSError as error:
                    self.answer(502, f"backend: {error}\n".encode(), {})
                    return 502
            if cpu_ms:
                burn(cpu_ms)
            self.answer(200, b"hello\n", fields)
            return 200

        def answer(self, status: int, body: bytes, fields: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            for name, value in fields.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base's name)
            if not quiet:
                logging.info("%s %s", self.client_address[0], format % args)

    return RateLimitedHandler


class Server(ThreadingHTTPServer):
    # Under overload connections wait to be accepted: a long queue, not refused connections.
    request_queue_size = 1024

    def handle_error(self, request, client_address) -> None:
        # A client that gave up (timed out) closed its connection: not the service's error.
        logging.debug("connection from %s ended early", client_address[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument("--policy", type=parse_policy, action="append",
                        help="NAME=KIND:args (repeatable), or none; default "
                             "burst=THROTTLE:4:1:60")
    parser.add_argument("--legacy-headers", action="store_true",
                        help="also send RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset")
    parser.add_argument("--shape", type=parse_shape, action="append", default=[],
                        help="PATH=SECONDS (repeatable): requests to PATH wait up to SECONDS "
                             "for their turn instead of getting 429 at once")
    parser.add_argument("--load-service", metavar="KEY",
                        help="report this process's load under KEY and shed by X-Priority")
    parser.add_argument("--cpu-ms", type=float, default=0.0,
                        help="each request costs this many milliseconds of CPU")
    parser.add_argument("--backend", metavar="URL", help="each request calls URL first")
    parser.add_argument("--quiet", action="store_true", help="log no request")
    options = parser.parse_args()
    policies = options.policy or [parse_policy("burst=THROTTLE:4:1:60")]
    policies = [policy for policy in policies if policy is not None]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    client = redis.Redis.from_url(options.redis_url, socket_timeout=1)
    backend = Backend(options.backend) if options.backend else None
    shedder = None
    if options.load_service:
        shedder = LoadShedder(client, options.load_service,
                              factors=backend.factors if backend else None).start()
    handler = make_handler(client, policies, options.legacy_headers, dict(options.shape),
                           shedder, options.cpu_ms, backend, options.quiet)
    server = Server((options.host, options.port), handler)
    logging.info("listening on http://%s:%d/", options.host, options.port)
    server.serve_forever()


if __name__ == "__main__":
    main()
