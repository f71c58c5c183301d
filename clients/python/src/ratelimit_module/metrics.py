"""Prometheus metrics for the clients (optional: needs `prometheus_client`), the names the
nginx package serves:

    ratelimit_decisions_total{policy, outcome}   decisions by policy (the limiters' names,
        joined by "+") and outcome: allowed, delayed, refused, deny_cache, failed_open,
        failed_closed, quota (spent from a quota lease), shadow
    ratelimit_server_call_duration_seconds        the latency of each call to the server

    from ratelimit_module.metrics import PrometheusMetrics
    limiter = RateLimiter(client, metrics=PrometheusMetrics())
    # then serve prometheus_client's registry (make_asgi_app, make_wsgi_app, start_http_server)
"""

from __future__ import annotations

from typing import Any, Optional

# The server call's latency buckets, in seconds: the nginx package's.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


# The metrics made in each registry: a registry takes each name once, and every
# PrometheusMetrics of one registry counts into the same ones.
_MADE: dict[int, tuple[Any, Any]] = {}


class PrometheusMetrics:
    """The decisions and the server calls of the limiters given it, in `registry`
    (prometheus_client's default registry unless given)."""

    def __init__(self, registry: Optional[Any] = None):
        from prometheus_client import REGISTRY, Counter, Histogram

        registry = REGISTRY if registry is None else registry
        if id(registry) not in _MADE:
            _MADE[id(registry)] = (
                Counter(
                    "ratelimit_decisions_total",
                    "Rate-limiting decisions, by policy and outcome.",
                    ["policy", "outcome"],
                    registry=registry,
                ),
                Histogram(
                    "ratelimit_server_call_duration_seconds",
                    "The latency of each call to the rate limiter's server.",
                    buckets=BUCKETS,
                    registry=registry,
                ),
            )
        self.decisions, self.latency = _MADE[id(registry)]

    def decision(self, policy: str, outcome: str) -> None:
        self.decisions.labels(policy=policy, outcome=outcome).inc()

    def server_call(self, seconds: float) -> None:
        self.latency.observe(seconds)
