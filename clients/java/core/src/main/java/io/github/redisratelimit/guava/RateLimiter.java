package io.github.redisratelimit.guava;

import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.Options;
import io.github.redisratelimit.RateLimit;
import io.github.redisratelimit.RedisCalls;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Guava's {@code RateLimiter}, held across every JVM of a service: the same methods, its state in
 * one key of the server ({@code CL.THROTTLE}, GCRA), decided there atomically. A service changes
 * its import and passes the connection and the key:
 *
 * <pre>{@code
 * // import com.google.common.util.concurrent.RateLimiter;
 * import io.github.redisratelimit.guava.RateLimiter;
 *
 * RateLimiter limiter = RateLimiter.create(calls, "orders:create", 700.0);
 * limiter.acquire();                                       // waits the time the server says
 * if (limiter.tryAcquire(1, 100, TimeUnit.MILLISECONDS)) { ... }
 * }</pre>
 *
 * <p>Guava's semantics, and where they differ (docs/migrating.md):
 *
 * <ul>
 *   <li><b>SmoothBursty</b> ({@code create(rate)}): up to one second of unused permits is stored
 *       ({@code floor(rate)} of them: stored permits are whole), so a limiter idle a second lets
 *       {@code floor(rate) + 1} requests through at once, then one every {@code 1 / rate}. Guava's
 *       new limiter starts empty; this one starts full, as a limiter idle for a second.
 *   <li><b>SmoothWarmingUp</b> ({@code create(rate, warmupPeriod)}): a cold limiter costs three
 *       intervals a permit at the coldest, falling to one over {@code warmupPeriod} of sustained
 *       use ({@code CL.THROTTLE ... WARMUP}, Guava's cold factor of 3); left idle it cools again.
 *   <li><b>{@code acquire(n)}</b> waits the time the server says and returns it, in seconds. A
 *       request of more permits than are stored waits for its own ({@code DELAY}), where Guava lets
 *       it through and makes the next caller wait: the same rate, the wait moved to the caller that
 *       asked. More than the bucket ever holds is taken at once and owed ({@code FORCE}), as Guava
 *       does: later callers wait it out.
 *   <li><b>{@code tryAcquire(n, timeout)}</b> reserves only what it will wait for: one call with
 *       {@code DELAY timeout}, admitted with its wait or refused at once, nothing taken.
 *   <li><b>{@code setRate}</b> changes the rate for every call after it; what was used counts at
 *       the new rate (docs/options.md, changed limits).
 * </ul>
 *
 * A failing server throws {@link io.github.redisratelimit.ServerUnavailableException} within the
 * limiter's deadline (1 s), as {@link io.github.redisratelimit.RateLimiter} does.
 */
public final class RateLimiter {
  /** How far ahead {@code acquire} waits its turn: any wait Guava would sleep. */
  private static final Duration FOREVER = Duration.ofDays(1);

  /**
   * The rate's basis: {@code count} permits per {@code BASIS}, so that any double rate is exact to
   * 1e-9.
   */
  private static final Duration BASIS = Duration.ofSeconds(1_000_000);

  private final io.github.redisratelimit.RateLimiter limiter;
  private final String key;
  private final Duration warmup;
  private volatile double rate;
  private volatile Limiter.Throttle throttle;

  private RateLimiter(
      io.github.redisratelimit.RateLimiter limiter, String key, double rate, Duration warmup) {
    this.limiter = limiter;
    this.key = key;
    this.warmup = warmup;
    setRate(rate);
  }

  /** SmoothBursty: {@code permitsPerSecond}, up to a second of them stored, in {@code key}. */
  public static RateLimiter create(RedisCalls calls, String key, double permitsPerSecond) {
    return new RateLimiter(
        new io.github.redisratelimit.RateLimiter(calls), key, permitsPerSecond, null);
  }

  /** SmoothBursty over a limiter of the caller's (its deadline, failure policy and metrics). */
  public static RateLimiter create(
      io.github.redisratelimit.RateLimiter limiter, String key, double permitsPerSecond) {
    return new RateLimiter(limiter, key, permitsPerSecond, null);
  }

  /** SmoothWarmingUp: {@code permitsPerSecond}, reached over {@code warmupPeriod} of use. */
  public static RateLimiter create(
      RedisCalls calls, String key, double permitsPerSecond, long warmupPeriod, TimeUnit unit) {
    return create(calls, key, permitsPerSecond, Duration.ofNanos(unit.toNanos(warmupPeriod)));
  }

  /** SmoothWarmingUp: {@code permitsPerSecond}, reached over {@code warmupPeriod} of use. */
  public static RateLimiter create(
      RedisCalls calls, String key, double permitsPerSecond, Duration warmupPeriod) {
    if (warmupPeriod == null || warmupPeriod.isNegative()) {
      throw new IllegalArgumentException("warmupPeriod must not be negative: " + warmupPeriod);
    }
    return new RateLimiter(
        new io.github.redisratelimit.RateLimiter(calls),
        key,
        permitsPerSecond,
        warmupPeriod.isZero() ? null : warmupPeriod);
  }

  /** The stable rate, in permits per second. */
  public double getRate() {
    return rate;
  }

  /** Changes the stable rate for every call after this one. */
  public void setRate(double permitsPerSecond) {
    if (!(permitsPerSecond > 0.0)
        || Double.isNaN(permitsPerSecond)
        || Double.isInfinite(permitsPerSecond)) {
      throw new IllegalArgumentException("rate must be positive and finite: " + permitsPerSecond);
    }
    long count = Math.round(permitsPerSecond * BASIS.getSeconds());
    if (count < 1) {
      throw new IllegalArgumentException(
          "rate is at least one permit in " + BASIS.getSeconds() + " s");
    }
    long stored = (long) Math.floor(permitsPerSecond);
    Limiter.Throttle next = Limiter.throttle(key, stored, count, BASIS);
    this.throttle = warmup == null ? next : next.warmup(warmup);
    this.rate = permitsPerSecond;
  }

  /** Waits for one permit; the seconds it waited. */
  public double acquire() {
    return acquire(1);
  }

  /** Waits for {@code permits}; the seconds it waited. */
  public double acquire(int permits) {
    return sleep(reserve(permits).waitFor());
  }

  /** Takes {@code permits} on the server: when they fit, or owed when they never would. */
  RateLimit reserve(int permits) {
    checkPermits(permits);
    Limiter.Throttle current = throttle;
    Options options =
        permits > current.maxBurst() + 1
            ? Options.defaults().quantity(permits).force()
            : Options.defaults().quantity(permits).delay(FOREVER);
    RateLimit result = limiter.check(List.of(current), options);
    if (!result.allowed()) {
      // The server refused what never fits at this coldness: owe it instead, as Guava would.
      result = limiter.check(List.of(current), Options.defaults().quantity(permits).force());
    }
    return result;
  }

  /** One permit if it is available now. */
  public boolean tryAcquire() {
    return tryAcquire(1, Duration.ZERO);
  }

  /** {@code permits} if they are available now. */
  public boolean tryAcquire(int permits) {
    return tryAcquire(permits, Duration.ZERO);
  }

  /** One permit if it is available within {@code timeout}, waiting for it. */
  public boolean tryAcquire(long timeout, TimeUnit unit) {
    return tryAcquire(1, timeout, unit);
  }

  /** One permit if it is available within {@code timeout}, waiting for it. */
  public boolean tryAcquire(Duration timeout) {
    return tryAcquire(1, timeout);
  }

  /** {@code permits} if they are available within {@code timeout}, waiting for them. */
  public boolean tryAcquire(int permits, long timeout, TimeUnit unit) {
    return tryAcquire(permits, Duration.ofNanos(unit.toNanos(Math.max(0, timeout))));
  }

  /**
   * {@code permits} if they are available within {@code timeout}, waiting for them: one call with
   * {@code DELAY timeout}, which takes them only when it will wait for them.
   */
  public boolean tryAcquire(int permits, Duration timeout) {
    RateLimit result = reserve(permits, timeout);
    if (!result.allowed()) {
      return false;
    }
    sleep(result.waitFor());
    return true;
  }

  /** Takes {@code permits} on the server if they fit within {@code timeout}: one DELAY call. */
  RateLimit reserve(int permits, Duration timeout) {
    checkPermits(permits);
    Duration bound = timeout == null || timeout.isNegative() ? Duration.ZERO : timeout;
    return limiter.check(List.of(throttle), Options.defaults().quantity(permits).delay(bound));
  }

  /** The limit as the server keeps it: {@code CL.THROTTLE}'s arguments. */
  Limiter.Throttle throttle() {
    return throttle;
  }

  private static void checkPermits(int permits) {
    if (permits <= 0) {
      throw new IllegalArgumentException("Requested permits (" + permits + ") must be positive");
    }
  }

  private static double sleep(Duration wait) {
    if (wait.isZero() || wait.isNegative()) {
      return 0.0;
    }
    boolean interrupted = false;
    long end = System.nanoTime() + wait.toNanos();
    long left = wait.toNanos();
    while (left > 0) {
      try {
        TimeUnit.NANOSECONDS.sleep(left);
      } catch (InterruptedException interruption) {
        interrupted = true; // as Guava's sleepUninterruptibly
      }
      left = end - System.nanoTime();
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
    return wait.toNanos() / 1e9;
  }

  @Override
  public String toString() {
    return String.format(
        java.util.Locale.ROOT, "RateLimiter[key=%s, stableRate=%3.1fqps]", key, rate);
  }
}
