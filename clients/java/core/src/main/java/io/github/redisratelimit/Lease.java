package io.github.redisratelimit;

/**
 * {@code RL.ACQUIRE}'s answer: the five fields, and the lease's id (0 when refused, or when the
 * failure policy granted it without the server: nothing to release).
 */
public record Lease(RateLimit result, long id) {
  /** Whether the lease was granted. */
  public boolean allowed() {
    return result.allowed();
  }
}
