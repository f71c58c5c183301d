package io.github.redisratelimit.load;

import java.util.Arrays;

/**
 * The local limit's parameters (docs/load.md, "The local limit"); {@link #DEFAULTS} is what every
 * package of the project ships. Times are whole microseconds, so that every package compares them
 * exactly.
 *
 * @param initial the limit before anything is measured, and while not congested the least that
 *     admits
 * @param floor the least it is cut to
 * @param ceiling the most it grows to
 * @param intervalUs how long an interval is
 * @param targetUs CoDel's target: a queue shorter than this is no queue
 * @param enter the standing intervals in a row that begin congestion
 * @param deep how many targets the fastest request took for congestion to begin at once
 * @param epochUs how long the no-load latency is kept (the least of this epoch and the last)
 * @param decay how fast the limit eases down while not congested
 * @param shares each class's share of the limit while congested, most important first
 * @param sojourn while congested, how many times its share of the target a request below the top
 *     class may have waited before it is decided ({@code Double.POSITIVE_INFINITY}: any, for a wait
 *     known only as a bound)
 */
public record LimitOptions(
    double initial,
    double floor,
    double ceiling,
    long intervalUs,
    long targetUs,
    int enter,
    double deep,
    long epochUs,
    double decay,
    double[] shares,
    double sojourn) {

  /** What every package ships. */
  public static final LimitOptions DEFAULTS =
      new LimitOptions(
          20.0,
          4.0,
          1000.0,
          100_000,
          5_000,
          4,
          4.0,
          30_000_000,
          0.95,
          new double[] {1.0, 0.6, 0.4, 0.2},
          1.0);

  public LimitOptions {
    if (shares == null || shares.length != 4) {
      throw new IllegalArgumentException("four shares, most important class first");
    }
    shares = shares.clone();
    if (!(floor > 0) || !(initial >= floor) || !(ceiling >= initial)) {
      throw new IllegalArgumentException("0 < floor <= initial <= ceiling");
    }
    if (intervalUs <= 0
        || targetUs <= 0
        || epochUs <= 0
        || enter < 1
        || !(deep > 0)
        || !(decay > 0 && decay <= 1)) {
      throw new IllegalArgumentException("positive times, enter >= 1, deep > 0, 0 < decay <= 1");
    }
    if (!(sojourn > 0)) {
      throw new IllegalArgumentException("sojourn > 0 (infinite for any)");
    }
  }

  @Override
  public double[] shares() {
    return shares.clone();
  }

  double share(int index) {
    return shares[index];
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof LimitOptions that
        && initial == that.initial
        && floor == that.floor
        && ceiling == that.ceiling
        && intervalUs == that.intervalUs
        && targetUs == that.targetUs
        && enter == that.enter
        && deep == that.deep
        && epochUs == that.epochUs
        && decay == that.decay
        && Arrays.equals(shares, that.shares)
        && sojourn == that.sojourn;
  }

  @Override
  public int hashCode() {
    return java.util.Objects.hash(
            initial, floor, ceiling, intervalUs, targetUs, enter, deep, epochUs, decay, sojourn)
        + Arrays.hashCode(shares);
  }

  @Override
  public String toString() {
    return "LimitOptions[initial="
        + initial
        + ", floor="
        + floor
        + ", ceiling="
        + ceiling
        + ", intervalUs="
        + intervalUs
        + ", targetUs="
        + targetUs
        + ", enter="
        + enter
        + ", deep="
        + deep
        + ", epochUs="
        + epochUs
        + ", decay="
        + decay
        + ", shares="
        + Arrays.toString(shares)
        + ", sojourn="
        + sojourn
        + "]";
  }
}
