package io.github.redisratelimit;

import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Replies as every driver gives them, read one way: integers as {@code Long}, bulk strings as
 * {@code String} (Jedis' {@code byte[]} too), arrays as {@code List}.
 */
final class Replies {
  private Replies() {}

  static long integer(Object value) {
    if (value instanceof Number number) {
      return number.longValue();
    }
    return Long.parseLong(text(value));
  }

  static double decimal(Object value) {
    if (value instanceof Number number) {
      return number.doubleValue();
    }
    return Double.parseDouble(text(value));
  }

  static String text(Object value) {
    if (value instanceof byte[] bytes) {
      return new String(bytes, StandardCharsets.UTF_8);
    }
    return String.valueOf(value);
  }

  static List<?> list(Object value) {
    if (value instanceof List<?> list) {
      return list;
    }
    throw new IllegalStateException("expected an array reply, not " + value);
  }
}
