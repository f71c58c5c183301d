package io.github.redisratelimit;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11) from a result, and {@code
 * Retry-After} on a refusal:
 *
 * <pre>
 * RateLimit-Policy: "burst";q=5;w=300, "daily";q=1000;w=86400
 * RateLimit: "burst";r=4;t=60, "daily";r=999;t=86400
 * </pre>
 *
 * Times round up to whole seconds: a client that waits them is never early.
 */
public final class Fields {
  private Fields() {}

  /** Whole seconds, rounded up. */
  public static long seconds(double seconds) {
    return (long) Math.ceil(seconds - 1e-9);
  }

  /** Whole seconds of {@code duration}, rounded up. */
  public static long seconds(Duration duration) {
    return seconds(duration.toNanos() / 1e9);
  }

  /** The fields of {@code result}, one policy per rate limiter of {@code limiters}. */
  public static Map<String, String> headers(RateLimit result, List<? extends Limiter> limiters) {
    List<RateLimit> each = result.each().isEmpty() ? List.of(result) : result.each();
    List<Limiter> rates = Protocol.rateLimiters(limiters);
    List<String> policies = new ArrayList<>();
    List<String> states = new ArrayList<>();
    for (int index = 0; index < Math.min(rates.size(), each.size()); index++) {
      Limiter limiter = rates.get(index);
      RateLimit one = each.get(index);
      policies.add(
          "\"" + limiter.name() + "\";q=" + one.limit() + ";w=" + seconds(limiter.windowSeconds()));
      states.add(
          "\"" + limiter.name() + "\";r=" + one.remaining() + ";t=" + seconds(one.resetAfter()));
    }
    Map<String, String> fields = new LinkedHashMap<>();
    fields.put("RateLimit-Policy", String.join(", ", policies));
    fields.put("RateLimit", String.join(", ", states));
    if (!result.allowed() && result.retryAfter() != null) {
      fields.put("Retry-After", Long.toString(seconds(result.retryAfter())));
    }
    return fields;
  }
}
