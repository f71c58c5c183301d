package io.github.redisratelimit;

import java.time.Duration;
import java.util.Objects;
import java.util.function.LongSupplier;

/**
 * How a limiter calls the server and decides when it fails; immutable, each method a changed copy
 * of {@link #defaults()}:
 *
 * <ul>
 *   <li>{@code timeout} (1 s): the most a call waits, whatever the driver's own timeouts and
 *       reconnection; then the failure policy decides;
 *   <li>{@code onError} ({@link OnError#RAISE}): what a decision is when the server fails;
 *   <li>{@code cooldown} (1 s): after a failure, how long decisions are taken by the policy without
 *       asking; then one call probes the server while the others keep deciding so;
 *   <li>{@code denyCache} (0, off): how many standing refusals are answered locally;
 *   <li>{@code metrics} ({@link Metrics#NONE}); {@code shadow} (false): refusals let through,
 *       counted and logged; {@code clock} (nanoseconds, {@code System::nanoTime}).
 * </ul>
 */
public record Config(
    Duration timeout,
    OnError onError,
    Duration cooldown,
    int denyCache,
    Metrics metrics,
    boolean shadow,
    LongSupplier clock) {

  public Config {
    Checks.positive("timeout", timeout);
    Objects.requireNonNull(onError, "onError");
    Checks.positive("cooldown", cooldown);
    Checks.atLeast("denyCache", denyCache, 0);
    Objects.requireNonNull(metrics, "metrics");
    Objects.requireNonNull(clock, "clock");
  }

  /** Every setting at its default. */
  public static Config defaults() {
    return new Config(
        Duration.ofSeconds(1),
        OnError.RAISE,
        Duration.ofSeconds(1),
        0,
        Metrics.NONE,
        false,
        System::nanoTime);
  }

  public Config timeout(Duration timeout) {
    return new Config(timeout, onError, cooldown, denyCache, metrics, shadow, clock);
  }

  public Config onError(OnError onError) {
    return new Config(timeout, onError, cooldown, denyCache, metrics, shadow, clock);
  }

  public Config cooldown(Duration cooldown) {
    return new Config(timeout, onError, cooldown, denyCache, metrics, shadow, clock);
  }

  public Config denyCache(int keys) {
    return new Config(timeout, onError, cooldown, keys, metrics, shadow, clock);
  }

  public Config metrics(Metrics metrics) {
    return new Config(timeout, onError, cooldown, denyCache, metrics, shadow, clock);
  }

  public Config shadow(boolean shadow) {
    return new Config(timeout, onError, cooldown, denyCache, metrics, shadow, clock);
  }

  public Config clock(LongSupplier nanos) {
    return new Config(timeout, onError, cooldown, denyCache, metrics, shadow, nanos);
  }
}
