package io.github.redisratelimit;

import java.time.Duration;

/** What a window or a log counts ({@code RL.WINDOW.COUNTS}, {@code RL.LOG.COUNTS}). */
public sealed interface Counts permits Counts.WindowCounts, Counts.LogCounts {

  /**
   * A {@code FIXED}, {@code SLIDING} or {@code ANCHORED} window's counts.
   *
   * @param previous the previous window's count (0 for FIXED)
   * @param previousEndsIn how long it still weighs
   * @param current the current window's count
   * @param currentEndsIn how long it still counts
   */
  record WindowCounts(long previous, Duration previousEndsIn, long current, Duration currentEndsIn)
      implements Counts {}

  /**
   * A log's counts in its window.
   *
   * @param count the units in the window
   * @param oldestEndsIn until the oldest entry in the window leaves it
   * @param newestEndsIn until the newest does (the log's reset)
   */
  record LogCounts(long count, Duration oldestEndsIn, Duration newestEndsIn) implements Counts {}
}
