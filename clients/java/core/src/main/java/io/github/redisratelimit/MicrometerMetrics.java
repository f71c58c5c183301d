package io.github.redisratelimit;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * {@link Metrics} in a Micrometer registry: {@code ratelimit.decisions}, {@code
 * ratelimit.server.call.duration}, {@code ratelimit.load.level} and {@code
 * ratelimit.load.decisions}, which a Prometheus registry exposes as the other packages' {@code
 * ratelimit_decisions_total} and so on.
 */
public final class MicrometerMetrics implements Metrics {
  private final MeterRegistry registry;
  private final Timer calls;
  private final Map<String, AtomicInteger> levels = new ConcurrentHashMap<>();

  public MicrometerMetrics(MeterRegistry registry) {
    this.registry = registry;
    this.calls =
        Timer.builder("ratelimit.server.call.duration")
            .description("The latency of each call to the rate limiter's server.")
            .serviceLevelObjectives(
                Duration.ofNanos(500_000),
                Duration.ofMillis(1),
                Duration.ofNanos(2_500_000),
                Duration.ofMillis(5),
                Duration.ofMillis(10),
                Duration.ofMillis(25),
                Duration.ofMillis(50),
                Duration.ofMillis(100),
                Duration.ofMillis(250),
                Duration.ofMillis(500),
                Duration.ofSeconds(1))
            .register(registry);
  }

  @Override
  public void decision(String policy, String outcome) {
    Counter.builder("ratelimit.decisions")
        .description("Rate-limiting decisions, by policy and outcome.")
        .tag("policy", policy)
        .tag("outcome", outcome)
        .register(registry)
        .increment();
  }

  @Override
  public void serverCall(Duration took) {
    calls.record(took);
  }

  @Override
  public void loadLevel(String service, int level) {
    levels
        .computeIfAbsent(
            service,
            name -> {
              AtomicInteger value = new AtomicInteger();
              io.micrometer.core.instrument.Gauge.builder(
                      "ratelimit.load.level", value, AtomicInteger::get)
                  .description("A service's load level, as its last report answered.")
                  .tag("service", name)
                  .register(registry);
              return value;
            })
        .set(level);
  }

  @Override
  public void loadDecision(String service, Priority priority, String outcome) {
    Counter.builder("ratelimit.load.decisions")
        .description("The load shedder's decisions, by service, priority and outcome.")
        .tag("service", service)
        .tag("priority", priority.wireName())
        .tag("outcome", outcome)
        .register(registry)
        .increment();
  }
}
