package io.github.redisratelimit;

/** What a decision is when the server fails: the failure policy. */
public enum OnError {
  /** Throw {@link ServerUnavailableException} (the default, as the drivers do). */
  RAISE,
  /** Admit, with {@link RateLimit#failed()} set and nothing counted (Kong's fault_tolerant). */
  ALLOW,
  /** Refuse, with {@link RateLimit#failed()} set; the web adapters answer 503. */
  DENY
}
