package io.github.redisratelimit;

import java.time.Duration;

/**
 * The failure policy of one limiter. Closed, every call asks the server. A failure opens it for
 * {@code cooldown}: no call asks. Then it is half-open: the first call to ask is the probe, and
 * until its answer closes the circuit or its failure opens it again, the others decide as while
 * open. A probe that never reports back stops counting after a cool-down. Errors are logged at most
 * once a second.
 */
final class Circuit {
  private static final System.Logger LOG = System.getLogger("io.github.redisratelimit");
  private static final long CLOSED = Long.MIN_VALUE;

  private final OnError onError;
  private final long cooldown;
  private final java.util.function.LongSupplier clock;
  private volatile long openUntil = CLOSED;
  private long probeUntil = CLOSED;
  private long loggedAt = CLOSED;
  private volatile Throwable lastError;

  Circuit(OnError onError, Duration cooldown, java.util.function.LongSupplier clock) {
    this.onError = onError;
    this.cooldown = cooldown.toNanos();
    this.clock = clock;
  }

  OnError onError() {
    return onError;
  }

  /**
   * Whether this call decides without asking; a call told false asks (after a failure, the probe).
   */
  boolean open() {
    if (openUntil == CLOSED) {
      return false;
    }
    long now = clock.getAsLong();
    if (now - openUntil < 0) {
      return true;
    }
    synchronized (this) {
      if (probeUntil != CLOSED && now - probeUntil < 0) {
        return true;
      }
      probeUntil = now + cooldown;
      return false;
    }
  }

  /** The server answered: the circuit closes. */
  void succeeded() {
    if (openUntil != CLOSED) {
      synchronized (this) {
        openUntil = CLOSED;
        probeUntil = CLOSED;
      }
    }
  }

  /** A call failed: open for a cool-down, logged at most once a second. */
  void failed(Throwable error) {
    long now = clock.getAsLong();
    lastError = error;
    boolean log;
    synchronized (this) {
      openUntil = now + cooldown;
      log = loggedAt == CLOSED || now - loggedAt >= 1_000_000_000L;
      if (log) {
        loggedAt = now;
      }
    }
    if (log) {
      LOG.log(
          System.Logger.Level.ERROR,
          "rate limiter: the server failed ({0}); deciding {1} for {2} ms",
          error.getMessage(),
          onError.name().toLowerCase(java.util.Locale.ROOT),
          cooldown / 1_000_000);
    }
  }

  /** Until the server is asked again (or the probe out has its answer). */
  Duration retryAfter() {
    long now = clock.getAsLong();
    long left = 0;
    synchronized (this) {
      if (openUntil != CLOSED) {
        left = Math.max(left, openUntil - now);
      }
      if (probeUntil != CLOSED) {
        left = Math.max(left, probeUntil - now);
      }
    }
    return Duration.ofNanos(Math.max(0, left));
  }

  /** The exception a call not made throws under {@link OnError#RAISE}. */
  ServerUnavailableException unavailable() {
    Throwable last = lastError;
    return new ServerUnavailableException(
        "the server failed less than "
            + cooldown / 1_000_000
            + " ms ago: "
            + (last == null ? "" : last.getMessage()),
        last,
        retryAfter());
  }
}
