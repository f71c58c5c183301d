package io.github.redisratelimit;

import java.util.Locale;

/**
 * A request's priority class, most important first (Google's criticality): what load shedding sheds
 * from the bottom. The wire names are lower case ({@code critical_plus}, ...).
 */
public enum Priority {
  /** What must never be shed: payments, health checks. */
  CRITICAL_PLUS,
  /** The product's main requests. */
  CRITICAL,
  /** Background work a user waits for. */
  SHEDDABLE_PLUS,
  /** Prefetch, batch, retries; what a request that names no class is. */
  SHEDDABLE;

  /** The name the module and the HTTP header use: {@code critical_plus} and so on. */
  public String wireName() {
    return name().toLowerCase(Locale.ROOT);
  }

  /**
   * The class {@code name} names (any case, surrounding spaces ignored).
   *
   * @throws IllegalArgumentException when it names none of the four
   */
  public static Priority parse(String name) {
    if (name != null) {
      String wanted = name.trim().toUpperCase(Locale.ROOT);
      for (Priority priority : values()) {
        if (priority.name().equals(wanted)) {
          return priority;
        }
      }
    }
    throw new IllegalArgumentException(
        "unknown priority " + name + ": one of critical_plus, critical, sheddable_plus, sheddable");
  }

  /** The class {@code name} names, or {@code fallback} when it names none (a header left out). */
  public static Priority orElse(String name, Priority fallback) {
    try {
      return parse(name);
    } catch (IllegalArgumentException unknown) {
      return fallback;
    }
  }
}
