"""Shape (a) and (e) of bench/overload.py: one uvicorn worker running a Starlette app, each
request burning CPU_MS of CPU (and, for the fleet, calling a backend first), protected as
docs/clients.md shows with every option at its default:

    shedder = AsyncLoadShedder(redis.asyncio.Redis(...), "load:svc")
    app.add_middleware(LoadSheddingMiddleware, shedder=shedder, priority="X-Priority")

or by the package's fixed limit (`RateLimitMiddleware`, one GCRA key at the capacity), or
by nothing. `/stats` answers what the bench reads of the instance's own limit.

    python bench/shapes/starlette_service.py PORT REDIS_URL MODE CPU_MS [CAPACITY] [BACKEND]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import redis.asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratelimit_module import AsyncRateLimiter, Throttle
from ratelimit_module.load import AsyncLoadShedder
from ratelimit_module.starlette import LoadSheddingMiddleware, RateLimitMiddleware

port, url, mode, cpu_ms = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
capacity = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
backend = sys.argv[6] if len(sys.argv) > 6 else ""
client = redis.asyncio.Redis.from_url(url)
shedder = AsyncLoadShedder(client, f"load:{port}") if mode == "shed" else None


def burn(millis: float) -> None:
    until = time.thread_time() + millis / 1000
    while time.thread_time() < until:
        pass


async def call_backend() -> None:
    host, _, rest = backend.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(rest.split("/")[0]))
    writer.write(b"GET / HTTP/1.0\r\n\r\n")
    await reader.read()
    writer.close()


async def home(request):  # type: ignore[no-untyped-def]
    if backend:
        await call_backend()
    burn(cpu_ms)
    return PlainTextResponse("ok\n")


async def stats(request):  # type: ignore[no-untyped-def]
    limit = shedder.limit if shedder is not None else None
    body = {"changes": limit.changes if limit else 0,
            "congestions": limit.congestions if limit else 0}
    return PlainTextResponse(json.dumps(body))


app = Starlette(routes=[Route("/", home), Route("/stats", stats)])
if mode == "shed":
    app.add_middleware(LoadSheddingMiddleware, shedder=shedder, priority="X-Priority")
elif mode == "fixed":
    rate = max(1, round(capacity))
    limiter = AsyncRateLimiter(client)
    whole = [Throttle("bench:capacity", max(1, rate // 10), rate, 1)]
    app.add_middleware(RateLimitMiddleware, limiter=limiter, limiters_for=lambda r: whole)

uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
