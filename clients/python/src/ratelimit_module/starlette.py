"""Starlette and FastAPI: a middleware that limits every request, and a dependency that
limits one route; both answer `429 Too Many Requests` with `Retry-After` and the IETF
RateLimit fields, and add the fields to the responses they let through.

    from ratelimit_module import AsyncRateLimiter, Throttle
    from ratelimit_module.starlette import RateLimitMiddleware, rate_limit

    limiter = AsyncRateLimiter(redis.asyncio.Redis())
    per_ip = lambda request: [Throttle(f"rl:{request.client.host}", 4, 1, 60)]
    app.add_middleware(RateLimitMiddleware, limiter=limiter, limiters_for=per_ip)
    # or, on one FastAPI route:
    @app.get("/search", dependencies=[Depends(rate_limit(limiter, per_ip))])
"""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence, Union

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._protocol import Limiter, RateLimit
from .aio import AsyncRateLimiter
from .fields import headers

LimitersFor = Callable[[Request], Union[Sequence[Limiter], Awaitable[Sequence[Limiter]]]]


async def _limiters(limiters_for: LimitersFor, request: Request) -> Sequence[Limiter]:
    limiters = limiters_for(request)
    if hasattr(limiters, "__await__"):
        limiters = await limiters  # type: ignore[misc]
    return limiters  # type: ignore[return-value]


class RateLimitMiddleware:
    """Limits every HTTP request by the limiters `limiters_for(request)` names (all or
    nothing, one call); a request they refuse gets 429 without reaching the app."""

    def __init__(self, app: ASGIApp, limiter: AsyncRateLimiter, limiters_for: LimitersFor,
                 legacy: bool = False) -> None:
        self.app = app
        self.limiter = limiter
        self.limiters_for = limiters_for
        self.legacy = legacy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        limiters = await _limiters(self.limiters_for, request)
        result = await self.limiter.check(limiters)
        fields = headers(result, limiters, legacy=self.legacy)
        if not result.allowed:
            response = PlainTextResponse("Too Many Requests", status_code=429, headers=fields)
            await response(scope, receive, send)
            return

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *(
                    (name.lower().encode(), value.encode()) for name, value in fields.items())]
            await send(message)

        await self.app(scope, receive, send_with_fields)


def rate_limit(limiter: AsyncRateLimiter, limiters_for: LimitersFor,
               legacy: bool = False) -> Callable[..., Awaitable[RateLimit]]:
    """A FastAPI dependency: `Depends(rate_limit(limiter, limiters_for))` on a route, or in
    its `dependencies`; raises 429 (with the fields) when refused, adds the fields to the
    response otherwise, and gives the route the result."""

    async def dependency(request: Request, response: Response) -> RateLimit:
        limiters = await _limiters(limiters_for, request)
        result = await limiter.check(limiters)
        fields = headers(result, limiters, legacy=legacy)
        if not result.allowed:
            raise HTTPException(status_code=429, detail="Too Many Requests", headers=fields)
        for name, value in fields.items():
            response.headers[name] = value
        return result

    return dependency


__all__ = ["RateLimitMiddleware", "rate_limit"]
