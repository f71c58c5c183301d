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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis

from ratelimit_module import Limiter, Log, RateLimiter, Throttle, Window, headers


def parse_policy(text: str) -> tuple[str, str, list[str]]:
    """NAME=KIND:arg:...: the name, the kind and its arguments."""
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


def parse_shape(text: str) -> tuple[str, float]:
    """PATH=SECONDS: a route that waits up to SECONDS for its turn."""
    path, _, seconds = text.partition("=")
    try:
        return path, float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a shaped route: {text!r}") from None


def make_handler(client: redis.Redis, policies, legacy: bool, shaped: dict[str, float]):
    limiter = RateLimiter(client)

    class RateLimitedHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
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
                self.answer(200, b"hello\n", {})
                return
            fields = headers(result, limiters, legacy=legacy)
            if result.allowed:
                self.answer(200, b"hello\n", fields)
            else:
                self.answer(429, b"too many requests\n", fields)

        def answer(self, status: int, body: bytes, fields: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            for name, value in fields.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base's name)
            logging.info("%s %s", self.client_address[0], format % args)

    return RateLimitedHandler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument("--policy", type=parse_policy, action="append",
                        help="NAME=KIND:args (repeatable); default burst=THROTTLE:4:1:60")
    parser.add_argument("--legacy-headers", action="store_true",
                        help="also send RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset")
    parser.add_argument("--shape", type=parse_shape, action="append", default=[],
                        help="PATH=SECONDS (repeatable): requests to PATH wait up to SECONDS "
                             "for their turn instead of getting 429 at once")
    options = parser.parse_args()
    policies = options.policy or [parse_policy("burst=THROTTLE:4:1:60")]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    client = redis.Redis.from_url(options.redis_url, socket_timeout=1)
    handler = make_handler(client, policies, options.legacy_headers, dict(options.shape))
    server = ThreadingHTTPServer((options.host, options.port), handler)
    logging.info("listening on http://%s:%d/", options.host, options.port)
    server.serve_forever()


if __name__ == "__main__":
    main()
