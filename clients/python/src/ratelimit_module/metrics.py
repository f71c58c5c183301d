"""Prometheus metrics for the clients (optional: needs `prometheus_client`), the names the
nginx package serves:

    ratelimit_decisions_total{policy, outcome}   decisions by policy (the limiters' names,
        joined by "+") and outcome: allowed, delayed, refused, shed (by a Load gate),
        deny_cache, failed_open, failed_closed, quota (spent from a quota lease), shadow
    ratelimit_server_call_duration_seconds        the latency of each call to the server
    ratelimit_load_level{service}                 a service's load level, from its reports
    ratelimit_load_decisions_total{service, priority, outcome}   the load shedder's decisions:
        admitted, shed, shadow (would have been shed)

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
_MADE: dict[int, tuple[Any, Any, Any, Any, Any]] = {}


class PrometheusMetrics:
    """The decisions and the server calls of the limiters given it, in `registry`
    (prometheus_client's default registry unless given)."""

    def __init__(self, registry: Optional[Any] = None):
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        registry = REGISTRY if registry is None else registry
        made = _MADE.get(id(registry))
        # The registry kept beside its metrics: a freed registry's id may be a new one's.
        if made is None or made[0] is not registry:
            _MADE[id(registry)] = (
                registry,
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
                Gauge(
                    "ratelimit_load_level",
                    "A service's load level, as its last report answered.",
                    ["service"],
                    registry=registry,
                ),
                Counter(
                    "ratelimit_load_decisions_total",
                    "The load shedder's decisions, by service, priority and outcome.",
                    ["service", "priority", "outcome"],
                    registry=registry,
                ),
            )
        _, self.decisions, self.latency, self.level, self.load = _MADE[id(registry)]

    def decision(self, policy: str, outcome: str) -> None:
        self.decisions.labels(policy=policy, outcome=outcome).inc()

    def server_call(self, seconds: float) -> None:
        self.latency.observe(seconds)

    def load_level(self, service: str, level: int) -> None:
        self.level.labels(service=service).set(level)

    def load_decision(self, service: str, priority: str, outcome: str) -> None:
        self.load.labels(service=service, priority=priority, outcome=outcome).inc()
