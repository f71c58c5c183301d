package io.github.redisratelimit;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Collectors;

/**
 * Every command of the module, asynchronously: each call a {@link CompletableFuture}, bounded by
 * {@link Config#timeout()}, decided by the failure policy when the server fails, answered from the
 * deny cache while a refusal stands, counted in the metrics. Thread-safe: one per application,
 * shared. {@link RateLimiter} is the same, blocking; {@link ReactiveRateLimiter}, with Reactor.
 *
 * <p>Arguments are checked before any call: a bad one throws {@link IllegalArgumentException} at
 * once, never a future that fails.
 */
public final class AsyncRateLimiter implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger("io.github.redisratelimit");

  private final RedisCalls calls;
  private final Config config;
  private final Circuit circuit;
  private final DenyCache denyCache;

  /** Over {@code calls}, every setting at its default. */
  public AsyncRateLimiter(RedisCalls calls) {
    this(calls, Config.defaults());
  }

  /** Over {@code calls}, with {@code config}. */
  public AsyncRateLimiter(RedisCalls calls, Config config) {
    this.calls = java.util.Objects.requireNonNull(calls, "calls");
    this.config = java.util.Objects.requireNonNull(config, "config");
    this.circuit = new Circuit(config.onError(), config.cooldown(), config.clock());
    this.denyCache =
        config.denyCache() > 0 ? new DenyCache(config.denyCache(), config.clock()) : null;
  }

  /** The settings it was made with. */
  public Config config() {
    return config;
  }

  /** The calls it makes: for the package's other parts on the same connection. */
  public RedisCalls calls() {
    return calls;
  }

  /** The same limiter, blocking. */
  public RateLimiter blocking() {
    return new RateLimiter(this);
  }

  /** One command through the deadline and the circuit. */
  CompletableFuture<Object> send(List<String> words) {
    if (circuit.open()) {
      return CompletableFuture.failedFuture(circuit.unavailable());
    }
    long started = config.clock().getAsLong();
    CompletableFuture<Object> call;
    try {
      call = calls.call(words);
    } catch (RuntimeException failed) {
      call = CompletableFuture.failedFuture(failed);
    }
    return call.orTimeout(config.timeout().toNanos(), TimeUnit.NANOSECONDS)
        .handle(
            (reply, error) -> {
              if (error == null) {
                circuit.succeeded();
                config.metrics().serverCall(Duration.ofNanos(config.clock().getAsLong() - started));
                return reply;
              }
              RateLimitException failure = failure(error);
              if (failure instanceof ServerUnavailableException) {
                circuit.failed(failure);
                throw new CompletionException(
                    new ServerUnavailableException(
                        failure.getMessage(), failure.getCause(), circuit.retryAfter()));
              }
              circuit.succeeded(); // the server answered: the call was wrong
              throw new CompletionException(failure);
            });
  }

  /** The package's exception for what a call failed with. */
  static RateLimitException failure(Throwable error) {
    Throwable cause = unwrap(error);
    if (cause instanceof RateLimitException known) {
      return known;
    }
    if (cause instanceof TimeoutException) {
      return new ServerUnavailableException("no answer within the deadline", cause, Duration.ZERO);
    }
    return new ServerUnavailableException("the server failed: " + cause, cause, Duration.ZERO);
  }

  static Throwable unwrap(Throwable error) {
    Throwable cause = error;
    while ((cause instanceof CompletionException || cause instanceof ExecutionException)
        && cause.getCause() != null) {
      cause = cause.getCause();
    }
    return cause;
  }

  /** The policy a decision is counted under: the limiters' names, joined by "+". */
  static String policy(List<? extends Limiter> limiters) {
    return limiters.stream().map(Limiter::name).collect(Collectors.joining("+"));
  }

  /**
   * One request against every limiter, all or nothing, in one call.
   *
   * @throws IllegalArgumentException for no limiter
   */
  public CompletableFuture<RateLimit> check(List<? extends Limiter> limiters, Options options) {
    return decide(List.copyOf(limiters), options, config.shadow());
  }

  /** One request of 1 against every limiter. */
  public CompletableFuture<RateLimit> check(Limiter... limiters) {
    return check(List.of(limiters), Options.defaults());
  }

  /** {@link #check(List, Options)} in shadow mode or not, whatever the config says. */
  public CompletableFuture<RateLimit> check(
      List<? extends Limiter> limiters, Options options, boolean shadow) {
    return decide(List.copyOf(limiters), options, shadow);
  }

  /** What {@code check} would answer now, without writing (the {@code _RO} variants). */
  public CompletableFuture<RateLimit> peek(List<? extends Limiter> limiters, long quantity) {
    return decide(
        List.copyOf(limiters), Options.defaults().quantity(quantity).readOnly(), config.shadow());
  }

  /**
   * Waits for a slot, as Guava's {@code tryAcquire(timeout)}: one call with {@code DELAY}, then the
   * wait the module gives (no thread held meanwhile); completes at once, refused, when the turn is
   * further than {@code timeout} away. No polling: the module keeps the queue.
   */
  public CompletableFuture<RateLimit> acquire(
      List<? extends Limiter> limiters, long quantity, Duration timeout) {
    Checks.notNegative("timeout", timeout);
    return check(limiters, Options.defaults().quantity(quantity).delay(timeout))
        .thenCompose(
            result -> {
              if (!result.allowed() || result.waitFor().isZero()) {
                return CompletableFuture.completedFuture(result);
              }
              return CompletableFuture.supplyAsync(
                  () -> result,
                  CompletableFuture.delayedExecutor(
                      result.waitFor().toNanos(), TimeUnit.NANOSECONDS));
            });
  }

  private CompletableFuture<RateLimit> decide(
      List<Limiter> limiters, Options options, boolean shadow) {
    List<String> words = Protocol.command(limiters, options);
    String policy = policy(limiters);
    List<String> cacheKey =
        denyCache != null && !options.isRefund() && !options.isForce()
            ? Protocol.command(limiters, options.quantity(0))
            : null;
    if (cacheKey != null) {
      RateLimit cached = denyCache.get(cacheKey, options.quantity());
      if (cached != null) {
        return CompletableFuture.completedFuture(
            refused(policy, limiters, cached, "deny_cache", shadow));
      }
    }
    return send(words)
        .handle(
            (reply, error) -> {
              if (error != null) {
                return withoutServer(policy, error);
              }
              RateLimit result = Protocol.result(Replies.list(reply), limiters, options);
              if (cacheKey != null && result.shedLevel() == 0) {
                denyCache.put(cacheKey, options.quantity(), result);
              }
              if (!result.allowed()) {
                return refused(
                    policy, limiters, result, result.shedLevel() > 0 ? "shed" : "refused", shadow);
              }
              config.metrics().decision(policy, result.waitFor().isZero() ? "allowed" : "delayed");
              return result;
            });
  }

  /** The failure policy's decision for a call that failed (or the error, under RAISE). */
  private RateLimit withoutServer(String policy, Throwable error) {
    Throwable cause = unwrap(error);
    if (cause instanceof ServerUnavailableException unavailable
        && circuit.onError() != OnError.RAISE) {
      boolean allowed = circuit.onError() == OnError.ALLOW;
      config.metrics().decision(policy, allowed ? "failed_open" : "failed_closed");
      return RateLimit.withoutServer(allowed, unavailable.retryAfter());
    }
    throw new CompletionException(cause);
  }

  private RateLimit refused(
      String policy, List<Limiter> limiters, RateLimit result, String outcome, boolean shadow) {
    if (!shadow) {
      config.metrics().decision(policy, outcome);
      return result;
    }
    config.metrics().decision(policy, "shadow");
    LOG.log(
        System.Logger.Level.WARNING,
        "rate limiter: shadow: {0} would refuse {1}",
        policy,
        limiters.stream().map(Limiter::key).collect(Collectors.joining(", ")));
    return result.inShadow();
  }

  /** What a {@code FIXED}, {@code SLIDING} or {@code ANCHORED} window or a log counts. */
  public CompletableFuture<Counts> counts(Limiter limiter) {
    List<String> words = Protocol.countsCommand(limiter);
    return send(words).thenApply(reply -> Protocol.counts(limiter, Replies.list(reply)));
  }

  /**
   * {@code RL.ACQUIRE}: {@code quantity} of {@code limit} slots for {@code lease}; the lease's id
   * is 0 when refused. While the server fails, the policy decides: {@link OnError#ALLOW} grants a
   * lease with id 0 (nothing to release), {@link OnError#DENY} refuses it.
   */
  public CompletableFuture<Lease> acquireLease(
      String key, long limit, Duration lease, long quantity) {
    return lease(Protocol.leaseCommand(key, limit, lease, quantity, false));
  }

  /** {@code RL.ACQUIRE_RO}: what {@code acquireLease} would answer, taking nothing. */
  public CompletableFuture<Lease> peekLease(String key, long limit, Duration lease, long quantity) {
    return lease(Protocol.leaseCommand(key, limit, lease, quantity, true));
  }

  private CompletableFuture<Lease> lease(List<String> words) {
    return send(words)
        .handle(
            (reply, error) -> {
              if (error != null) {
                return new Lease(withoutServer("lease", error), 0);
              }
              Lease lease = Protocol.lease(Replies.list(reply));
              config.metrics().decision("lease", lease.allowed() ? "allowed" : "refused");
              return lease;
            });
  }

  /**
   * {@code RL.RELEASE}: frees a lease at once; false when it was no longer held, or when the server
   * was not reached (the lease ends at its expiry).
   */
  public CompletableFuture<Boolean> releaseLease(String key, long leaseId) {
    if (leaseId == 0) {
      return CompletableFuture.completedFuture(false); // granted without the server
    }
    return held(Protocol.releaseCommand(key, leaseId), false);
  }

  /**
   * {@code RL.RENEW}: extends a held lease to {@code lease} from now; while the server fails, true
   * under {@link OnError#ALLOW} (keep working), false under {@link OnError#DENY}.
   */
  public CompletableFuture<Boolean> renewLease(String key, long leaseId, Duration lease) {
    if (leaseId == 0) {
      return held(null, true);
    }
    return held(Protocol.renewCommand(key, leaseId, lease), true);
  }

  private CompletableFuture<Boolean> held(List<String> words, boolean renewing) {
    CompletableFuture<Object> call =
        words == null ? CompletableFuture.failedFuture(circuit.unavailable()) : send(words);
    return call.handle(
        (reply, error) -> {
          if (error == null) {
            return Replies.integer(reply) == 1;
          }
          Throwable cause = unwrap(error);
          if (!(cause instanceof ServerUnavailableException)
              || circuit.onError() == OnError.RAISE) {
            throw new CompletionException(cause);
          }
          return renewing && circuit.onError() == OnError.ALLOW;
        });
  }

  /**
   * {@code RL.TOP}: the keys refused most over the current and the previous minute, on the server
   * or merged from every primary of a Cluster.
   */
  public CompletableFuture<List<TopKey>> top(int count) {
    Checks.atLeast("count", count, 1);
    return calls
        .onEveryPrimary(List.of("RL.TOP", Integer.toString(count)))
        .orTimeout(config.timeout().toNanos(), TimeUnit.NANOSECONDS)
        .handle(
            (replies, error) -> {
              if (error != null) {
                throw new CompletionException(failure(error));
              }
              return Protocol.topKeys(replies, count);
            });
  }

  /** Closes the calls (what they opened themselves). */
  @Override
  public void close() {
    calls.close();
  }
}
