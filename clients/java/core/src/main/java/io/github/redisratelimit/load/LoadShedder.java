package io.github.redisratelimit.load;

import io.github.redisratelimit.Answered;
import io.github.redisratelimit.AsyncRateLimiter;
import io.github.redisratelimit.LoadStanding;
import io.github.redisratelimit.Metrics;
import io.github.redisratelimit.Priority;
import io.github.redisratelimit.Protocol;
import java.net.InetAddress;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.DoubleSupplier;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * Load shedding (docs/load.md), two checks on every request, neither a server call:
 *
 * <ul>
 *   <li><b>the instance's own limit</b> on requests in flight ({@link ConcurrencyLimit}): it
 *       follows the measured latency, cuts when a queue stands and, while congested, keeps its top
 *       places for the more important classes; it needs no server at all;
 *   <li><b>the fleet's level</b>: the instance reports its health ({@link Signals}: CPU, memory
 *       with the heap after collection, in flight, latency, 5xx...) under the service's key once an
 *       interval, and learns in the same call the level and the share of each class it admits.
 * </ul>
 *
 * A request goes on only when both admit it. When a report fails, the last level holds until the
 * report's time to live ends, then nothing is shed by level; the instance's own limit goes on.
 *
 * <pre>{@code
 * LoadShedder shedder = LoadShedder.builder(limiter, "load:checkout").build().start();
 * LoadShedder.Ticket ticket = shedder.admit(Priority.CRITICAL);
 * if (ticket == null) { ... 503 ... }
 * try { ... } finally { shedder.finished(ticket, status, false); }
 * }</pre>
 */
public final class LoadShedder implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger("io.github.redisratelimit");

  /** What {@link #admit} gives a request that goes on, for {@link #finished}. */
  public static final class Ticket {
    final long started;
    final boolean counted;
    // How many waits on the rate-limit server it has going on (out of the requests in flight
    // meanwhile), and whether it finished; guarded by the ticket.
    private int waits;
    private boolean done;

    Ticket(long started, boolean counted) {
      this.started = started;
      this.counted = counted;
    }
  }

  private final AsyncRateLimiter limiter;
  private final String service;
  private final String instance;
  private final Duration interval;
  private final Duration ttl;
  private final boolean shadow;
  private final Metrics metrics;
  private final Signals signals;
  private final Supplier<Map<String, Double>> factors;
  private final DoubleSupplier draw;
  private final LongSupplier clock;
  private final ConcurrencyLimit limit;
  private volatile LoadStanding standing = LoadStanding.NOTHING_SHED;
  private volatile long reportedAt = Long.MIN_VALUE;
  private ScheduledExecutorService timer;
  private ScheduledFuture<?> reports;

  private LoadShedder(Builder builder) {
    this.limiter = builder.limiter;
    this.service = builder.service;
    this.instance = builder.instance;
    this.interval = builder.interval;
    this.ttl = builder.ttl != null ? builder.ttl : builder.interval.multipliedBy(3);
    this.shadow = builder.shadow;
    this.metrics = builder.metrics != null ? builder.metrics : limiter.config().metrics();
    this.signals =
        builder.signals != null ? builder.signals : new Signals().withClock(builder.clock);
    this.factors = builder.factors;
    this.draw = builder.draw;
    this.clock = builder.clock;
    this.limit = builder.limitOptions == null ? null : new ConcurrencyLimit(builder.limitOptions);
  }

  /** A shedder reporting under {@code service} through {@code limiter}'s connection. */
  public static Builder builder(AsyncRateLimiter limiter, String service) {
    return new Builder(limiter, service);
  }

  /** The shedder's options, each with its default. */
  public static final class Builder {
    private final AsyncRateLimiter limiter;
    private final String service;
    private String instance = defaultInstance();
    private Duration interval = Duration.ofSeconds(1);
    private Duration ttl;
    private boolean shadow;
    private Metrics metrics;
    private Signals signals;
    private Supplier<Map<String, Double>> factors;
    private DoubleSupplier draw = () -> ThreadLocalRandom.current().nextDouble();
    private LongSupplier clock = System::nanoTime;
    private LimitOptions limitOptions = LimitOptions.DEFAULTS;

    private Builder(AsyncRateLimiter limiter, String service) {
      this.limiter = Objects.requireNonNull(limiter, "limiter");
      if (service == null || service.isEmpty()) {
        throw new IllegalArgumentException("a service's key is a non-empty string");
      }
      this.service = service;
    }

    /** This process among the service's instances ({@code host:pid}). */
    public Builder instance(String instance) {
      if (instance == null || !instance.matches("[A-Za-z0-9_.:-]{1,64}")) {
        throw new IllegalArgumentException("an instance is 1 to 64 letters, digits, _ - . or :");
      }
      this.instance = instance;
      return this;
    }

    /** Between reports (1 s). */
    public Builder interval(Duration interval) {
      if (interval == null || interval.isNegative() || interval.isZero()) {
        throw new IllegalArgumentException("interval is a positive duration");
      }
      this.interval = interval;
      return this;
    }

    /** How long a report counts (3 intervals). */
    public Builder ttl(Duration ttl) {
      if (ttl == null || ttl.isNegative() || ttl.isZero()) {
        throw new IllegalArgumentException("ttl is a positive duration");
      }
      this.ttl = ttl;
      return this;
    }

    /** Nothing shed: what would be is counted ({@code shadow}) and logged. */
    public Builder shadow(boolean shadow) {
      this.shadow = shadow;
      return this;
    }

    /** Where decisions are counted (the limiter's metrics by default). */
    public Builder metrics(Metrics metrics) {
      this.metrics = Objects.requireNonNull(metrics, "metrics");
      return this;
    }

    /** The signals reported (the JVM's and the container's by default). */
    public Builder signals(Signals signals) {
      this.signals = Objects.requireNonNull(signals, "signals");
      return this;
    }

    /**
     * The application's own factors, added to each report ({@code Map.of("queue", jobs.size())}: a
     * queue's backlog, a pool's waiters, any number a policy declares). A supplier that throws
     * costs its factors, never the report.
     */
    public Builder factors(Supplier<Map<String, Double>> factors) {
      this.factors = factors;
      return this;
    }

    /** The local limit with {@code options} instead of the defaults every package ships. */
    public Builder limit(LimitOptions options) {
      this.limitOptions = Objects.requireNonNull(options, "options");
      return this;
    }

    /** No local limit: shed by the level alone. */
    public Builder withoutLimit() {
      this.limitOptions = null;
      return this;
    }

    /** The clock (nanoseconds) and the draw the shares are decided by: the tests'. */
    public Builder clock(LongSupplier nanos, DoubleSupplier draw) {
      this.clock = Objects.requireNonNull(nanos, "nanos");
      this.draw = Objects.requireNonNull(draw, "draw");
      return this;
    }

    public LoadShedder build() {
      return new LoadShedder(this);
    }
  }

  /** {@code host:pid}. */
  static String defaultInstance() {
    String host;
    try {
      host = InetAddress.getLocalHost().getHostName();
    } catch (java.io.IOException unknown) {
      host = "jvm";
    }
    String name = (host + ":" + ProcessHandle.current().pid()).replaceAll("[^A-Za-z0-9_.:-]", "-");
    return name.length() > 64 ? name.substring(name.length() - 64) : name;
  }

  /** The local limit, or null when off. */
  public ConcurrencyLimit limit() {
    return limit;
  }

  public Signals signals() {
    return signals;
  }

  public String service() {
    return service;
  }

  /**
   * The service's level and shares from the last report that answered; nothing shed once that
   * report's time to live has passed.
   */
  public LoadStanding standing() {
    long at = reportedAt;
    if (at == Long.MIN_VALUE || clock.getAsLong() - at > ttl.toNanos()) {
      return LoadStanding.NOTHING_SHED;
    }
    return standing;
  }

  /** What a shed request is told to wait: one interval, when the level may have changed. */
  public Duration retryAfter() {
    return interval;
  }

  /** The report's words now (the signals and the application's factors). */
  List<String> reportCommand() {
    Map<String, Double> sample = new LinkedHashMap<>(signals.sample());
    if (factors != null) {
      try {
        sample.putAll(factors.get());
      } catch (RuntimeException failed) {
        LOG.log(
            System.Logger.Level.WARNING,
            "ratelimit: the load factors of {0} failed: {1}",
            service,
            failed.toString());
      }
    }
    return Protocol.reportCommand(service, instance, ttl, sample);
  }

  /** Reports now: the standing the server answered, or null when the report failed. */
  public LoadStanding report() {
    try {
      Object reply =
          limiter
              .calls()
              .call(reportCommand())
              .get(limiter.config().timeout().toNanos(), TimeUnit.NANOSECONDS);
      LoadStanding answered = Protocol.standing((List<?>) reply);
      standing = answered;
      reportedAt = clock.getAsLong();
      metrics.loadLevel(service, answered.level());
      return answered;
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      return null;
    } catch (Exception failed) {
      LOG.log(
          System.Logger.Level.WARNING,
          "ratelimit: the load report of {0} failed: {1}",
          service,
          failed.toString());
      return null;
    }
  }

  /** Starts reporting every interval, on a daemon thread of its own (once). */
  public synchronized LoadShedder start() {
    if (timer == null) {
      timer =
          Executors.newSingleThreadScheduledExecutor(
              task -> {
                Thread thread = new Thread(task, "ratelimit-load");
                thread.setDaemon(true);
                return thread;
              });
      reports =
          timer.scheduleWithFixedDelay(this::report, 0, interval.toNanos(), TimeUnit.NANOSECONDS);
    }
    return this;
  }

  /** Stops reporting. */
  @Override
  public synchronized void close() {
    if (timer != null) {
      reports.cancel(false);
      timer.shutdownNow();
      timer = null;
    }
  }

  private static long micros(long nanos) {
    return Math.round(nanos / 1e3);
  }

  /**
   * Whether a request of {@code priority} goes on: a ticket (for {@link #finished}) when both the
   * level (the share it gives the class, at random) and the local limit admit it; null when it is
   * shed. In shadow mode always a ticket, counting what would be shed.
   */
  public Ticket admit(Priority priority) {
    Objects.requireNonNull(priority, "priority");
    LoadStanding now = standing();
    boolean byLevel = draw.getAsDouble() < now.share(priority);
    long at = clock.getAsLong();
    boolean counted = byLevel && limit != null && limit.admit(priority, micros(at));
    // What the level refused is shedding too: the limit counts it among its interval's refusals.
    if (!byLevel && limit != null) {
      limit.shedByLevel(micros(at));
    }
    boolean admitted = byLevel && (counted || limit == null);
    String outcome = admitted ? "admitted" : shadow ? "shadow" : byLevel ? "shed_local" : "shed";
    metrics.loadDecision(service, priority, outcome);
    if (outcome.equals("shadow")) {
      LOG.log(
          System.Logger.Level.INFO,
          "ratelimit: shadow: {0} would be shed {1} of {2}",
          priority.wireName(),
          byLevel ? "by the instance's limit" : "at level " + now.level(),
          service);
    }
    if (!admitted && !shadow) {
      return null;
    }
    signals.started();
    return new Ticket(at, counted);
  }

  /**
   * The request {@code ticket} was given for ended with HTTP {@code status}; {@code own} when the
   * package answered it by its policy ({@link Answered}): then, as for any 429, it leaves the
   * requests in flight and says nothing of the service's health, nor its latency of the local
   * limit's.
   */
  public void finished(Ticket ticket, int status, boolean own) {
    finished(ticket, status, own, null);
  }

  /**
   * The request {@code ticket} was given for begins ({@code begins}) or ends a wait on the
   * rate-limit server: it leaves the local limit's requests in flight meanwhile (a frozen server's
   * timeout is not the service's concurrency; counted, a service whose requests wait on it refuses
   * its other routes). The filters call it through the request's {@link Answered} mark.
   */
  public void waiting(Ticket ticket, boolean begins) {
    if (limit == null || !ticket.counted) {
      return;
    }
    synchronized (ticket) {
      ticket.waits += begins ? 1 : -1;
      // The first wait to begin leaves, the last to end comes back; none once it finished.
      if (ticket.done || ticket.waits != (begins ? 1 : 0)) {
        return;
      }
      long now = micros(clock.getAsLong());
      if (begins) {
        limit.leave(now);
      } else {
        limit.back(now);
      }
    }
  }

  /**
   * {@link #finished(Ticket, int, boolean)} for a request of {@code route} (its method and path
   * pattern), whose latency the local limit keeps apart (the first 32 routes): an interval without
   * a fast route's request (a health check's) then reads as no queue.
   */
  public void finished(Ticket ticket, int status, boolean own, String route) {
    long now = clock.getAsLong();
    long latency = Math.max(0, now - ticket.started);
    boolean congested = false;
    if (limit != null && ticket.counted) {
      synchronized (ticket) {
        if (ticket.waits > 0 && !ticket.done) {
          // It ended while waiting on the server: in flight again, to leave as it ends.
          limit.back(micros(now));
        }
        ticket.done = true;
      }
    }
    if (limit != null) {
      // The package's own answer took the server's time (a failed call's timeout), or none, not
      // the service's: the limit counts no latency of it.
      if (ticket.counted && own) {
        limit.leave(micros(now));
      } else if (ticket.counted) {
        limit.finish(micros(latency), micros(now), route);
      }
      congested = limit.congested();
    }
    if (Answered.countsForService(status, own)) {
      signals.done(latency, status, congested, route);
    } else {
      signals.left();
    }
  }
}
