package io.github.redisratelimit;

import java.time.Duration;

/**
 * Where decisions are counted, named as every package of the project names them (Prometheus names;
 * {@link MicrometerMetrics} registers them):
 *
 * <ul>
 *   <li>{@code ratelimit_decisions_total{policy, outcome}}: decisions by policy (the limiters'
 *       names, joined by "+") and outcome: allowed, delayed, refused, shed, deny_cache,
 *       failed_open, failed_closed, quota, shadow;
 *   <li>{@code ratelimit_server_call_duration_seconds}: each call to the server;
 *   <li>{@code ratelimit_load_level{service}}: a service's load level, from its reports;
 *   <li>{@code ratelimit_load_decisions_total{service, priority, outcome}}: the load shedder's
 *       decisions: admitted, shed, shed_local, shadow.
 * </ul>
 */
public interface Metrics {
  /** Counts nothing. */
  Metrics NONE = new Metrics() {};

  default void decision(String policy, String outcome) {}

  default void serverCall(Duration took) {}

  default void loadLevel(String service, int level) {}

  default void loadDecision(String service, Priority priority, String outcome) {}
}
