package io.github.redisratelimit;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * Refusals answered locally while they stand: at most {@code maxKeys}, the least recently used out.
 * It only ever refuses what the server refused, never for longer than the server said, for the same
 * command and a quantity not smaller.
 */
final class DenyCache {
  private record Entry(long until, long quantity, RateLimit result, long cachedAt) {}

  private final int maxKeys;
  private final LongSupplier clock;
  private final LinkedHashMap<List<String>, Entry> entries = new LinkedHashMap<>(16, 0.75f, true);

  DenyCache(int maxKeys, LongSupplier clock) {
    this.maxKeys = maxKeys;
    this.clock = clock;
  }

  synchronized RateLimit get(List<String> key, long quantity) {
    Entry entry = entries.get(key);
    if (entry == null) {
      return null;
    }
    long now = clock.getAsLong();
    if (now - entry.until >= 0) {
      entries.remove(key);
      return null;
    }
    if (quantity < entry.quantity) {
      return null;
    }
    return entry.result.aged(
        Duration.ofNanos(now - entry.cachedAt), Duration.ofNanos(entry.until - now));
  }

  synchronized void put(List<String> key, long quantity, RateLimit result) {
    if (result.allowed() || result.retryAfter() == null || result.retryAfter().isZero()) {
      return;
    }
    long now = clock.getAsLong();
    entries.put(key, new Entry(now + result.retryAfter().toNanos(), quantity, result, now));
    if (entries.size() > maxKeys) {
      Map.Entry<List<String>, Entry> eldest = entries.entrySet().iterator().next();
      entries.remove(eldest.getKey());
    }
  }
}
