package io.github.redisratelimit;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A request's options (docs/options.md): immutable, each fluent method a changed copy. At most one
 * of {@code delay}, {@code atMost} and {@code force}; none of them with {@code refund}; {@code
 * block} with neither {@code delay} nor {@code force}. A combination the module refuses is refused
 * here, with an {@link IllegalArgumentException}, before any call.
 */
public final class Options {
  private final long quantity;
  private final boolean refund;
  private final Duration block;
  private final Duration delay;
  private final boolean atMost;
  private final boolean force;
  private final boolean readOnly;

  private Options(
      long quantity,
      boolean refund,
      Duration block,
      Duration delay,
      boolean atMost,
      boolean force,
      boolean readOnly) {
    Checks.atLeast("quantity", quantity, 0);
    if (block != null) {
      Checks.positive("block", block);
    }
    if (delay != null) {
      Checks.notNegative("delay", delay);
    }
    int settles = (delay != null ? 1 : 0) + (atMost ? 1 : 0) + (force ? 1 : 0);
    if (settles > 1) {
      throw new IllegalArgumentException("at most one of delay, atMost and force");
    }
    if (refund && settles > 0) {
      throw new IllegalArgumentException("refund takes none of delay, atMost and force");
    }
    if (block != null && (delay != null || force)) {
      throw new IllegalArgumentException("block takes neither delay nor force");
    }
    this.quantity = quantity;
    this.refund = refund;
    this.block = block;
    this.delay = delay;
    this.atMost = atMost;
    this.force = force;
    this.readOnly = readOnly;
  }

  /** One request, no option. */
  public static Options defaults() {
    return new Options(1, false, null, null, false, false, false);
  }

  /** The same, weighing {@code quantity} (0 asks without taking). */
  public Options quantity(long quantity) {
    return new Options(quantity, refund, block, delay, atMost, force, readOnly);
  }

  /** The same, giving the quantity back instead of taking it. */
  public Options refund() {
    return new Options(quantity, true, block, delay, atMost, force, readOnly);
  }

  /** The same; a refusal keeps the key refused for {@code block} (the penalty box). */
  public Options block(Duration block) {
    return new Options(
        quantity, refund, Objects.requireNonNull(block, "block"), delay, atMost, force, readOnly);
  }

  /** The same; a request that does not fit waits its turn, up to {@code delay}. */
  public Options delay(Duration delay) {
    return new Options(
        quantity, refund, block, Objects.requireNonNull(delay, "delay"), atMost, force, readOnly);
  }

  /** The same, taking what fits of the quantity, at least 1. */
  public Options atMost() {
    return new Options(quantity, refund, block, delay, true, force, readOnly);
  }

  /** The same, taking it all and owing what does not fit. */
  public Options force() {
    return new Options(quantity, refund, block, delay, atMost, true, readOnly);
  }

  /** The same, answered without writing (the {@code _RO} variant). */
  public Options readOnly() {
    return new Options(quantity, refund, block, delay, atMost, force, true);
  }

  /** The quantity the request weighs. */
  public long quantity() {
    return quantity;
  }

  /** Whether the quantity is given back. */
  public boolean isRefund() {
    return refund;
  }

  /** How long a refusal keeps the key refused; null for no block. */
  public Duration block() {
    return block;
  }

  /** How long a request that does not fit may wait; null when it is refused instead. */
  public Duration delay() {
    return delay;
  }

  /** Whether what fits is taken. */
  public boolean isAtMost() {
    return atMost;
  }

  /** Whether it is all taken, owing what does not fit. */
  public boolean isForce() {
    return force;
  }

  /** Whether it is answered without writing. */
  public boolean isReadOnly() {
    return readOnly;
  }

  List<String> words() {
    List<String> words = new ArrayList<>(List.of(Long.toString(quantity), "MS"));
    if (block != null) {
      words.add("BLOCK");
      words.add(Long.toString(Protocol.millis(block)));
    }
    if (delay != null) {
      words.add("DELAY");
      words.add(Long.toString(Math.round(delay.toNanos() / 1e6)));
    }
    if (atMost) {
      words.add("AT_MOST");
    }
    if (force) {
      words.add("FORCE");
    }
    if (refund) {
      words.add("REFUND");
    }
    return words;
  }

  boolean hasSixth() {
    return delay != null || atMost;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof Options that
        && quantity == that.quantity
        && refund == that.refund
        && Objects.equals(block, that.block)
        && Objects.equals(delay, that.delay)
        && atMost == that.atMost
        && force == that.force
        && readOnly == that.readOnly;
  }

  @Override
  public int hashCode() {
    return Objects.hash(quantity, refund, block, delay, atMost, force, readOnly);
  }

  @Override
  public String toString() {
    return "Options" + words() + (readOnly ? " read-only" : "");
  }
}
