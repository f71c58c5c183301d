"""Starlette and FastAPI: a middleware that limits every request, and a dependency that
limits one route; both answer `429 Too Many Requests` with `Retry-After` and the IETF
RateLimit fields, and add the fields to the responses they let through. When the server
fails and the limiter's `on_error` is "deny", they answer `503 Service Unavailable` with
`Retry-After` (when the server is asked again); with "allow", the request goes through
without fields. With `shadow=True` (or a limiter made with it), a refused request goes
through, counted as `shadow` and logged.

    from ratelimit_module import AsyncRateLimiter, Throttle
    from ratelimit_module.starlette import RateLimitMiddleware, rate_limit

    limiter = AsyncRateLimiter(redis.asyncio.Redis())
    per_ip = lambda request: [Throttle(f"rl:{request.client.host}", 4, 1, 60)]
    app.add_middleware(RateLimitMiddleware, limiter=limiter, limiters_for=per_ip)
    # or, on one FastAPI route:
    @app.get("/search", dependencies=[Depends(rate_limit(limiter, per_ip))])
"""

from __future__ import annotations

from functools import partial
from typing import Any, Awaitable, Callable, Optional, Sequence, Union

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._answered import watching
from ._protocol import Limiter, RateLimit
from .aio import AsyncRateLimiter
from .fields import headers, seconds


def _refusal(result: RateLimit, limiters: Sequence[Limiter], legacy: bool) -> tuple[int, dict]:
    """The status and fields of a refused request: 429 with the fields; 503 when the server
    failed and `on_error` refused, or when a `Load` gate shed it (the service is
    overloaded, whoever asks)."""
    if result.failed or result.shed_level:
        return 503, {"Retry-After": str(max(1, seconds(result.retry_after or 0)))}
    return 429, headers(result, limiters, legacy=legacy)


LimitersFor = Callable[[Request], Union[Sequence[Limiter], Awaitable[Sequence[Limiter]]]]


async def _limiters(limiters_for: LimitersFor, request: Request) -> Sequence[Limiter]:
    limiters = limiters_for(request)
    if hasattr(limiters, "__await__"):
        limiters = await limiters  # type: ignore[misc]
    return limiters  # type: ignore[return-value]


class RateLimitMiddleware:
    """Limits every HTTP request by the limiters `limiters_for(request)` names (all or
    nothing, one call); a request they refuse gets 429 without reaching the app."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: AsyncRateLimiter,
        limiters_for: LimitersFor,
        legacy: bool = False,
        shadow: Optional[bool] = None,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.limiters_for = limiters_for
        self.legacy = legacy
        self.shadow = shadow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        limiters = await _limiters(self.limiters_for, request)
        result = await self.limiter.check(limiters, shadow=self.shadow)
        if not result.allowed:
            status, fields = _refusal(result, limiters, self.legacy)
            text = "Too Many Requests" if status == 429 else "Service Unavailable"
            response = PlainTextResponse(text, status_code=status, headers=fields)
            await response(scope, receive, send)
            return
        if result.failed:
            await self.app(scope, receive, send)
            return
        fields = headers(result, limiters, legacy=self.legacy)

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"],
                    *((name.lower().encode(), value.encode()) for name, value in fields.items()),
                ]
            await send(message)

        await self.app(scope, receive, send_with_fields)


def rate_limit(
    limiter: AsyncRateLimiter,
    limiters_for: LimitersFor,
    legacy: bool = False,
    shadow: Optional[bool] = None,
) -> Callable[..., Awaitable[RateLimit]]:
    """A FastAPI dependency: `Depends(rate_limit(limiter, limiters_for))` on a route, or in
    its `dependencies`; raises 429 (with the fields) when refused, adds the fields to the
    response otherwise, and gives the route the result."""

    async def dependency(request: Request, response: Response) -> RateLimit:
        limiters = await _limiters(limiters_for, request)
        result = await limiter.check(limiters, shadow=shadow)
        if not result.allowed:
            status, fields = _refusal(result, limiters, legacy)
            detail = "Too Many Requests" if status == 429 else "Service Unavailable"
            raise HTTPException(status_code=status, detail=detail, headers=fields)
        if not result.failed:
            for name, value in headers(result, limiters, legacy=legacy).items():
                response.headers[name] = value
        return result

    return dependency


class LoadSheddingMiddleware:
    """Sheds requests by load (`AsyncLoadShedder`, docs/load.md): a request that the
    instance's own limit or the service's level does not admit gets 503 with `Retry-After`
    without reaching the app; every request admitted is counted in the shedder's limit and
    signals (in flight, latency, status). `priority` is a header's name (`X-Priority`) or a
    function of the request. The shedder starts reporting at the first request.

    A refusal costs the loop as little as ASGI allows: the header is read from the scope's
    raw headers and the 503 sent as two messages, with no request or response object (the
    server has parsed the request by then). Add it last (`add_middleware`), so that it is the
    outermost of the app's middleware and nothing before it runs for a refused request."""

    def __init__(self, app: ASGIApp, shedder: Any, priority: Any = "X-Priority") -> None:
        self.app, self.shedder = app, shedder
        self.header: Optional[bytes] = None
        self.priority: Optional[Callable[[Request], Any]] = None
        if callable(priority):
            self.priority = priority
        else:
            self.header = str(priority).lower().encode("latin-1")

    def _priority_in(self, scope: Scope) -> Optional[str]:
        for name, value in scope["headers"]:
            if name == self.header:
                return value.decode("latin-1")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.shedder.start()
        if self.priority is None:
            priority = self._priority_in(scope)
        else:
            priority = self.priority(Request(scope))
            if hasattr(priority, "__await__"):
                priority = await priority
        ticket = self.shedder.admit(priority)
        if ticket is None:
            retry = str(max(1, seconds(self.shedder.retry_after))).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", b"19"),
                        (b"retry-after", retry),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b"Service Unavailable"})
            return
        status = [500]

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        with watching(partial(self.shedder.waiting, ticket)) as request:
            try:
                await self.app(scope, receive, recording_send)
            finally:
                self.shedder.finished(ticket, status[0], request.own, route_of(scope))


def route_of(scope: Scope) -> str:
    """The route a request took, for the local limit to keep its latency apart: its method and
    the pattern the router matched (FastAPI's route, or Starlette's endpoint), read once the app
    answered; the path itself where no router matched."""
    route = scope.get("route")
    pattern = getattr(route, "path_format", None) or getattr(route, "path", None)
    if pattern is None:
        endpoint = scope.get("endpoint")
        pattern = getattr(endpoint, "__qualname__", None) or scope.get("path", "")
    return f"{scope.get('method', '')} {pattern}"


__all__ = ["LoadSheddingMiddleware", "RateLimitMiddleware", "rate_limit"]
