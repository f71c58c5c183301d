package io.github.redisratelimit.gateway;

import io.github.redisratelimit.Limiter;
import java.time.Duration;

/**
 * Spring Cloud Gateway's token bucket as the module's GCRA: the same bucket, refilled continuously.
 */
final class Buckets {
  private Buckets() {}

  /**
   * The key of a route's caller: one key, its route and caller in a hash tag as SCG's two keys
   * have.
   */
  static String key(String routeId, String id) {
    return "request_rate_limiter.{" + routeId + "." + id + "}";
  }

  /**
   * {@code replenishRate} tokens a second into a bucket of {@code burstCapacity}: {@code
   * CL.THROTTLE key (burstCapacity - 1) replenishRate 1s}, a request taking {@code
   * requestedTokens}.
   */
  static Limiter.Throttle bucket(String key, long replenishRate, long burstCapacity) {
    return Limiter.throttle(key, burstCapacity - 1, replenishRate, Duration.ofSeconds(1))
        .named("bucket");
  }
}
