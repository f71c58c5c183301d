// Prometheus metrics for the client and the adapters (optional: needs prom-client), the
// names the nginx package serves:
//
//   ratelimit_decisions_total{policy, outcome}   decisions by policy (the limiters' names,
//       joined by "+") and outcome: allowed, delayed, refused, shed (by a load gate),
//       deny_cache, failed_open, failed_closed, quota (spent from a quota lease), shadow
//   ratelimit_server_call_duration_seconds        the latency of each call to the server
//   ratelimit_load_level{service}                 a service's load level, from its reports
//   ratelimit_load_decisions_total{service, priority, outcome}   the load shedder's
//       decisions: admitted, shed, shadow (would have been shed)
//
//   const { PrometheusMetrics } = require("redis-ratelimit-module/metrics");
//   const limiter = new RateLimiter(redis, { metrics: new PrometheusMetrics() });
//   // then serve prom-client's register (register.metrics()) on /metrics
"use strict";

// The server call's latency buckets, in seconds: the nginx package's.
const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

class PrometheusMetrics {
  /** @param {{ register?: import("prom-client").Registry }} [options]  prom-client's default
   * registry unless given; every PrometheusMetrics of one registry counts into the same metrics */
  constructor({ register } = {}) {
    const client = require("prom-client");
    const registry = register ?? client.register;
    this.decisions =
      registry.getSingleMetric("ratelimit_decisions_total") ??
      new client.Counter({
        name: "ratelimit_decisions_total",
        help: "Rate-limiting decisions, by policy and outcome.",
        labelNames: ["policy", "outcome"],
        registers: [registry],
      });
    this.latency =
      registry.getSingleMetric("ratelimit_server_call_duration_seconds") ??
      new client.Histogram({
        name: "ratelimit_server_call_duration_seconds",
        help: "The latency of each call to the rate limiter's server.",
        buckets: BUCKETS,
        registers: [registry],
      });
    this.level =
      registry.getSingleMetric("ratelimit_load_level") ??
      new client.Gauge({
        name: "ratelimit_load_level",
        help: "A service's load level, as its last report answered.",
        labelNames: ["service"],
        registers: [registry],
      });
    this.load =
      registry.getSingleMetric("ratelimit_load_decisions_total") ??
      new client.Counter({
        name: "ratelimit_load_decisions_total",
        help: "The load shedder's decisions, by service, priority and outcome.",
        labelNames: ["service", "priority", "outcome"],
        registers: [registry],
      });
  }

  loadLevel(service, level) {
    this.level.set({ service }, level);
  }

  loadDecision(service, priority, outcome) {
    this.load.inc({ service, priority, outcome });
  }

  decision(policy, outcome) {
    this.decisions.inc({ policy, outcome });
  }

  serverCall(seconds) {
    this.latency.observe(seconds);
  }
}

module.exports = { PrometheusMetrics, BUCKETS };
