package io.github.redisratelimit;

/** What the client throws: the server failed, or it refused a call. */
public class RateLimitException extends RuntimeException {
  public RateLimitException(String message, Throwable cause) {
    super(message, cause);
  }
}
