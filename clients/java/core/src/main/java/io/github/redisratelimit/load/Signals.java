package io.github.redisratelimit.load;

import java.io.IOException;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryPoolMXBean;
import java.lang.management.MemoryType;
import java.lang.management.MemoryUsage;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.function.LongSupplier;

/**
 * What an instance measures of itself between two reports of its load, with no code from the user,
 * the JVM's own signals among them:
 *
 * <ul>
 *   <li>{@code cpu}: in a container with a CPU quota (cgroup v2 {@code cpu.max}), the cgroup's use
 *       over the quota; otherwise the process's CPU time over the cores it may use;
 *   <li>{@code memory}: the larger of the heap in use after the last collection over the heap's
 *       maximum (the tenured pool's, what a collection could not free) and the container's memory
 *       over its limit (the host's without one);
 *   <li>{@code load}: the host's run queue over its cores;
 *   <li>{@code inflight}, the mean {@code latency} and the {@code errors} (5xx) share of the
 *       interval; over the last 10 s, the {@code requests} and their {@code successes}, and from
 *       the seconds the local limit was congested only, {@code max_rps} and {@code min_rt} (the
 *       latency of their mix of requests with no queue: {@link #noLoadLatency});
 *   <li>{@code gc}: the share of time in collections since the last report, reported only when
 *       asked ({@link #withGc()}): a policy must declare it ({@code FACTOR gc MEAN}).
 * </ul>
 *
 * Thread-safe: a servlet container's requests run on many threads.
 */
public final class Signals {
  private static final double WINDOW = 10;

  /** The routes a second keeps apart for {@code min_rt}; past them, the others share one entry. */
  static final int ROUTES_KEPT = 32;

  private static final Object OTHER_ROUTES = new Object();

  private final LongSupplier clock;
  private final Path cgroup;
  private final boolean gc;
  private long inflight;
  private double latencies;
  private long finished;
  private long failed;
  private final ArrayDeque<Second> seconds = new ArrayDeque<>();
  private long lastCpuAt = Long.MIN_VALUE;
  private double lastCpuUsed;
  private long lastGcAt = Long.MIN_VALUE;
  private long lastGcMillis;

  /** A route's requests completed in a second, and the least latency (ms) of them. */
  private static final class RouteSecond {
    long completed;
    double fastest = Double.POSITIVE_INFINITY;
  }

  private static final class Second {
    final long second;
    long completed;
    final Map<Object, RouteSecond> routes = new HashMap<>();
    long requests;
    long successes;
    boolean busy;

    Second(long second) {
      this.second = second;
    }
  }

  /** Signals on the system's clock and cgroup. */
  public Signals() {
    this(System::nanoTime, Path.of("/sys/fs/cgroup"), false);
  }

  Signals(LongSupplier clock, Path cgroup, boolean gc) {
    this.clock = clock;
    this.cgroup = cgroup;
    this.gc = gc;
    cpu(); // the first reading is the baseline
  }

  /** The same signals on {@code clock} (nanoseconds): the tests'. */
  public Signals withClock(LongSupplier clock) {
    return new Signals(clock, cgroup, gc);
  }

  /** The same signals, reporting the share of time in collections as {@code gc}. */
  public Signals withGc() {
    return new Signals(clock, cgroup, true);
  }

  private Second second(long now) {
    long second = Math.floorDiv(now, 1_000_000_000L);
    if (seconds.isEmpty() || seconds.peekLast().second != second) {
      seconds.addLast(new Second(second));
    }
    while (!seconds.isEmpty() && seconds.peekFirst().second <= second - (long) WINDOW) {
      seconds.removeFirst();
    }
    return seconds.peekLast();
  }

  /** A request began. */
  public synchronized void started() {
    inflight += 1;
  }

  /** A request ended with an answer that says nothing of the service: it leaves, nothing else. */
  public synchronized void left() {
    inflight = Math.max(0, inflight - 1);
  }

  /**
   * A request ended after {@code latencyNanos} with HTTP {@code status} (5xx: failed); {@code busy}
   * when the local limit was congested (its throughput was the capacity, not the demand).
   */
  public void done(long latencyNanos, int status, boolean busy) {
    done(latencyNanos, status, busy, null);
  }

  /**
   * {@link #done(long, int, boolean)} for a request of {@code route} (null: none named), whose
   * least latency is kept apart ({@code min_rt}).
   */
  public synchronized void done(long latencyNanos, int status, boolean busy, String route) {
    inflight = Math.max(0, inflight - 1);
    double millis = latencyNanos / 1e6;
    latencies += millis;
    finished += 1;
    boolean fail = status >= 500;
    failed += fail ? 1 : 0;
    Second second = second(clock.getAsLong());
    second.completed += 1;
    RouteSecond kept = second.routes.get(route);
    if (kept == null) {
      Object key = second.routes.size() < ROUTES_KEPT ? route : OTHER_ROUTES;
      kept = second.routes.computeIfAbsent(key, absent -> new RouteSecond());
    }
    kept.completed += 1;
    kept.fastest = Math.min(kept.fastest, millis);
    second.requests += 1;
    second.successes += fail ? 0 : 1;
    second.busy |= busy;
  }

  /** The factors to report now; the interval starts again. */
  public Map<String, Double> sample() {
    OptionalDouble cpu = cpu();
    OptionalDouble memory = memory();
    OptionalDouble load = load();
    OptionalDouble gcShare = gc ? gcShare() : OptionalDouble.empty();
    synchronized (this) {
      second(clock.getAsLong());
      Map<String, Double> factors = new LinkedHashMap<>();
      factors.put("inflight", (double) inflight);
      cpu.ifPresent(value -> factors.put("cpu", value));
      memory.ifPresent(value -> factors.put("memory", value));
      load.ifPresent(value -> factors.put("load", value));
      gcShare.ifPresent(value -> factors.put("gc", value));
      if (finished > 0) {
        factors.put("latency", latencies / finished);
        factors.put("errors", (double) failed / finished);
      }
      long most = 0;
      long requests = 0;
      long successes = 0;
      List<Second> busy = new ArrayList<>();
      for (Second second : seconds) {
        if (second.completed > 0 && second.busy) {
          most = Math.max(most, second.completed);
          busy.add(second);
        }
        requests += second.requests;
        successes += second.successes;
      }
      if (most > 0) {
        factors.put("max_rps", (double) most);
        factors.put("min_rt", noLoadLatency(busy));
      }
      factors.put("requests", (double) requests);
      factors.put("successes", (double) successes);
      latencies = 0;
      finished = 0;
      failed = 0;
      return factors;
    }
  }

  /**
   * The latency (ms) of the busy seconds' mix of requests with no queue, BBR's min RTT: each
   * route's least latency over them (its no-load latency), weighted by how many requests it
   * completed in them. With one route, its least latency; with a fast health check beside slow
   * work, the work's, not the check's (the least latency of all would shrink the pipe to what the
   * check holds, and read a service at its capacity as many times over it).
   */
  private static double noLoadLatency(List<Second> busy) {
    Map<Object, RouteSecond> routes = new HashMap<>();
    for (Second second : busy) {
      second.routes.forEach(
          (route, kept) -> {
            RouteSecond total = routes.computeIfAbsent(route, absent -> new RouteSecond());
            total.completed += kept.completed;
            total.fastest = Math.min(total.fastest, kept.fastest);
          });
    }
    double weighted = 0;
    long completed = 0;
    for (RouteSecond total : routes.values()) {
      weighted += total.completed * total.fastest;
      completed += total.completed;
    }
    return weighted / completed;
  }

  private static String read(Path path) {
    try {
      return Files.readString(path).trim();
    } catch (IOException | RuntimeException missing) {
      return null;
    }
  }

  /** The cgroup's CPU quota in cores, or empty without one. */
  private OptionalDouble quota() {
    String max = read(cgroup.resolve("cpu.max"));
    if (max == null) {
      return OptionalDouble.empty();
    }
    String[] parts = max.split("\\s+");
    if (parts.length != 2 || parts[0].equals("max")) {
      return OptionalDouble.empty();
    }
    return OptionalDouble.of(
        Math.max(Double.parseDouble(parts[0]) / Double.parseDouble(parts[1]), 0.01));
  }

  /** The CPU in use since the last reading, 0 to 1 of what the process may use. */
  private synchronized OptionalDouble cpu() {
    OptionalDouble quota = quota();
    double used;
    double cores;
    if (quota.isPresent()) {
      String stat = read(cgroup.resolve("cpu.stat"));
      if (stat == null) {
        return OptionalDouble.empty();
      }
      used = -1;
      for (String line : stat.split("\n")) {
        if (line.startsWith("usage_usec ")) {
          used = Long.parseLong(line.substring(11).trim()) / 1e6;
        }
      }
      if (used < 0) {
        return OptionalDouble.empty();
      }
      cores = quota.getAsDouble();
    } else if (ManagementFactory.getOperatingSystemMXBean()
        instanceof com.sun.management.OperatingSystemMXBean os) {
      used = os.getProcessCpuTime() / 1e9;
      cores = Runtime.getRuntime().availableProcessors();
    } else {
      return OptionalDouble.empty();
    }
    long now = clock.getAsLong();
    long lastAt = lastCpuAt;
    double lastUsed = lastCpuUsed;
    lastCpuAt = now;
    lastCpuUsed = used;
    if (lastAt == Long.MIN_VALUE || now <= lastAt) {
      return OptionalDouble.empty();
    }
    double share = (used - lastUsed) / ((now - lastAt) / 1e9 * cores);
    return OptionalDouble.of(Math.max(0, Math.min(1, share)));
  }

  /**
   * The heap after the last collection, or the container's (host's) memory, whichever is fuller.
   */
  private OptionalDouble memory() {
    double share = -1;
    for (MemoryPoolMXBean pool : ManagementFactory.getMemoryPoolMXBeans()) {
      MemoryUsage collected = pool.getType() == MemoryType.HEAP ? pool.getCollectionUsage() : null;
      long max = collected == null ? -1 : pool.getUsage().getMax();
      if (collected != null && max > 0 && isTenured(pool.getName())) {
        share = Math.max(share, (double) collected.getUsed() / max);
      }
    }
    String current = read(cgroup.resolve("memory.current"));
    String limit = read(cgroup.resolve("memory.max"));
    if (current != null && limit != null && !limit.equals("max")) {
      share =
          Math.max(
              share,
              Math.min(1, Double.parseDouble(current) / Math.max(1, Double.parseDouble(limit))));
    } else {
      String meminfo = read(Path.of("/proc/meminfo"));
      if (meminfo != null) {
        double total = field(meminfo, "MemTotal");
        double available = field(meminfo, "MemAvailable");
        if (total > 0 && available >= 0) {
          share = Math.max(share, (total - available) / total);
        }
      }
    }
    return share < 0 ? OptionalDouble.empty() : OptionalDouble.of(Math.max(0, Math.min(1, share)));
  }

  private static boolean isTenured(String pool) {
    return pool.contains("Old Gen")
        || pool.contains("Tenured")
        || pool.equals("G1 Old Gen")
        || pool.contains("ZHeap")
        || pool.contains("ZGC Old")
        || pool.contains("Shenandoah");
  }

  private static double field(String meminfo, String name) {
    for (String line : meminfo.split("\n")) {
      if (line.startsWith(name + ":")) {
        return Double.parseDouble(line.substring(name.length() + 1).trim().split("\\s+")[0]);
      }
    }
    return -1;
  }

  private static OptionalDouble load() {
    double load1 = ManagementFactory.getOperatingSystemMXBean().getSystemLoadAverage();
    if (load1 < 0) {
      return OptionalDouble.empty();
    }
    return OptionalDouble.of(load1 / Math.max(1, Runtime.getRuntime().availableProcessors()));
  }

  /** The share of time in collections since the last reading. */
  private synchronized OptionalDouble gcShare() {
    long millis = 0;
    for (GarbageCollectorMXBean collector : ManagementFactory.getGarbageCollectorMXBeans()) {
      millis += Math.max(0, collector.getCollectionTime());
    }
    long now = clock.getAsLong();
    long lastAt = lastGcAt;
    long lastMillis = lastGcMillis;
    lastGcAt = now;
    lastGcMillis = millis;
    if (lastAt == Long.MIN_VALUE || now <= lastAt) {
      return OptionalDouble.of(0);
    }
    return OptionalDouble.of(
        Math.max(0, Math.min(1, (millis - lastMillis) / ((now - lastAt) / 1e6))));
  }
}
