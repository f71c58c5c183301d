"""FastAPI apps for the framework tests: slowapi on the `limits` storage, and the package's
own dependency and middleware. REDIS_URL names the server; STRATEGY the slowapi strategy."""

from __future__ import annotations

import os

import redis.asyncio
from fastapi import Depends, FastAPI, Request, Response
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import ratelimit_module.limits_storage  # noqa: F401  (registers ratelimit://)
from ratelimit_module import AsyncRateLimiter, Log
from ratelimit_module.starlette import RateLimitMiddleware, rate_limit

REDIS_URL = os.environ["REDIS_URL"]

# slowapi, unchanged but for its storage URI.
limiter = Limiter(key_func=get_remote_address,
                  storage_uri=REDIS_URL.replace("redis://", "ratelimit://", 1),
                  strategy=os.environ.get("STRATEGY", "moving-window"), headers_enabled=True)
app = FastAPI()
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)


@app.get("/slowapi")
@limiter.limit("5/minute")
async def slowapi_route(request: Request, response: Response) -> dict:
    return {"ok": True}


# The package's dependency, on one route.
ours = AsyncRateLimiter(redis.asyncio.Redis.from_url(REDIS_URL))


def per_ip(request: Request) -> list:
    return [Log(f"dependency:{request.client.host}", 5, 60, "minute")]


@app.get("/dependency", dependencies=[Depends(rate_limit(ours, per_ip))])
async def dependency_route() -> dict:
    return {"ok": True}


# The package's middleware, on a whole Starlette app.
async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


middleware_app = Starlette(routes=[Route("/", hello)])
middleware_app.add_middleware(
    RateLimitMiddleware, limiter=ours,
    limiters_for=lambda request: [Log(f"middleware:{request.client.host}", 5, 60, "minute")])
