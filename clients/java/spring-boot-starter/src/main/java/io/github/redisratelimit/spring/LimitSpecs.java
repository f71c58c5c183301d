package io.github.redisratelimit.spring;

import io.github.redisratelimit.Limiter;
import java.time.Duration;
import java.util.Locale;
import org.springframework.boot.convert.DurationStyle;

/** An annotation's or a property's limit as the client's {@link Limiter}. */
final class LimitSpecs {
  private LimitSpecs() {}

  /** {@code rate} a second as GCRA's count and period: exact for any double rate. */
  private static final Duration BASIS = Duration.ofSeconds(1000);

  static Limiter limiter(
      String key,
      String name,
      double rate,
      long limit,
      Duration window,
      RateLimit.Algorithm algorithm,
      long burst) {
    if (rate > 0 == limit > 0) {
      throw new IllegalArgumentException(
          "a limit is a rate, or a limit per window: one of the two");
    }
    if (rate > 0) {
      long count = Math.round(rate * BASIS.getSeconds());
      if (count < 1) {
        throw new IllegalArgumentException(
            "a rate is at least one in " + BASIS.getSeconds() + " s: " + rate);
      }
      long atOnce = burst > 0 ? burst : Math.max(1, (long) Math.ceil(rate));
      return Limiter.throttle(key, atOnce - 1, count, BASIS).named(name.isEmpty() ? "rate" : name);
    }
    String named = name.isEmpty() ? algorithm.name().toLowerCase(Locale.ROOT) : name;
    return switch (algorithm) {
      case GCRA ->
          Limiter.throttle(key, (burst > 0 ? burst : limit) - 1, limit, window).named(named);
      case LOG -> Limiter.log(key, limit, window).named(named);
      case SLIDING -> Limiter.window(key, limit, window).named(named);
      case FIXED ->
          Limiter.window(key, limit, window).algorithm(Limiter.Algorithm.FIXED).named(named);
      case ANCHORED ->
          Limiter.window(key, limit, window).algorithm(Limiter.Algorithm.ANCHORED).named(named);
    };
  }

  static Limiter limiter(String key, RateLimit annotation) {
    return limiter(
        key,
        annotation.name(),
        annotation.rate(),
        annotation.limit(),
        DurationStyle.detectAndParse(annotation.window()),
        annotation.algorithm(),
        annotation.burst());
  }

  static Limiter limiter(String key, RateLimitProperties.LimitSpec spec) {
    return limiter(
        key,
        spec.getName(),
        spec.getRate(),
        spec.getLimit(),
        spec.getWindow(),
        spec.getAlgorithm(),
        spec.getBurst());
  }

  /**
   * The key of a method's {@code index}-th limit for the caller {@code who}: the caller in a hash
   * tag, so that a call's limits share one Cluster slot.
   */
  static String key(String who, String where, int index) {
    return "rl:{" + (who == null || who.isEmpty() ? "all" : who) + "}:" + where + ":" + index;
  }
}
