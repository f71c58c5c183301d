"""A FastAPI service as docs/clients.md sets it up, both middlewares at their defaults: load
shedding on the whole app, a rate limit on one route (`/limited`), none on `/open`.
REDIS_URL names the server, SERVICE the shedder's key, ON_ERROR the limiter's failure policy
("raise", the default, "deny" or "allow"). tests/clients.rs freezes the server under it: nothing may
be shed once the server is back."""

from __future__ import annotations

import os

import redis.asyncio
from fastapi import Depends, FastAPI, Request

from ratelimit_module import AsyncLoadShedder, AsyncRateLimiter, Throttle
from ratelimit_module.starlette import LoadSheddingMiddleware, rate_limit

client = redis.asyncio.Redis.from_url(os.environ["REDIS_URL"])
limiter = AsyncRateLimiter(client, on_error=os.environ.get("ON_ERROR", "raise"))
app = FastAPI()
app.add_middleware(LoadSheddingMiddleware, shedder=AsyncLoadShedder(client, os.environ["SERVICE"]))


def per_ip(request: Request) -> list:
    return [Throttle(f"outage:{request.client.host}", 100, 100, 1)]


@app.get("/limited", dependencies=[Depends(rate_limit(limiter, per_ip))])
async def limited() -> dict:
    return {"ok": True}


@app.get("/open")
async def open_route() -> dict:
    return {"ok": True}
