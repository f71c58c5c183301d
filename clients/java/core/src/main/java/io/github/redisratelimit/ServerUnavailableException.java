package io.github.redisratelimit;

import java.time.Duration;

/**
 * The server failed (unreachable, no answer within the deadline, loading, failing over), or failed
 * less than a cool-down ago: not a refusal of a bad call. {@link #retryAfter()}: until it is asked
 * again.
 */
public class ServerUnavailableException extends RateLimitException {
  private final Duration retryAfter;

  public ServerUnavailableException(String message, Throwable cause, Duration retryAfter) {
    super(message, cause);
    this.retryAfter = retryAfter;
  }

  /** Until the server is asked again. */
  public Duration retryAfter() {
    return retryAfter;
  }
}
