package io.github.redisratelimit;

import java.util.Arrays;

/**
 * A service's level and what it admits, as a report tells: the share of each priority class, most
 * important first, from 0 to 1.
 */
public record LoadStanding(int level, int instances, double[] shares) {
  /** The standing before any report, and after the last one ended: nothing shed. */
  public static final LoadStanding NOTHING_SHED = new LoadStanding(0, 0, new double[] {1, 1, 1, 1});

  public LoadStanding {
    shares = shares.clone();
  }

  /** The share the level admits of {@code priority}. */
  public double share(Priority priority) {
    return shares[priority.ordinal()];
  }

  @Override
  public double[] shares() {
    return shares.clone();
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof LoadStanding that
        && level == that.level
        && instances == that.instances
        && Arrays.equals(shares, that.shares);
  }

  @Override
  public int hashCode() {
    return 31 * (31 * level + instances) + Arrays.hashCode(shares);
  }

  @Override
  public String toString() {
    return "LoadStanding[level="
        + level
        + ", instances="
        + instances
        + ", shares="
        + Arrays.toString(shares)
        + "]";
  }
}
