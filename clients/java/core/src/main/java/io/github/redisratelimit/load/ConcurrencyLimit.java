package io.github.redisratelimit.load;

import io.github.redisratelimit.Priority;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The instance's own limit on requests in flight, decided at admission with no server call
 * (docs/load.md, "The local limit"): it follows measured latency, cuts when a standing queue forms
 * (CoDel's test: an interval whose fastest request still waited) and grows back while none does,
 * and while congested reserves its top places for the more important classes (trunk reservation)
 * and refuses a request below the top class that waited past its share of the target (CoDel's
 * sojourn, per request). The same algorithm, step for step, as every package's:
 * clients/conformance.json's {@code concurrency} traces, which this replays exactly.
 *
 * <p>Plain Java, no I/O: the time is passed in (whole microseconds of a monotonic clock).
 * Thread-safe.
 */
public final class ConcurrencyLimit {
  /**
   * How many intervals in a row (of those that finished a request) must have taken a latency for it
   * to be the no-load latency.
   */
  private static final int CONFIRMING = 4;

  /**
   * How many calm intervals in a row (of those that decided a request) end congestion: one is an
   * overload's arrivals coming and going.
   */
  private static final int CALM_INTERVALS_TO_END = 4;

  /**
   * The most routes whose latencies are kept apart; a request of any other route is counted with
   * those that name none.
   */
  private static final int ROUTES = 32;

  /**
   * The no-load latency of one route (or of the whole service): the least of the current and the
   * previous epoch that CONFIRMING intervals in a row (of those that finished one of its requests)
   * took at least; until CONFIRMING - 1 such intervals have ended, also the least any request took
   * (a cold start's).
   */
  private static final class Latencies {
    double noloadNow = Double.POSITIVE_INFINITY;
    double noloadBefore = Double.POSITIVE_INFINITY;
    // The fastest request of each of the last intervals that finished any, oldest first.
    final double[] recentFastest = unmeasured(CONFIRMING - 1);
    // The fastest request of the current interval.
    double windowMin = Double.POSITIVE_INFINITY;

    double noload() {
      return Math.min(noloadNow, noloadBefore);
    }

    /** Whether CONFIRMING - 1 intervals have finished a request: past the cold start. */
    boolean confirmed() {
      return recentFastest[0] < Double.POSITIVE_INFINITY;
    }

    void finished(long latency) {
      windowMin = Math.min(windowMin, (double) latency);
      if (!confirmed()) {
        noloadNow = Math.min(noloadNow, (double) latency);
      }
    }

    /**
     * The interval ended: its fastest lowers the no-load latency as far as the intervals before it
     * agree (a fast request now and then is not what the others take).
     */
    void closeInterval() {
      if (windowMin < Double.POSITIVE_INFINITY) {
        double agreed = windowMin;
        for (double recent : recentFastest) {
          agreed = Math.max(agreed, recent);
        }
        noloadNow = Math.min(noloadNow, agreed);
        System.arraycopy(recentFastest, 1, recentFastest, 0, CONFIRMING - 2);
        recentFastest[CONFIRMING - 2] = windowMin;
      }
      windowMin = Double.POSITIVE_INFINITY;
    }

    void nextEpoch() {
      noloadBefore = noloadNow;
      noloadNow = Double.POSITIVE_INFINITY;
    }
  }

  private final LimitOptions options;
  private double limit;
  private long inflight;
  private boolean congested;
  private long changes;
  private long congestions;
  private boolean started;
  private long windowEnd;
  private double peak;
  private long admitted;
  private long refused;
  // Of the refused, how many for their own wait.
  private long waitedOut;
  // Of the refused, how many the service's level refused (not this limit's shares).
  private long byLevel;
  // Whether the limit refused a request while not congested: the requests in flight reached it
  // (or the initial limit).
  private boolean full;
  // The interval's finished requests, how many of them took longer than the target, and the
  // fewest requests in flight or waiting it saw.
  private long finished;
  private long queued;
  private double trough;
  // The requests left waiting when the last request finished, where the package counts them (a
  // run queue's): a service whose requests in flight fall to none between two requests while the
  // next ones wait is not idle.
  private double behind;
  private int standingRun;
  // While congested, intervals in a row (of those that decided a request) that ended with the
  // peak under half the limit and fewer refused than admitted.
  private int calmRun;
  // Intervals in a row whose latency no queue here explains.
  private int unexplained;
  // Every request's latencies (what admission converts a wait with), and each route's (what the
  // standing-queue test reads: a route's fastest against its own target), the requests that name
  // none, or a route past the first ROUTES, under null.
  private final Latencies service = new Latencies();
  private final Map<String, Latencies> routes = new LinkedHashMap<>();
  private long epochEnd;

  /** With the defaults every package ships. */
  public ConcurrencyLimit() {
    this(LimitOptions.DEFAULTS);
  }

  public ConcurrencyLimit(LimitOptions options) {
    this.options = options;
    this.limit = options.initial();
    routes.put(null, new Latencies());
  }

  public LimitOptions options() {
    return options;
  }

  /** The limit on requests in flight now. */
  public synchronized double limit() {
    return limit;
  }

  public synchronized long inflight() {
    return inflight;
  }

  /** Whether a queue stands: the top places go to the more important classes. */
  public synchronized boolean congested() {
    return congested;
  }

  /** How many times the limit changed (for the bench). */
  public synchronized long changes() {
    return changes;
  }

  /** How many times congestion began. */
  public synchronized long congestions() {
    return congestions;
  }

  /**
   * The service's no-load latency in µs, over every route: the least of this epoch and the last
   * (infinite before any).
   */
  public synchronized double noload() {
    return service.noload();
  }

  /** The routes whose latencies are kept apart, as their requests named them. */
  public synchronized List<String> routes() {
    List<String> named = new ArrayList<>(routes.keySet());
    named.remove(null);
    return named;
  }

  /**
   * The route whose fastest request of the interval reads it: of the routes that finished a request
   * in it with a no-load latency known (past their cold start, if any is), the fastest by nature
   * (then by its fastest, so that the order never matters); null if no route did.
   */
  private Latencies judgingRoute() {
    Latencies judge = null;
    for (Latencies route : routes.values()) {
      if (route.windowMin == Double.POSITIVE_INFINITY
          || route.noload() == Double.POSITIVE_INFINITY) {
        continue;
      }
      boolean better =
          judge == null
              || (route.confirmed() && !judge.confirmed())
              || (route.confirmed() == judge.confirmed()
                  && (route.noload() < judge.noload()
                      || (route.noload() == judge.noload() && route.windowMin < judge.windowMin)));
      if (better) {
        judge = route;
      }
    }
    return judge;
  }

  /**
   * The latency a request may take without a queue standing: the no-load latency plus the longer of
   * one more and the target (a burst's queue), or, while congested, plus the target alone
   * (CoDel's), so that the queue kept while shedding stays short where requests are slow by nature,
   * behind a pool of a few slots.
   */
  private double target(double noload) {
    double targetUs = options.targetUs();
    return noload + (congested ? targetUs : Math.max(noload, targetUs));
  }

  /** Closes the interval that ended at or before {@code now}, if any. */
  private void roll(long now) {
    LimitOptions o = options;
    if (!started) {
      started = true;
      windowEnd = now + o.intervalUs();
      epochEnd = now + o.epochUs();
      return;
    }
    while (now >= epochEnd) {
      service.nextEpoch();
      routes.values().forEach(Latencies::nextEpoch);
      // A route with no request for two epochs leaves its place to another.
      routes
          .entrySet()
          .removeIf(
              route ->
                  route.getKey() != null && route.getValue().noload() == Double.POSITIVE_INFINITY);
      epochEnd += o.epochUs();
    }
    if (now < windowEnd) {
      return;
    }
    boolean bound = peak >= limit / 2;
    // The interval is read by the fastest route that finished a request in it (of those past their
    // cold start, if any is): a queue delays every route's requests, and the fastest route's show
    // the least of one; a route's fastest is set against its own target, so that an interval
    // without a fast route's request (a health check's) is no queue.
    Latencies judge = judgingRoute();
    boolean measured = judge != null;
    double fastest = measured ? judge.windowMin : Double.POSITIVE_INFINITY;
    double target = measured ? target(judge.noload()) : Double.POSITIVE_INFINITY;
    // While congested, a queue stands whatever the peak: the probe may raise the limit past it.
    boolean standing = measured && (bound || congested) && fastest > target;
    // While congested, a fastest request slower than every request of the peak ahead of it at the
    // target each: no queue here explains it, the service itself got slower (a dependency). After
    // `enter` such intervals the no-load latency is what it takes now.
    boolean slower = standing && congested && fastest > Math.max(1, peak) * target;
    unexplained = slower ? unexplained + 1 : 0;
    if (unexplained >= o.enter()) {
      List<Latencies> every = new ArrayList<>(routes.values());
      every.add(service);
      for (Latencies latencies : every) {
        if (latencies.windowMin < Double.POSITIVE_INFINITY) {
          latencies.noloadNow = latencies.windowMin;
          latencies.noloadBefore = latencies.windowMin;
        }
      }
      unexplained = 0;
      standing = false;
    }
    standingRun = standing ? standingRun + 1 : 0;
    double before = limit;
    boolean calm = false;
    // A queue that stands while the limit, not congested, is full is an overload already: a burst
    // a healthy service holds neither fills it nor stands.
    boolean atOnce = standing && (fastest > o.deep() * target || full);
    if (standing && (congested || atOnce || standingRun >= o.enter())) {
      double gradient = Math.max(0.2, Math.min(0.9, target / fastest));
      limit = Math.max(o.floor(), Math.min(limit, peak) * gradient);
      if (!congested) {
        congestions += 1;
      }
      congested = true;
    } else if (standing) {
      // Not yet: a queue must stand for `enter` intervals, be deep, or fill the limit.
    } else if (bound && measured) {
      if (!congested) {
        limit = Math.min(o.ceiling(), limit + Math.sqrt(limit));
      } else if (queued * 10 <= finished || trough == 0) {
        // Congested, it grows by one, unless a queue came and went at this limit (over a tenth
        // of the requests took longer than the target) while the service never went idle: the
        // limit is what it can hold (a pool's size), and probing past it is a queue.
        limit = Math.min(o.ceiling(), limit + 1.0);
      }
    } else if (!bound) {
      if (congested) {
        // Shedding keeps the queue short: what it refused is the overload going on. One calm
        // interval is no end (an overload's arrivals come and go).
        if (refused < admitted) {
          calm = true;
          if (calmRun + 1 >= CALM_INTERVALS_TO_END) {
            congested = false;
          }
        } else if (refused - waitedOut - byLevel >= admitted) {
          // Refusing by the shares alone, under half the limit: room is probed for (what a
          // request's own wait refused is a queue, not the shares).
          limit = Math.min(o.ceiling(), limit + Math.sqrt(limit));
        }
      } else {
        limit = Math.max(o.floor(), Math.max(2.0 * peak, limit * o.decay()));
      }
    }
    if (calm) {
      calmRun = congested ? calmRun + 1 : 0;
    } else if (admitted > 0 || refused > 0) {
      // An interval that decided nothing neither continues a calm run nor breaks it.
      calmRun = 0;
    }
    if (limit != before) {
      changes += 1;
    }
    service.closeInterval();
    routes.values().forEach(Latencies::closeInterval);
    peak = inflight;
    trough = inflight + behind;
    finished = 0;
    queued = 0;
    admitted = 0;
    refused = 0;
    waitedOut = 0;
    byLevel = 0;
    full = false;
    windowEnd = now + o.intervalUs();
  }

  /** {@link #admit(Priority, long, long)} with no wait before the decision. */
  public boolean admit(Priority priority, long now) {
    return admit(priority, now, 0);
  }

  /**
   * Whether a request of {@code priority} is admitted at {@code now} (µs); an admitted one is in
   * flight until {@link #finish}. {@code backlog} is how long it waited before it could be decided
   * (µs): the work ahead of it, counted as that many no-load latencies' worth of requests in
   * flight, for every class but the top one, and, while congested, its own wait, refused past its
   * share of the target.
   */
  public synchronized boolean admit(Priority priority, long now, long backlog) {
    roll(now);
    double noload = service.noload();
    double waiting = backlog > 0 && noload < Double.POSITIVE_INFINITY ? backlog / noload : 0;
    double load = inflight + waiting;
    int index = priority.ordinal();
    // The top class counts only what is in flight: its places are kept.
    double counted = index == 0 ? inflight : load;
    boolean admit;
    boolean waitedTooLong = false;
    if (congested) {
      double share = options.share(index);
      admit = counted < limit * share;
      if (admit && index > 0 && waiting > 0) {
        waitedTooLong = backlog >= options.sojourn() * share * target(noload);
        admit = !waitedTooLong;
      }
    } else {
      // Not congested, the initial limit admits too: the limit eased down is what the
      // standing-queue test reads, and a burst that a fresh service admits, an idle one admits as
      // well.
      admit = inflight < Math.max(limit, options.initial());
      full |= !admit;
    }
    // The peak is what the limit counted the request against: for the top class, what is in
    // flight alone, so that a loop kept busy by the top class (a readiness probe's, a load
    // test's), whose backlog is a guess, reads as no queue to cut.
    if (admit) {
      admitted += 1;
      inflight += 1;
      peak = Math.max(peak, counted + 1);
      return true;
    }
    peak = Math.max(peak, counted);
    refused += 1;
    if (waitedTooLong) {
      waitedOut += 1;
    }
    return false;
  }

  /**
   * An admitted request that names no route ended at {@code now} after {@code latency} (µs both).
   */
  public void finish(long latency, long now) {
    finish(latency, now, null);
  }

  /**
   * An admitted request of {@code route} (its method and path pattern; null: unnamed) ended at
   * {@code now} after {@code latency} (µs both): its latency is also kept apart, with its route's
   * (the first 32 routes).
   */
  public void finish(long latency, long now, String route) {
    finish(latency, now, route, 0);
  }

  /**
   * An admitted request of {@code route} (null: unnamed) ended at {@code now} after {@code
   * latency}, leaving {@code backlog} of work waiting for the service where the package counts it
   * (a run queue's; µs all): the service is not idle while it waits, though none is in flight.
   */
  public synchronized void finish(long latency, long now, String route, long backlog) {
    roll(now);
    inflight = Math.max(0, inflight - 1);
    double noload = service.noload();
    behind = backlog > 0 && noload < Double.POSITIVE_INFINITY ? backlog / noload : 0;
    trough = Math.min(trough, inflight + behind);
    service.finished(latency);
    Latencies latencies = latenciesOf(route);
    latencies.finished(latency);
    finished += 1;
    if (latency > target(latencies.noload())) {
      queued += 1;
    }
  }

  /** {@code route}'s latencies, kept apart for the first ROUTES routes named. */
  private Latencies latenciesOf(String route) {
    Latencies latencies = routes.get(route);
    if (latencies == null) {
      if (routes.size() > ROUTES) {
        return routes.get(null);
      }
      latencies = new Latencies();
      routes.put(route, latencies);
    }
    return latencies;
  }

  /**
   * A request the service's level refused at {@code now} (µs) before this limit decided it: one
   * more refusal of the interval, as shedding's own (the overload goes on while anything is
   * refused: the level's refusals keep congestion from ending when they leave this limit only a
   * trickle to decide), never in flight.
   */
  public synchronized void shedByLevel(long now) {
    roll(now);
    refused += 1;
    byLevel += 1;
  }

  /**
   * An admitted request ended at {@code now} (µs) with an answer that says nothing of the service's
   * latency (the package's own: a refusal, a failure policy's answer while the server failed), or
   * began to wait on the rate-limit server (until {@link #back}): it leaves the requests in flight,
   * and no latency is counted.
   */
  public synchronized void leave(long now) {
    roll(now);
    inflight = Math.max(0, inflight - 1);
    trough = Math.min(trough, inflight);
  }

  /**
   * A request that left the requests in flight ({@link #leave}) while it waited on the rate-limit
   * server got its answer, or gave up on it, at {@code now} (µs): it is in flight again, whatever
   * the limit (it was admitted). A frozen server's timeout is not the service's concurrency:
   * counted, a service whose requests wait on it refuses its other routes.
   */
  public synchronized void back(long now) {
    roll(now);
    inflight += 1;
    peak = Math.max(peak, inflight);
  }

  /** {@code count} intervals that finished no request yet. */
  private static double[] unmeasured(int count) {
    double[] fastest = new double[count];
    Arrays.fill(fastest, Double.POSITIVE_INFINITY);
    return fastest;
  }
}
