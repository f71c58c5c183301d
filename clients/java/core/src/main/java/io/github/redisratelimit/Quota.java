package io.github.redisratelimit;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * Quota leases for one hot limit (the articles' pre-allocation): a process takes up to {@code
 * batch} of a limit in one call ({@code AT_MOST}) and spends it locally, so that one key's
 * decisions are not bounded by one shard's thread and a round trip each. What is unused {@code
 * hold} after it was taken is given back ({@code REFUND}); {@link #close()} gives back the rest.
 *
 * <p>The bound: in any window, what N processes admit exceeds what the server alone would admit by
 * at most N x batch. While the limit binds (a take got less than it asked for), a take asks for
 * half a batch at once, waiting for it on the server ({@code DELAY}, up to {@code hold}), so a
 * binding limit costs at most one call per half batch admitted, and a refusal one call per {@code
 * retry_after}, not one per request. Thread-safe: takes queue behind each other.
 *
 * <pre>{@code
 * Quota quota = new Quota(limiter, List.of(Limiter.window("api:global", 10_000, Duration.ofSeconds(1))), 50, Duration.ofMillis(500));
 * if (quota.take(1)) { ... }
 * }</pre>
 */
public final class Quota implements AutoCloseable {
  private final RateLimiter limiter;
  private final List<Limiter> limiters;
  private final long batch;
  private final long hold;
  private final long half;
  private final java.util.function.LongSupplier clock;
  private final ScheduledExecutorService timer;
  private long held;
  private long expiresAt;
  private long availableAt = Long.MIN_VALUE;
  private long refusedUntil = Long.MIN_VALUE;
  private boolean binding;
  private ScheduledFuture<?> giveBack;
  private long decisions;
  private long admitted;
  private long calls;

  public Quota(RateLimiter limiter, List<? extends Limiter> limiters, long batch, Duration hold) {
    Checks.atLeast("batch", batch, 1);
    Checks.positive("hold", hold);
    if (limiters == null || limiters.isEmpty()) {
      throw new IllegalArgumentException("at least one limiter");
    }
    this.limiter = limiter;
    this.limiters = List.copyOf(limiters);
    this.batch = batch;
    this.hold = hold.toNanos();
    this.clock = limiter.async().config().clock();
    long least = (batch + 1) / 2;
    for (Limiter one : this.limiters) {
      long capacity =
          one instanceof Limiter.Throttle throttle
              ? throttle.maxBurst() + 1
              : one instanceof Limiter.Window window
                  ? window.limit()
                  : one instanceof Limiter.Log log ? log.limit() : Long.MAX_VALUE;
      least = Math.min(least, capacity);
    }
    this.half = least;
    this.timer =
        Executors.newSingleThreadScheduledExecutor(
            task -> {
              Thread thread = new Thread(task, "ratelimit-quota");
              thread.setDaemon(true);
              return thread;
            });
  }

  /** Decisions taken, units admitted and calls made: what the lease saves. */
  public synchronized long[] counters() {
    return new long[] {decisions, admitted, calls};
  }

  /** Whether a request of {@code quantity} may go ahead: from what is held, or after one call. */
  public synchronized boolean take(long quantity) {
    Checks.atLeast("quantity", quantity, 1);
    decisions += 1;
    giveBack(expired());
    if (spend(quantity)) {
      limiter.async().config().metrics().decision(AsyncRateLimiter.policy(limiters), "quota");
      return true;
    }
    long now = clock.getAsLong();
    if (before(now, refusedUntil) || (held > 0 && before(now, availableAt))) {
      return false;
    }
    boolean wasBinding = binding;
    long asked =
        wasBinding
            ? Math.max(Math.min(half, batch - held), quantity - held)
            : Math.max(batch, quantity) - held;
    Options how =
        wasBinding
            ? Options.defaults().quantity(asked).delay(Duration.ofNanos(hold))
            : Options.defaults().quantity(asked).atMost();
    RateLimit result = limiter.check(limiters, how);
    calls += 1;
    if (result.failed()) {
      return result.allowed(); // decided by the failure policy: nothing taken
    }
    if (!result.allowed()) {
      if (result.retryAfter() != null) {
        refusedUntil = clock.getAsLong() + result.retryAfter().toNanos();
      }
      binding = batch > 1;
    } else if (wasBinding) {
      binding = !result.waitFor().isZero();
      add(asked, result.waitFor());
    } else {
      binding = batch > 1 && result.granted() < asked;
      add(result.granted(), Duration.ZERO);
    }
    return spend(quantity);
  }

  /** Whether {@code now} is before {@code until} (never, for an instant not set). */
  private static boolean before(long now, long until) {
    return until != Long.MIN_VALUE && now - until < 0;
  }

  private void add(long units, Duration wait) {
    if (units <= 0) {
      return;
    }
    long now = clock.getAsLong();
    availableAt = now + wait.toNanos();
    if (held == 0) {
      expiresAt = now + wait.toNanos() + hold;
    }
    held += units;
    arm();
  }

  private boolean spend(long quantity) {
    if (held < quantity || before(clock.getAsLong(), availableAt)) {
      return false;
    }
    held -= quantity;
    admitted += quantity;
    return true;
  }

  private long expired() {
    return held > 0 && !before(clock.getAsLong(), expiresAt) ? release() : 0;
  }

  private long release() {
    long units = held;
    held = 0;
    return units;
  }

  private void giveBack(long units) {
    if (units > 0) {
      limiter.check(limiters, Options.defaults().quantity(units).refund());
    }
  }

  /** Gives back at the hold's end even if no request comes to notice it. */
  private void arm() {
    if ((giveBack != null && !giveBack.isDone()) || held == 0) {
      return;
    }
    long delay = Math.max(0, expiresAt - clock.getAsLong());
    giveBack =
        timer.schedule(
            () -> {
              synchronized (this) {
                try {
                  giveBack(expired());
                } catch (RuntimeException failed) {
                  // the units end with the limit's own window
                }
                giveBack = null;
                arm();
              }
            },
            delay,
            TimeUnit.NANOSECONDS);
  }

  /** Gives back whatever is held. */
  @Override
  public synchronized void close() {
    if (giveBack != null) {
      giveBack.cancel(false);
    }
    timer.shutdownNow();
    giveBack(release());
  }
}
