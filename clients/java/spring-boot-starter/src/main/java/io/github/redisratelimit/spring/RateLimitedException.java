package io.github.redisratelimit.spring;

import io.github.redisratelimit.Fields;
import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.RateLimit;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A call {@link io.github.redisratelimit.spring.RateLimit} refused: the result and the limiters,
 * the status to answer (429; 503 when the server failed under {@code on-error: deny}, or a load
 * gate shed it) and its headers ({@code Retry-After} and the IETF RateLimit fields). The starter
 * answers it in Spring MVC and WebFlux; elsewhere it is the caller's to handle.
 */
public class RateLimitedException extends RuntimeException {
  private final transient RateLimit result;
  private final transient List<Limiter> limiters;

  public RateLimitedException(RateLimit result, List<? extends Limiter> limiters) {
    super("rate limited: " + limiters.stream().map(Limiter::key).toList(), null, false, false);
    this.result = result;
    this.limiters = List.copyOf(limiters);
  }

  /** The server's answer (or the failure policy's). */
  public RateLimit result() {
    return result;
  }

  public List<Limiter> limiters() {
    return limiters;
  }

  /** 429, or 503 when the server failed (the policy refused) or the load shed the call. */
  public int status() {
    return result.failed() || result.shedLevel() > 0 ? 503 : 429;
  }

  /** The headers of the answer. */
  public Map<String, String> headers() {
    if (status() == 503) {
      Map<String, String> only = new LinkedHashMap<>();
      long seconds =
          result.retryAfter() == null ? 1 : Math.max(1, Fields.seconds(result.retryAfter()));
      only.put("Retry-After", Long.toString(seconds));
      return only;
    }
    return Fields.headers(result, limiters);
  }
}
