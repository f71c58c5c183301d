"""A small web service that rate-limits each client IP with CL.THROTTLE, and answers 429
with Retry-After and the RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset headers.

    pip install -r examples/python/requirements.txt
    python examples/http/server.py --port 8080 --burst 4 --count 1 --period 60
    curl -i http://127.0.0.1:8080/

Every answer carries the three RateLimit headers; a refused request gets 429 and Retry-After.
Times are asked of the module in milliseconds and rounded up to whole seconds, so a client
that waits Retry-After is never early.
"""

from __future__ import annotations

import argparse
import logging
import math
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis


def seconds(milliseconds: int) -> int:
    """Whole seconds, rounded up: a client waiting this long is never early."""
    return math.ceil(milliseconds / 1000)


def make_handler(client: redis.Redis, burst: int, count: int, period_ms: int):
    class RateLimitedHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            key = f"ratelimit:ip:{self.client_address[0]}"
            try:
                limited, limit, remaining, retry_after, reset_after = client.execute_command(
                    "CL.THROTTLE", key, burst, count, period_ms, 1, "MS")
            except redis.RedisError as error:
                # Fail open: an unavailable limiter must not take the service down with it.
                logging.warning("rate limiter unavailable, request let through: %s", error)
                self.answer(200, b"hello\n", {})
                return
            headers = {
                "RateLimit-Limit": str(limit),
                "RateLimit-Remaining": str(remaining),
                "RateLimit-Reset": str(seconds(reset_after)),
            }
            if limited:
                headers["Retry-After"] = str(seconds(retry_after))
                self.answer(429, b"too many requests\n", headers)
            else:
                self.answer(200, b"hello\n", headers)

        def answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
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
    parser.add_argument("--burst", type=int, default=4, help="max_burst: bursts of burst + 1")
    parser.add_argument("--count", type=int, default=1, help="requests per period")
    parser.add_argument("--period", type=int, default=60, help="seconds")
    options = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    client = redis.Redis.from_url(options.redis_url, socket_timeout=1)
    handler = make_handler(client, options.burst, options.count, options.period * 1000)
    server = ThreadingHTTPServer((options.host, options.port), handler)
    logging.info("listening on http://%s:%d/", options.host, options.port)
    server.serve_forever()


if __name__ == "__main__":
    main()
