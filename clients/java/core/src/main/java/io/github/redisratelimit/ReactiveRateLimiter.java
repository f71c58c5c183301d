package io.github.redisratelimit;

import java.time.Duration;
import java.util.List;
import reactor.core.publisher.Mono;

/**
 * Every command of the module as Reactor {@link Mono}s (WebFlux, Spring Cloud Gateway): {@link
 * AsyncRateLimiter}'s calls, each made when subscribed. Needs reactor-core on the classpath
 * (Lettuce brings it).
 */
public final class ReactiveRateLimiter {
  private final AsyncRateLimiter async;

  public ReactiveRateLimiter(AsyncRateLimiter async) {
    this.async = async;
  }

  /** The same limiter, asynchronous. */
  public AsyncRateLimiter async() {
    return async;
  }

  public Mono<RateLimit> check(List<? extends Limiter> limiters, Options options) {
    return Mono.fromFuture(() -> async.check(limiters, options));
  }

  public Mono<RateLimit> check(List<? extends Limiter> limiters, Options options, boolean shadow) {
    return Mono.fromFuture(() -> async.check(limiters, options, shadow));
  }

  public Mono<RateLimit> peek(List<? extends Limiter> limiters, long quantity) {
    return Mono.fromFuture(() -> async.peek(limiters, quantity));
  }

  public Mono<RateLimit> acquire(
      List<? extends Limiter> limiters, long quantity, Duration timeout) {
    return Mono.fromFuture(() -> async.acquire(limiters, quantity, timeout));
  }

  public Mono<Lease> acquireLease(String key, long limit, Duration lease, long quantity) {
    return Mono.fromFuture(() -> async.acquireLease(key, limit, lease, quantity));
  }

  public Mono<Boolean> releaseLease(String key, long leaseId) {
    return Mono.fromFuture(() -> async.releaseLease(key, leaseId));
  }

  public Mono<List<TopKey>> top(int count) {
    return Mono.fromFuture(() -> async.top(count));
  }
}
