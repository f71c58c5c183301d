package io.github.redisratelimit;

import java.time.Duration;
import java.util.List;
import java.util.Objects;

/**
 * One limit a request is checked against, named as the module's commands are. A check of one
 * limiter sends its own command; of several, one {@code RL.ALL ... DETAILS}, all or nothing (on a
 * Cluster, give their keys one hash slot: {@code {user:7}:burst}, {@code {user:7}:day}).
 *
 * <p>Every constructor checks its arguments: a key that is empty, a count or a limit under 1, a
 * period or window that is not positive get an {@link IllegalArgumentException} before any call.
 */
public sealed interface Limiter
    permits Limiter.Throttle, Limiter.Window, Limiter.Log, Limiter.Load, Limiter.Slots {

  /** The key the limiter's state lives in. */
  String key();

  /** The policy's name in the HTTP fields and the metrics. */
  String name();

  /** The limiter's own command, for a check of it alone. */
  String command();

  /** Its keyword in {@code RL.ALL}. */
  String inAll();

  /** Its arguments after the key (in {@code RL.ALL}, after its keyword), in milliseconds. */
  List<String> arguments();

  /** Its keywords after the options (its own command) or after its arguments ({@code RL.ALL}). */
  List<String> keywords();

  /** The window of its policy in the HTTP fields, in seconds. */
  double windowSeconds();

  /** GCRA ({@code CL.THROTTLE}): {@code count} per {@code period}, evenly spaced. */
  static Throttle rate(String key, long count, Duration period) {
    return new Throttle(key, 0, count, period, "burst", null);
  }

  /**
   * GCRA with redis-cell's arguments in its order: {@code count} per {@code period}, in bursts of
   * {@code maxBurst + 1}.
   */
  static Throttle throttle(String key, long maxBurst, long count, Duration period) {
    return new Throttle(key, maxBurst, count, period, "burst", null);
  }

  /** A sliding window counter ({@code RL.WINDOW}): {@code limit} per {@code window}. */
  static Window window(String key, long limit, Duration window) {
    return new Window(key, limit, window, Algorithm.SLIDING, "window");
  }

  /** The exact sliding log ({@code RL.LOG}): at most {@code limit} in any {@code window}. */
  static Log log(String key, long limit, Duration window) {
    return new Log(key, limit, window, "log");
  }

  /** A service's load gate in {@code RL.ALL}: its level sheds a share of each class. */
  static Load load(String key, Priority priority) {
    return new Load(key, priority);
  }

  /** At most {@code limit} leases held at once on {@code key}, each for {@code lease}. */
  static Slots slots(String key, long limit, Duration lease) {
    return new Slots(key, limit, lease, "slots");
  }

  /** A window counter's algorithm ({@code RL.WINDOW}'s keyword). */
  record Algorithm(String word, int buckets) {
    /** The previous window weighted by how much of it is still in the window (the default). */
    public static final Algorithm SLIDING = new Algorithm("SLIDING", 0);

    /** Windows on the clock: up to twice the limit across a boundary. */
    public static final Algorithm FIXED = new Algorithm("FIXED", 0);

    /** A window that begins with a key's first request. */
    public static final Algorithm ANCHORED = new Algorithm("ANCHORED", 0);

    public Algorithm {
      Objects.requireNonNull(word, "word");
      if (word.equals("BUCKETS") ? buckets < 1 : buckets != 0) {
        throw new IllegalArgumentException("BUCKETS takes a count of at least 1");
      }
    }

    /** The window in {@code n} buckets, each counted apart (Sentinel's LeapArray). */
    public static Algorithm buckets(int n) {
      return new Algorithm("BUCKETS", n);
    }

    /** The algorithm its keywords name: {@code SLIDING}, {@code FIXED}, {@code BUCKETS 10}. */
    public static Algorithm parse(String words) {
      String[] parts = words.trim().split("\\s+");
      return switch (parts[0].toUpperCase(java.util.Locale.ROOT)) {
        case "SLIDING" -> SLIDING;
        case "FIXED" -> FIXED;
        case "ANCHORED" -> ANCHORED;
        case "BUCKETS" -> {
          if (parts.length != 2) {
            throw new IllegalArgumentException("BUCKETS takes a count: " + words);
          }
          yield buckets(Integer.parseInt(parts[1]));
        }
        default -> throw new IllegalArgumentException("unknown window algorithm: " + words);
      };
    }

    List<String> words() {
      return buckets > 0 ? List.of(word, Long.toString(buckets)) : List.of(word);
    }
  }

  /** GCRA: {@code count} per {@code period} in bursts of {@code maxBurst + 1}. */
  record Throttle(
      String key, long maxBurst, long count, Duration period, String name, Duration warmup)
      implements Limiter {
    public Throttle {
      Checks.key(key);
      Checks.atLeast("max_burst", maxBurst, 0);
      Checks.atLeast("count", count, 1);
      Checks.positive("period", period);
      Checks.name(name);
      if (warmup != null) {
        Checks.positive("warmup", warmup);
      }
    }

    /** The same limit, named {@code name} in the HTTP fields and the metrics. */
    public Throttle named(String name) {
      return new Throttle(key, maxBurst, count, period, name, warmup);
    }

    /** The same limit letting {@code burst} requests through at once ({@code max_burst + 1}). */
    public Throttle burst(long burst) {
      Checks.atLeast("burst", burst, 1);
      return new Throttle(key, burst - 1, count, period, name, warmup);
    }

    /** Guava's SmoothWarmingUp: a cold limiter reaches its rate over {@code period} of use. */
    public Throttle warmup(Duration period) {
      return new Throttle(key, maxBurst, count, this.period, name, period);
    }

    @Override
    public String command() {
      return "CL.THROTTLE";
    }

    @Override
    public String inAll() {
      return "THROTTLE";
    }

    @Override
    public List<String> arguments() {
      return List.of(
          Long.toString(maxBurst), Long.toString(count), Long.toString(Protocol.millis(period)));
    }

    @Override
    public List<String> keywords() {
      return warmup == null ? List.of() : List.of("WARMUP", Long.toString(Protocol.millis(warmup)));
    }

    @Override
    public double windowSeconds() {
      return (maxBurst + 1) * Protocol.seconds(period) / count;
    }
  }

  /** A window counter: {@code limit} per {@code window}, by {@code algorithm}. */
  record Window(String key, long limit, Duration window, Algorithm algorithm, String name)
      implements Limiter {
    public Window {
      Checks.key(key);
      Checks.atLeast("limit", limit, 1);
      Checks.positive("window", window);
      Objects.requireNonNull(algorithm, "algorithm");
      Checks.name(name);
    }

    /** The same limit, named {@code name}. */
    public Window named(String name) {
      return new Window(key, limit, window, algorithm, name);
    }

    /** The same limit counted by {@code algorithm}. */
    public Window algorithm(Algorithm algorithm) {
      return new Window(key, limit, window, algorithm, name);
    }

    @Override
    public String command() {
      return "RL.WINDOW";
    }

    @Override
    public String inAll() {
      return "WINDOW";
    }

    @Override
    public List<String> arguments() {
      return List.of(Long.toString(limit), Long.toString(Protocol.millis(window)));
    }

    @Override
    public List<String> keywords() {
      return algorithm.words();
    }

    @Override
    public double windowSeconds() {
      return Protocol.seconds(window);
    }
  }

  /** The exact sliding log: at most {@code limit} in any {@code window}. */
  record Log(String key, long limit, Duration window, String name) implements Limiter {
    public Log {
      Checks.key(key);
      Checks.atLeast("limit", limit, 1);
      Checks.positive("window", window);
      Checks.name(name);
    }

    /** The same limit, named {@code name}. */
    public Log named(String name) {
      return new Log(key, limit, window, name);
    }

    @Override
    public String command() {
      return "RL.LOG";
    }

    @Override
    public String inAll() {
      return "LOG";
    }

    @Override
    public List<String> arguments() {
      return List.of(Long.toString(limit), Long.toString(Protocol.millis(window)));
    }

    @Override
    public List<String> keywords() {
      return List.of();
    }

    @Override
    public double windowSeconds() {
      return Protocol.seconds(window);
    }
  }

  /**
   * The load gate of a service ({@code LOAD priority} in {@code RL.ALL}): {@code key} is the
   * service's, which its instances' reports fill; a request its level sheds is refused with nothing
   * written ({@link RateLimit#shedLevel()}).
   */
  record Load(String key, Priority priority) implements Limiter {
    public Load {
      Checks.key(key);
      Objects.requireNonNull(priority, "priority");
    }

    @Override
    public String name() {
      return "load";
    }

    @Override
    public String command() {
      return "RL.ALL";
    }

    @Override
    public String inAll() {
      return "LOAD";
    }

    @Override
    public List<String> arguments() {
      return List.of(priority.wireName());
    }

    @Override
    public List<String> keywords() {
      return List.of();
    }

    @Override
    public double windowSeconds() {
      return 0;
    }
  }

  /**
   * A concurrency limit in {@code RL.ALL}: at most {@code limit} leases held at once on {@code
   * key}, each for {@code lease}, taken only if every other limiter admits; {@link
   * RateLimit#leaseId()} releases or renews it.
   */
  record Slots(String key, long limit, Duration lease, String name) implements Limiter {
    public Slots {
      Checks.key(key);
      Checks.atLeast("limit", limit, 1);
      Checks.positive("lease", lease);
      Checks.name(name);
    }

    /** The same limit, named {@code name}. */
    public Slots named(String name) {
      return new Slots(key, limit, lease, name);
    }

    @Override
    public String command() {
      return "RL.ALL";
    }

    @Override
    public String inAll() {
      return "LEASE";
    }

    @Override
    public List<String> arguments() {
      return List.of(Long.toString(limit), Long.toString(Protocol.millis(lease)));
    }

    @Override
    public List<String> keywords() {
      return List.of();
    }

    @Override
    public double windowSeconds() {
      return Protocol.seconds(lease);
    }
  }
}
