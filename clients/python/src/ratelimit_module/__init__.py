"""The Python client of the redis-ratelimit module: typed results for every command and
option, sync and async, and the IETF RateLimit fields. The framework adapters live in
`ratelimit_module.limits_storage` (limits, so slowapi and Flask-Limiter) and
`ratelimit_module.starlette` (Starlette and FastAPI). `SharedLists` reads and writes the
lists the nginx package shares (docs/clients.md#shared-lists)."""

from ._protocol import (
    Lease,
    Limiter,
    Load,
    LoadStanding,
    Log,
    LogCounts,
    RateLimit,
    Slots,
    Throttle,
    TopKey,
    Window,
    WindowCounts,
)
from ._resilience import ServerUnavailable
from ._steps import CheckOptions
from .aio import AsyncRateLimiter
from .client import RateLimiter
from .fields import headers
from .lists import AsyncSharedLists, SharedLists
from .load import AsyncLoadShedder, LoadShedder
from .quota import AsyncQuota, Quota

__all__ = [
    "AsyncLoadShedder",
    "AsyncQuota",
    "AsyncRateLimiter",
    "AsyncSharedLists",
    "CheckOptions",
    "Lease",
    "Limiter",
    "Load",
    "Slots",
    "LoadShedder",
    "LoadStanding",
    "Log",
    "LogCounts",
    "Quota",
    "RateLimit",
    "RateLimiter",
    "ServerUnavailable",
    "SharedLists",
    "Throttle",
    "TopKey",
    "Window",
    "WindowCounts",
    "headers",
]
__version__ = "0.3.0"
