package io.github.redisratelimit;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Allow and deny lists shared by every gateway and application through one hash: fields {@code
 * <list>:<item>} and a {@code version} every change increments (the nginx package's
 * resty.ratelimit_module.lists reads and writes the same hash). A reader keeps a copy and asks only
 * for the version, at most once per {@code every}, reading the hash again when it changed. A change
 * increments the version after writing its item, in one transaction, so a reader that saw the new
 * version reads the new item.
 */
public final class SharedLists {
  private final RedisCalls calls;
  private final String hash;
  private final long every;
  private final long timeout;
  private final java.util.function.LongSupplier clock;
  private volatile Map<String, Map<String, String>> lists = Map.of();
  private volatile String version;
  private volatile long nextCheck = Long.MIN_VALUE;

  /**
   * The lists of {@code hash}, read at most once per {@code every}, through {@code limiter}'s
   * connection.
   */
  public SharedLists(AsyncRateLimiter limiter, String hash, java.time.Duration every) {
    Checks.key(hash);
    Checks.positive("every", every);
    this.calls = limiter.calls();
    this.hash = hash;
    this.every = every.toNanos();
    this.timeout = limiter.config().timeout().toNanos();
    this.clock = limiter.config().clock();
  }

  private <T> T within(CompletableFuture<T> call) {
    return RateLimiter.join(
        call.orTimeout(timeout, TimeUnit.NANOSECONDS)
            .handle(
                (value, error) -> {
                  if (error != null) {
                    throw new java.util.concurrent.CompletionException(
                        AsyncRateLimiter.failure(error));
                  }
                  return value;
                }));
  }

  /**
   * Sets {@code item} of {@code list} to {@code value} and increments the version, in one
   * transaction.
   */
  public void add(String list, String item, String value) {
    within(calls.transaction(hash, Protocol.addCommands(hash, list, item, value)));
  }

  /** Removes {@code item} from {@code list} and increments the version, in one transaction. */
  public void remove(String list, String item) {
    within(calls.transaction(hash, Protocol.removeCommands(hash, list, item)));
  }

  /**
   * The lists, {@code list -> item -> value}: the copy, checked against the version at most once
   * per {@code every}.
   */
  public synchronized Map<String, Map<String, String>> read() {
    long now = clock.getAsLong();
    if (nextCheck != Long.MIN_VALUE && now - nextCheck < 0) {
      return lists;
    }
    Object current = within(calls.call(List.of("HGET", hash, "version")));
    String seen = current == null ? null : Replies.text(current);
    if (version == null || !version.equals(seen)) {
      List<?> fields = Replies.list(within(calls.call(List.of("HGETALL", hash))));
      Map<String, String> all = new LinkedHashMap<>();
      for (int index = 0; index + 1 < fields.size(); index += 2) {
        all.put(Replies.text(fields.get(index)), Replies.text(fields.get(index + 1)));
      }
      lists = Protocol.lists(all);
      version = seen == null ? "" : seen;
    }
    nextCheck = now + every;
    return lists;
  }

  /** Whether {@code item} is on {@code list}. */
  public boolean contains(String list, String item) {
    return read().getOrDefault(list, Map.of()).containsKey(item);
  }
}
