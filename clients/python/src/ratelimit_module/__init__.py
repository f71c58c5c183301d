"""The Python client of the redis-ratelimit module: typed results for every command and
option, sync and async, and the IETF RateLimit fields. The framework adapters live in
`ratelimit_module.limits_storage` (limits, so slowapi and Flask-Limiter) and
`ratelimit_module.starlette` (Starlette and FastAPI)."""

from ._protocol import Lease, Limiter, Log, LogCounts, RateLimit, Throttle, Window, WindowCounts
from .aio import AsyncRateLimiter
from .client import RateLimiter
from .fields import headers

__all__ = ["AsyncRateLimiter", "Lease", "Limiter", "Log", "LogCounts", "RateLimit",
           "RateLimiter", "Throttle", "Window", "WindowCounts", "headers"]
__version__ = "0.3.0"
