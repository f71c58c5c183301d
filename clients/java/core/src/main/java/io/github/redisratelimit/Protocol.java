package io.github.redisratelimit;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * What the client sends and reads, with no I/O: each limiter's and option's words, each reply read
 * into a typed result, and the leases', load reports', counts', {@code RL.TOP}'s and the shared
 * lists' commands and replies. clients/conformance.json pins all of it, the table every package of
 * the project is tested against. Times are asked of the module in milliseconds.
 */
public final class Protocol {
  private Protocol() {}

  /** A duration as whole milliseconds, at least 1. */
  static long millis(Duration duration) {
    return Math.max(1, Math.round(duration.toNanos() / 1e6));
  }

  static double seconds(Duration duration) {
    return duration.toNanos() / 1e9;
  }

  /**
   * The one command a request against {@code limiters} takes: the limiter's own, or {@code RL.ALL}
   * with {@code DETAILS}.
   *
   * @throws IllegalArgumentException for no limiter
   */
  public static List<String> command(List<? extends Limiter> limiters, Options options) {
    if (limiters == null || limiters.isEmpty()) {
      throw new IllegalArgumentException("at least one limiter");
    }
    String suffix = options.isReadOnly() ? "_RO" : "";
    boolean onlyInAll =
        limiters.stream()
            .anyMatch(one -> one instanceof Limiter.Load || one instanceof Limiter.Slots);
    List<String> words = new ArrayList<>();
    if (limiters.size() == 1 && !onlyInAll) {
      Limiter one = limiters.get(0);
      words.add(one.command() + suffix);
      words.add(one.key());
      words.addAll(one.arguments());
      words.addAll(options.words());
      words.addAll(one.keywords());
      return words;
    }
    words.add("RL.ALL" + suffix);
    words.add(Integer.toString(limiters.size()));
    limiters.forEach(one -> words.add(one.key()));
    for (Limiter one : limiters) {
      words.add(one.inAll());
      words.addAll(one.arguments());
      words.addAll(one.keywords());
    }
    words.addAll(options.words());
    words.add("DETAILS");
    return words;
  }

  /**
   * The typed result of {@code command(limiters, options)}'s reply: the five integers, the sixth (a
   * wait, a quantity granted, a lease's id), then with a load gate the level that shed the request,
   * then each limiter's own ({@code DETAILS}).
   */
  public static RateLimit result(List<?> reply, List<? extends Limiter> limiters, Options options) {
    boolean slots = limiters.stream().anyMatch(one -> one instanceof Limiter.Slots);
    Long sixth = options.hasSixth() || slots ? Replies.integer(reply.get(5)) : null;
    long waitMs = options.delay() != null && sixth != null ? sixth : 0;
    Long granted = options.isAtMost() ? sixth : null;
    int first = sixth != null ? 6 : 5;
    boolean gate = limiters.stream().anyMatch(one -> one instanceof Limiter.Load);
    int shedLevel = gate ? (int) Replies.integer(reply.get(first)) : 0;
    first += gate ? 1 : 0;
    List<RateLimit> each = new ArrayList<>();
    if (limiters.size() > 1) {
      for (int index = 0; index < limiters.size() && first + index < reply.size(); index++) {
        if (!(limiters.get(index) instanceof Limiter.Load)) {
          each.add(
              RateLimit.fromFields(Replies.list(reply.get(first + index)), List.of(), 0, null));
        }
      }
    }
    RateLimit outcome = RateLimit.fromFields(reply, each, waitMs, granted);
    return outcome.with(shedLevel, slots && sixth != null ? sixth : 0);
  }

  /** The limiters that limit a rate (the HTTP fields' policies): not a load gate. */
  static List<Limiter> rateLimiters(List<? extends Limiter> limiters) {
    return limiters.stream()
        .filter(one -> !(one instanceof Limiter.Load))
        .map(one -> (Limiter) one)
        .toList();
  }

  /** {@code RL.ACQUIRE} (or {@code RL.ACQUIRE_RO}, which takes nothing). */
  public static List<String> leaseCommand(
      String key, long limit, Duration lease, long quantity, boolean readOnly) {
    Checks.key(key);
    Checks.atLeast("limit", limit, 1);
    Checks.positive("lease", lease);
    Checks.atLeast("quantity", quantity, 0);
    return List.of(
        readOnly ? "RL.ACQUIRE_RO" : "RL.ACQUIRE",
        key,
        Long.toString(limit),
        Long.toString(millis(lease)),
        Long.toString(quantity),
        "MS");
  }

  /** {@code RL.RELEASE}: frees a held lease. */
  public static List<String> releaseCommand(String key, long leaseId) {
    Checks.key(key);
    return List.of("RL.RELEASE", key, Long.toString(leaseId));
  }

  /** {@code RL.RENEW}: extends a held lease to {@code lease} from now. */
  public static List<String> renewCommand(String key, long leaseId, Duration lease) {
    Checks.key(key);
    Checks.positive("lease", lease);
    return List.of("RL.RENEW", key, Long.toString(leaseId), Long.toString(millis(lease)), "MS");
  }

  /** {@code RL.ACQUIRE}'s reply: the five fields and the lease's id. */
  public static Lease lease(List<?> reply) {
    return new Lease(
        RateLimit.fromFields(reply, List.of(), 0, null), Replies.integer(reply.get(5)));
  }

  /** {@code RL.LOAD.REPORT}: an instance's factors, counting for {@code ttl}. */
  public static List<String> reportCommand(
      String key, String instance, Duration ttl, Map<String, Double> factors) {
    Checks.key(key);
    List<String> words =
        new ArrayList<>(List.of("RL.LOAD.REPORT", key, instance, Long.toString(millis(ttl))));
    factors.forEach(
        (name, value) -> {
          double finite =
              value == null || value.isNaN() ? 0.0 : Math.min(Math.max(value, 0.0), 1e15);
          words.add(name);
          words.add(sixDigits(finite));
        });
    return words;
  }

  /** Six significant digits, as C's {@code %.6g} and the other packages write them. */
  static String sixDigits(double value) {
    if (value == 0) {
      return "0";
    }
    String text = String.format(Locale.ROOT, "%.6g", value);
    if (text.contains("e")) {
      String[] parts = text.split("e");
      String mantissa =
          parts[0].contains(".") ? parts[0].replaceAll("0+$", "").replaceAll("\\.$", "") : parts[0];
      int exponent = Integer.parseInt(parts[1]);
      return mantissa
          + "e"
          + (exponent < 0 ? "-" : "+")
          + (Math.abs(exponent) < 10 ? "0" : "")
          + Math.abs(exponent);
    }
    if (text.contains(".")) {
      text = text.replaceAll("0+$", "").replaceAll("\\.$", "");
    }
    return text;
  }

  /** {@code RL.LOAD.REPORT}'s reply: {@code [level, instances, share x 4]}. */
  public static LoadStanding standing(List<?> reply) {
    double[] shares = new double[4];
    for (int index = 0; index < 4; index++) {
      shares[index] = Replies.decimal(reply.get(2 + index));
    }
    return new LoadStanding(
        (int) Replies.integer(reply.get(0)), (int) Replies.integer(reply.get(1)), shares);
  }

  /** {@code RL.WINDOW.COUNTS} or {@code RL.LOG.COUNTS}. */
  public static List<String> countsCommand(Limiter limiter) {
    if (limiter instanceof Limiter.Log log) {
      return List.of("RL.LOG.COUNTS", log.key(), Long.toString(millis(log.window())), "MS");
    }
    if (limiter instanceof Limiter.Window window && window.algorithm().buckets() == 0) {
      return List.of(
          "RL.WINDOW.COUNTS",
          window.key(),
          Long.toString(millis(window.window())),
          window.algorithm().word(),
          "MS");
    }
    throw new IllegalArgumentException(
        "counts are read from a FIXED, SLIDING or ANCHORED window, or a log");
  }

  /** The typed result of {@code countsCommand(limiter)}'s reply. */
  public static Counts counts(Limiter limiter, List<?> reply) {
    if (limiter instanceof Limiter.Log) {
      return new Counts.LogCounts(
          Replies.integer(reply.get(0)),
          Duration.ofMillis(Replies.integer(reply.get(1))),
          Duration.ofMillis(Replies.integer(reply.get(2))));
    }
    return new Counts.WindowCounts(
        Replies.integer(reply.get(0)),
        Duration.ofMillis(Replies.integer(reply.get(1))),
        Replies.integer(reply.get(2)),
        Duration.ofMillis(Replies.integer(reply.get(3))));
  }

  /**
   * {@code RL.TOP}'s replies from every primary, merged: a key lives on one primary, so its rows
   * are summed only while a slot moves. Most refused first, ties by key.
   */
  public static List<TopKey> topKeys(List<?> replies, int count) {
    Map<String, long[]> merged = new LinkedHashMap<>();
    for (Object reply : replies) {
      for (Object row : Replies.list(reply)) {
        List<?> fields = Replies.list(row);
        long[] sums = merged.computeIfAbsent(Replies.text(fields.get(0)), key -> new long[2]);
        sums[0] += Replies.integer(fields.get(1));
        sums[1] += Replies.integer(fields.get(2));
      }
    }
    return merged.entrySet().stream()
        .sorted(
            Comparator.comparingLong((Map.Entry<String, long[]> entry) -> -entry.getValue()[0])
                .thenComparing(Map.Entry::getKey))
        .limit(count)
        .map(entry -> new TopKey(entry.getKey(), entry.getValue()[0], entry.getValue()[1]))
        .toList();
  }

  /** A shared list's item set, and the version incremented, in one transaction. */
  public static List<List<String>> addCommands(
      String hash, String list, String item, String value) {
    return List.of(
        List.of("HSET", hash, list + ":" + item, value), List.of("HINCRBY", hash, "version", "1"));
  }

  /** A shared list's item removed, and the version incremented, in one transaction. */
  public static List<List<String>> removeCommands(String hash, String list, String item) {
    return List.of(
        List.of("HDEL", hash, list + ":" + item), List.of("HINCRBY", hash, "version", "1"));
  }

  /** The lists of a shared hash: {@code list -> item -> value}, the version left out. */
  static Map<String, Map<String, String>> lists(Map<String, String> hash) {
    Map<String, Map<String, String>> lists = new LinkedHashMap<>();
    hash.forEach(
        (field, value) -> {
          int colon = field.indexOf(':');
          if (colon > 0) {
            lists
                .computeIfAbsent(field.substring(0, colon), name -> new LinkedHashMap<>())
                .put(field.substring(colon + 1), value);
          }
        });
    return lists;
  }

  /** The key a command routes by on a Cluster: after its name, or after RL.ALL's count. */
  static String routingKey(List<String> words) {
    if (words.size() < 2) {
      return null;
    }
    String name = words.get(0).toUpperCase(Locale.ROOT);
    if (name.startsWith("RL.ALL")) {
      return words.get(2);
    }
    return name.equals("RL.TOP") ? null : words.get(1);
  }
}
