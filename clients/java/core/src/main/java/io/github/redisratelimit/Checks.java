package io.github.redisratelimit;

import java.time.Duration;

/** The argument checks every constructor runs: a bad argument never reaches the server. */
final class Checks {
  private Checks() {}

  static void key(String key) {
    if (key == null || key.isEmpty()) {
      throw new IllegalArgumentException("a limiter's key is a non-empty string");
    }
  }

  static void name(String name) {
    if (name == null || name.isEmpty() || name.indexOf('"') >= 0) {
      throw new IllegalArgumentException("a policy's name is a non-empty string without '\"'");
    }
  }

  static void atLeast(String what, long value, long least) {
    if (value < least) {
      throw new IllegalArgumentException(what + " is at least " + least + ", not " + value);
    }
  }

  static void positive(String what, Duration duration) {
    if (duration == null || duration.isNegative() || duration.isZero()) {
      throw new IllegalArgumentException(what + " is a positive duration, not " + duration);
    }
  }

  static void notNegative(String what, Duration duration) {
    if (duration == null || duration.isNegative()) {
      throw new IllegalArgumentException(what + " is a duration of 0 or more, not " + duration);
    }
  }
}
