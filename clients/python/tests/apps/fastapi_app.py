"""FastAPI apps for the framework tests: slowapi on the `limits` storage, and the package's
own dependency and middleware. REDIS_URL names the server; STRATEGY the slowapi strategy;
with SWALLOW set, slowapi lets a request through when the storage fails (its own
`swallow_errors`), each call bounded by 0.2 s."""

from __future__ import annotations

import os

import redis.asyncio
from fastapi import Depends, FastAPI, Request, Response
from prometheus_client import make_asgi_app
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

import ratelimit_module.limits_storage  # noqa: F401  (registers ratelimit://)
from ratelimit_module import AsyncLoadShedder, AsyncRateLimiter, Log
from ratelimit_module.metrics import PrometheusMetrics
from ratelimit_module.starlette import LoadSheddingMiddleware, RateLimitMiddleware, rate_limit

REDIS_URL = os.environ["REDIS_URL"]

# slowapi, unchanged but for its storage URI.
SWALLOW = bool(os.environ.get("SWALLOW"))
# The decisions of every limiter below and of slowapi's storage, served on /metrics.
METRICS = PrometheusMetrics()
limiter = Limiter(
    key_func=get_remote_address,
    storage_uri=REDIS_URL.replace("redis://", "ratelimit://", 1),
    strategy=os.environ.get("STRATEGY", "moving-window"),
    headers_enabled=True,
    swallow_errors=SWALLOW,
    storage_options={
        "metrics": METRICS,
        **({"socket_timeout": 0.2, "socket_connect_timeout": 0.2} if SWALLOW else {}),
    },
)
app = FastAPI()
app.mount("/metrics", make_asgi_app())
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)


@app.middleware("http")
async def no_limit_yet(request: Request, call_next):
    # slowapi 0.1.9 reads the request's limit for its headers even when it swallowed the
    # storage's error and set none: without this, `swallow_errors` answers 500.
    request.state.view_rate_limit = None
    return await call_next(request)


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


# Metrics, and shadow mode: /metered refuses its third request a minute; /shadowed would
# refuse its second, and lets it through.
metered = AsyncRateLimiter(redis.asyncio.Redis.from_url(REDIS_URL), metrics=METRICS)


@app.get(
    "/metered",
    dependencies=[
        Depends(
            rate_limit(
                metered, lambda request: [Log(f"metered:{request.client.host}", 2, 60, "metered")]
            )
        )
    ],
)
async def metered_route() -> dict:
    return {"ok": True}


@app.get(
    "/shadowed",
    dependencies=[
        Depends(
            rate_limit(
                metered,
                lambda request: [Log(f"shadowed:{request.client.host}", 1, 60, "shadowed")],
                shadow=True,
            )
        )
    ],
)
async def shadowed_route() -> dict:
    return {"ok": True}


# When the server fails: each call bounded by 0.2 s, then a cool-down of 0.5 s without
# asking, deciding by on_error.
failing = redis.asyncio.Redis.from_url(REDIS_URL, socket_timeout=0.2, socket_connect_timeout=0.2)
allowing = AsyncRateLimiter(failing, on_error="allow", cooldown=0.5)
denying = AsyncRateLimiter(failing, on_error="deny", cooldown=0.5)


@app.get("/allow", dependencies=[Depends(rate_limit(allowing, per_ip))])
async def allow_route() -> dict:
    return {"ok": True}


@app.get("/deny", dependencies=[Depends(rate_limit(denying, per_ip))])
async def deny_route() -> dict:
    return {"ok": True}


# The package's middleware, on a whole Starlette app.
async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


middleware_app = Starlette(routes=[Route("/", hello)])
middleware_app.add_middleware(
    RateLimitMiddleware,
    limiter=ours,
    limiters_for=lambda request: [Log(f"middleware:{request.client.host}", 5, 60, "minute")],
)

deny_middleware_app = Starlette(routes=[Route("/", hello)])
deny_middleware_app.add_middleware(
    RateLimitMiddleware,
    limiter=denying,
    limiters_for=lambda request: [Log(f"middleware:{request.client.host}", 1000, 60, "minute")],
)


# Graded limiting by load: the service "load:http", which this app reports to every 0.1 s
# with its own signals, and sheds by priority (X-Priority); its metrics on /metrics; the same
# in shadow mode.
def _shedding_app(shadow: bool) -> Starlette:
    shedder = AsyncLoadShedder(
        redis.asyncio.Redis.from_url(REDIS_URL),
        "load:http",
        instance="shadow" if shadow else "uvicorn",
        interval=0.1,
        shadow=shadow,
        metrics=METRICS,
    )

    async def item(request: Request) -> PlainTextResponse:
        return PlainTextResponse(request.path_params["number"])

    async def routes(request: Request) -> PlainTextResponse:
        """The routes whose latencies the shedder's local limit keeps apart, one a line."""
        return PlainTextResponse("".join(f"{route}\n" for route in shedder.limit.routes))

    shedding = Starlette(
        routes=[
            Route("/", hello),
            Route("/items/{number}", item),
            Route("/routes", routes),
            Mount("/metrics", make_asgi_app()),
        ]
    )
    shedding.add_middleware(LoadSheddingMiddleware, shedder=shedder, priority="X-Priority")
    return shedding


shedding_app = _shedding_app(shadow=False)
shadow_shedding_app = _shedding_app(shadow=True)
