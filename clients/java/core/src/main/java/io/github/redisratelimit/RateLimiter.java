package io.github.redisratelimit;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * Every command of the module, blocking: {@link AsyncRateLimiter}'s calls, each waited for (never
 * longer than {@link Config#timeout()}). Exceptions come unwrapped: {@link
 * ServerUnavailableException} (the server failed, under {@link OnError#RAISE}), {@link
 * CommandException} (it refused the call), {@link IllegalArgumentException} (a bad argument, before
 * any call). Marks the request its thread runs as the package's own answer when it answers by its
 * policy ({@link Answered}).
 *
 * <pre>{@code
 * RateLimiter limiter = new RateLimiter(LettuceCalls.connect(RedisClient.create("redis://localhost")));
 * RateLimit result = limiter.check(Limiter.throttle("user:7", 4, 1, Duration.ofSeconds(1)));
 * }</pre>
 */
public final class RateLimiter implements AutoCloseable {
  private final AsyncRateLimiter async;

  /** Over {@code calls}, every setting at its default. */
  public RateLimiter(RedisCalls calls) {
    this(new AsyncRateLimiter(calls));
  }

  /** Over {@code calls}, with {@code config}. */
  public RateLimiter(RedisCalls calls, Config config) {
    this(new AsyncRateLimiter(calls, config));
  }

  RateLimiter(AsyncRateLimiter async) {
    this.async = async;
  }

  /** The same limiter, asynchronous. */
  public AsyncRateLimiter async() {
    return async;
  }

  static <T> T join(CompletableFuture<T> future) {
    // The request this thread runs, if a shedder watches it, waits on the server meanwhile.
    Answered waiting = Answered.current();
    if (waiting != null) {
      waiting.waiting(true);
    }
    try {
      return future.join();
    } catch (CompletionException failed) {
      Throwable cause = AsyncRateLimiter.unwrap(failed);
      if (cause instanceof ServerUnavailableException) {
        Answered.markOwn();
      }
      if (cause instanceof RuntimeException runtime) {
        throw runtime;
      }
      throw failed;
    } finally {
      if (waiting != null) {
        waiting.waiting(false);
      }
    }
  }

  private static RateLimit marked(RateLimit result) {
    if ((result.failed() && !result.allowed()) || result.shedLevel() > 0) {
      Answered.markOwn();
    }
    return result;
  }

  /** One request against every limiter, all or nothing, in one call. */
  public RateLimit check(List<? extends Limiter> limiters, Options options) {
    return marked(join(async.check(limiters, options)));
  }

  /** One request of 1 against every limiter. */
  public RateLimit check(Limiter... limiters) {
    return check(List.of(limiters), Options.defaults());
  }

  /** {@link #check(List, Options)} in shadow mode or not, whatever the config says. */
  public RateLimit check(List<? extends Limiter> limiters, Options options, boolean shadow) {
    return marked(join(async.check(limiters, options, shadow)));
  }

  /** What {@code check} would answer now, without writing. */
  public RateLimit peek(List<? extends Limiter> limiters, long quantity) {
    return marked(join(async.peek(limiters, quantity)));
  }

  /**
   * Waits for a slot: one call with {@code DELAY}, then a sleep of the wait the module gives;
   * returns at once, refused, when the turn is further than {@code timeout} away.
   *
   * @throws InterruptedException when interrupted while it waits its turn (the slot stays taken)
   */
  public RateLimit acquire(List<? extends Limiter> limiters, long quantity, Duration timeout)
      throws InterruptedException {
    RateLimit result = check(limiters, Options.defaults().quantity(quantity).delay(timeout));
    if (result.allowed() && !result.waitFor().isZero()) {
      Thread.sleep(result.waitFor().toMillis(), result.waitFor().toNanosPart() % 1_000_000);
    }
    return result;
  }

  public Counts counts(Limiter limiter) {
    return join(async.counts(limiter));
  }

  public Lease acquireLease(String key, long limit, Duration lease, long quantity) {
    return join(async.acquireLease(key, limit, lease, quantity));
  }

  public Lease peekLease(String key, long limit, Duration lease, long quantity) {
    return join(async.peekLease(key, limit, lease, quantity));
  }

  public boolean releaseLease(String key, long leaseId) {
    return join(async.releaseLease(key, leaseId));
  }

  public boolean renewLease(String key, long leaseId, Duration lease) {
    return join(async.renewLease(key, leaseId, lease));
  }

  public List<TopKey> top(int count) {
    return join(async.top(count));
  }

  @Override
  public void close() {
    async.close();
  }
}
