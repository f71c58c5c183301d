package io.github.redisratelimit;

import java.time.Duration;
import java.util.List;

/**
 * What every limiter command answers, typed.
 *
 * @param allowed admitted (and counted); false: refused, and not counted
 * @param limit the most admitted at once
 * @param remaining how much more would be admitted right now
 * @param retryAfter until a refused request fits; null when admitted, or when it never fits
 * @param resetAfter until the limiter is back to full capacity
 * @param waitFor with {@code delay}: how long to wait before going ahead (zero: at once)
 * @param granted with {@code atMost}: the quantity granted (0 when refused); null otherwise
 * @param failed decided without the server, by the failure policy (nothing counted)
 * @param shadow refused, but let through in shadow mode ({@code allowed} is then true)
 * @param each several limiters: each one's own result, in order (empty for one limiter)
 * @param shedLevel with a load gate: the level that shed the request (answer 503, not 429)
 * @param leaseId with slots: the lease's id, to release or renew it (0 when refused)
 */
public record RateLimit(
    boolean allowed,
    long limit,
    long remaining,
    Duration retryAfter,
    Duration resetAfter,
    Duration waitFor,
    Long granted,
    boolean failed,
    boolean shadow,
    List<RateLimit> each,
    int shedLevel,
    long leaseId) {

  public RateLimit {
    each = List.copyOf(each);
  }

  /** The five integers {@code [limited, limit, remaining, retry_after, reset_after]}, in ms. */
  static RateLimit fromFields(List<?> fields, List<RateLimit> each, long waitMs, Long granted) {
    long retry = Replies.integer(fields.get(3));
    return new RateLimit(
        Replies.integer(fields.get(0)) == 0,
        Replies.integer(fields.get(1)),
        Replies.integer(fields.get(2)),
        retry < 0 ? null : Duration.ofMillis(retry),
        Duration.ofMillis(Replies.integer(fields.get(4))),
        Duration.ofMillis(waitMs),
        granted,
        false,
        false,
        each,
        0,
        0);
  }

  /** What the failure policy decides without the server: nothing counted, no fields. */
  static RateLimit withoutServer(boolean allowed, Duration retryAfter) {
    return new RateLimit(
        allowed,
        0,
        0,
        allowed ? null : retryAfter,
        Duration.ZERO,
        Duration.ZERO,
        null,
        true,
        false,
        List.of(),
        0,
        0);
  }

  /** The same result let through in shadow mode. */
  RateLimit inShadow() {
    return new RateLimit(
        true,
        limit,
        remaining,
        retryAfter,
        resetAfter,
        waitFor,
        granted,
        failed,
        true,
        each,
        shedLevel,
        leaseId);
  }

  RateLimit with(int shedLevel, long leaseId) {
    return new RateLimit(
        allowed,
        limit,
        remaining,
        retryAfter,
        resetAfter,
        waitFor,
        granted,
        failed,
        shadow,
        each,
        shedLevel,
        leaseId);
  }

  /** The result with its times less {@code elapsed} (a refusal answered from the deny cache). */
  RateLimit aged(Duration elapsed, Duration retryAfter) {
    return new RateLimit(
        allowed,
        limit,
        remaining,
        retryAfter,
        less(resetAfter, elapsed),
        waitFor,
        granted,
        failed,
        shadow,
        each.stream()
            .map(
                one ->
                    one.aged(
                        elapsed, one.retryAfter == null ? null : less(one.retryAfter, elapsed)))
            .toList(),
        shedLevel,
        leaseId);
  }

  private static Duration less(Duration time, Duration elapsed) {
    Duration left = time.minus(elapsed);
    return left.isNegative() ? Duration.ZERO : left;
  }
}
