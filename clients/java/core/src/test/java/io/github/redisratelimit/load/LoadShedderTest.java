package io.github.redisratelimit.load;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.Answered;
import io.github.redisratelimit.AsyncRateLimiter;
import io.github.redisratelimit.Config;
import io.github.redisratelimit.LettuceCalls;
import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.MicrometerMetrics;
import io.github.redisratelimit.OnError;
import io.github.redisratelimit.Priority;
import io.github.redisratelimit.RateLimiter;
import io.github.redisratelimit.RedisCalls;
import io.lettuce.core.RedisClient;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * Load shedding against the live server: the shedder reports the JVM's signals and sheds by the
 * level the server answers, per priority; a level nobody reports any more sheds nothing; the local
 * limit sheds a standing queue by priority, with the server answering or frozen, and the defaults
 * shed nothing from a healthy service; a 429 and the package's own answers count nothing.
 */
class LoadShedderTest {
  static String url() {
    return System.getenv("REDIS_URL");
  }

  static AsyncRateLimiter limiter() {
    return new AsyncRateLimiter(LettuceCalls.connect(RedisClient.create(url())));
  }

  static String service() {
    return "java:load:" + UUID.randomUUID();
  }

  /** A clock the test moves, in nanoseconds. */
  static final class Clock {
    final AtomicLong nanos = new AtomicLong(1_000_000_000L);

    long now() {
      return nanos.get();
    }

    void advance(Duration by) {
      nanos.addAndGet(by.toNanos());
    }
  }

  @Test
  void theShedderTellsTheSignalsEachRequestsRoute() throws ReflectiveOperationException {
    try (AsyncRateLimiter limiter = limiter()) {
      Clock clock = new Clock();
      LoadShedder shedder = onClock(limiter, clock);
      // Busy seconds, what min_rt reads: the limit congested, as an overload would leave it.
      java.lang.reflect.Field congested = ConcurrencyLimit.class.getDeclaredField("congested");
      congested.setAccessible(true);
      congested.set(shedder.limit(), true);
      for (Object[] request : new Object[][] {{"GET /health", 1L}, {"GET /work", 30L}}) {
        LoadShedder.Ticket ticket = shedder.admit(Priority.CRITICAL_PLUS);
        assertNotNull(ticket);
        clock.advance(Duration.ofMillis((Long) request[1]));
        shedder.finished(ticket, 200, false, (String) request[0]);
      }
      // Each route's least latency, weighted by its one request (unnamed, the least: 1 ms).
      assertEquals((1 + 30) / 2.0, shedder.signals().sample().get("min_rt"), 1e-6);
    }
  }

  @Test
  void itShedsByPriorityTheLevelItsReportAnswers() {
    try (AsyncRateLimiter limiter = limiter()) {
      String service = service();
      levelOneAdmits(limiter, service, "1 1 0 0");
      PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
      LoadShedder shedder =
          LoadShedder.builder(limiter, service)
              .metrics(new MicrometerMetrics(registry))
              .clock(System::nanoTime, () -> 0.5)
              .build();
      assertNotNull(shedder.report());
      assertEquals(1, shedder.standing().level());
      assertNotNull(shedder.admit(Priority.CRITICAL_PLUS));
      assertNotNull(shedder.admit(Priority.CRITICAL));
      assertNull(shedder.admit(Priority.SHEDDABLE_PLUS));
      assertNull(shedder.admit(Priority.SHEDDABLE));
      String scrape = registry.scrape();
      assertTrue(scrape.contains("ratelimit_load_level{service=\"" + service + "\"} 1.0"), scrape);
      assertTrue(scrape.contains("outcome=\"shed\",priority=\"sheddable\""), scrape);
      // The report carries the JVM's signals: memory (the heap after collection, or the
      // container's), CPU, in flight.
      Map<String, Double> sample = shedder.signals().sample();
      assertTrue(
          sample.containsKey("memory") && sample.get("memory") > 0 && sample.get("memory") <= 1,
          sample.toString());
      assertEquals(2.0, sample.get("inflight"), "the two admitted, not yet finished");
    }
  }

  @Test
  void aLevelNobodyReportsAnyMoreShedsNothing() {
    try (AsyncRateLimiter limiter = limiter()) {
      String service = service();
      levelOneAdmits(limiter, service, "1 0 0 0");
      Clock clock = new Clock();
      LoadShedder shedder = onClock(limiter, service, clock);
      shedder.report();
      assertNull(shedder.admit(Priority.SHEDDABLE));
      clock.advance(Duration.ofSeconds(4));
      assertEquals(0, shedder.standing().level(), "three intervals passed with no report");
      assertNotNull(shedder.admit(Priority.SHEDDABLE));
    }
  }

  /**
   * A no-load latency of 5 ms, then a queue that stands: 20 requests in flight, and every one of
   * the next interval taking 100 ms (over four times the target of 10 ms). The 9 still in flight
   * are returned.
   */
  static List<LoadShedder.Ticket> flood(LoadShedder shedder, Clock clock) {
    LoadShedder.Ticket ticket = shedder.admit(Priority.CRITICAL);
    clock.advance(Duration.ofMillis(5));
    shedder.finished(ticket, 200, false);
    LoadShedder.Ticket[] tickets = new LoadShedder.Ticket[20];
    for (int index = 0; index < 20; index++) {
      tickets[index] = shedder.admit(Priority.CRITICAL);
      assertNotNull(tickets[index], "under the limit of 20, everything goes");
    }
    clock.advance(Duration.ofMillis(100));
    for (int index = 0; index < 10; index++) {
      shedder.finished(tickets[index], 200, false);
    }
    clock.advance(Duration.ofMillis(100));
    shedder.finished(tickets[10], 200, false);
    return List.of(tickets).subList(11, 20);
  }

  /** A shedder with the default limit on {@code clock}, every share drawn at 0.5. */
  static LoadShedder onClock(AsyncRateLimiter limiter, Clock clock) {
    return onClock(limiter, service(), clock);
  }

  /** A shedder of {@code service} with the default limit on {@code clock}, shares drawn at 0.5. */
  static LoadShedder onClock(AsyncRateLimiter limiter, String service, Clock clock) {
    return LoadShedder.builder(limiter, service).clock(clock::now, () -> 0.5).build();
  }

  /**
   * Sets {@code service}'s policy: level 1 as soon as anything is in flight, admitting the four
   * classes by {@code shares} (critical_plus first), with no hold.
   */
  static void levelOneAdmits(AsyncRateLimiter limiter, String service, String shares) {
    limiter
        .calls()
        .call(
            List.of(
                ("RL.LOAD.POLICY " + service + " HOLD 0 LEVEL inflight 0 SHARES " + shares)
                    .split(" ")))
        .join();
  }

  @Test
  void aStandingQueueShedsTheLeastImportantFirst() {
    try (AsyncRateLimiter limiter = limiter()) {
      Clock clock = new Clock();
      LoadShedder shedder = onClock(limiter, clock);
      List<LoadShedder.Ticket> inflight = flood(shedder, clock);
      assertTrue(shedder.limit().congested());
      assertEquals(4.0, shedder.limit().limit(), "cut to the floor");
      assertNull(shedder.admit(Priority.CRITICAL_PLUS), "9 in flight of 4: nothing");
      for (LoadShedder.Ticket ticket : inflight.subList(0, 6)) {
        shedder.finished(ticket, 200, false);
      }
      // 3 in flight: the top class (under 4) is admitted; critical (under 2.4) and the
      // sheddable classes are not.
      assertNull(shedder.admit(Priority.SHEDDABLE), "shed by the instance's own limit");
      assertNull(shedder.admit(Priority.CRITICAL));
      assertNotNull(shedder.admit(Priority.CRITICAL_PLUS), "the top class keeps its places");
    }
  }

  @Test
  void whatTheLevelShedsHoldsTheLocalLimitCongested() {
    try (AsyncRateLimiter limiter = limiter()) {
      String service = service();
      levelOneAdmits(limiter, service, "1 1 0 0");
      Clock clock = new Clock();
      LoadShedder shedder = onClock(limiter, service, clock);
      ConcurrencyLimit limit = shedder.limit();
      for (LoadShedder.Ticket ticket : flood(shedder, clock)) {
        shedder.finished(ticket, 200, false);
      }
      assertTrue(limit.congested());
      assertEquals(1, shedder.report().level());
      // An interval in which the level refuses ten requests and leaves the limit one, fast,
      // under half the limit: the overload goes on, and congestion holds.
      clock.advance(Duration.ofMillis(100));
      LoadShedder.Ticket ticket = shedder.admit(Priority.CRITICAL);
      clock.advance(Duration.ofMillis(5));
      shedder.finished(ticket, 200, false);
      for (int index = 0; index < 10; index++) {
        assertNull(shedder.admit(Priority.SHEDDABLE), "level 1 sheds sheddable");
      }
      clock.advance(Duration.ofMillis(100));
      ticket = shedder.admit(Priority.CRITICAL_PLUS);
      assertTrue(limit.congested(), "ten refused by the level, one admitted");
      // Intervals the level refuses nothing of: congestion ends at the fourth in a row.
      shedder.finished(ticket, 200, false);
      for (int calm = 1; calm < 4; calm++) {
        clock.advance(Duration.ofMillis(100));
        ticket = shedder.admit(Priority.CRITICAL_PLUS);
        assertTrue(limit.congested(), calm + " calm intervals in a row");
        shedder.finished(ticket, 200, false);
      }
      clock.advance(Duration.ofMillis(100));
      shedder.admit(Priority.CRITICAL_PLUS);
      assertFalse(limit.congested(), "nothing refused, under half the limit");
    }
  }

  @Test
  void withTheServerFrozenTheLocalLimitStillProtects() {
    try (AsyncRateLimiter limiter =
        new AsyncRateLimiter(
            new FrozenCalls(), Config.defaults().timeout(Duration.ofMillis(100)))) {
      Clock clock = new Clock();
      LoadShedder shedder = onClock(limiter, clock);
      assertNull(shedder.report(), "no answer within the deadline");
      assertEquals(0, shedder.standing().level());
      flood(shedder, clock);
      assertNull(shedder.admit(Priority.SHEDDABLE), "still shed by its own limit");
    }
  }

  @Test
  void aRequestWaitingOnTheRateLimitServerIsNotInFlight() throws InterruptedException {
    try (AsyncRateLimiter limiter = limiter()) {
      LoadShedder shedder = LoadShedder.builder(limiter, service()).build();
      RateLimiter frozen =
          new RateLimiter(
              new FrozenCalls(),
              Config.defaults().timeout(Duration.ofSeconds(2)).onError(OnError.ALLOW));
      LoadShedder.Ticket ticket = shedder.admit(Priority.CRITICAL);
      assertEquals(1, shedder.limit().inflight());
      boolean[] allowedAsTheServices = {false};
      // The request waits on a frozen server, watched as the filters watch it.
      Thread request =
          new Thread(
              () -> {
                try (Answered.Scope scope =
                    Answered.open(begins -> shedder.waiting(ticket, begins))) {
                  frozen.check(Limiter.throttle("java:waits", 10, 10, Duration.ofSeconds(1)));
                  allowedAsTheServices[0] = !scope.answered().own();
                }
              });
      request.start();
      long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
      while (shedder.limit().inflight() != 0 && System.nanoTime() < deadline) {
        Thread.sleep(5);
      }
      assertEquals(0, shedder.limit().inflight(), "waiting on the server");
      request.join();
      assertTrue(allowedAsTheServices[0], "allowed: the service answers it");
      assertEquals(1, shedder.limit().inflight(), "the timeout ended the wait: in flight again");
      shedder.finished(ticket, 200, false);
      assertEquals(0, shedder.limit().inflight());
      shedder.close();
    }
  }

  /** Calls no server ever answers. */
  static final class FrozenCalls implements RedisCalls {
    @Override
    public java.util.concurrent.CompletableFuture<Object> call(List<String> words) {
      return new java.util.concurrent.CompletableFuture<>();
    }

    @Override
    public java.util.concurrent.CompletableFuture<List<Object>> transaction(
        String key, List<List<String>> commands) {
      return new java.util.concurrent.CompletableFuture<>();
    }

    @Override
    public java.util.concurrent.CompletableFuture<List<Object>> onEveryPrimary(List<String> words) {
      return new java.util.concurrent.CompletableFuture<>();
    }
  }

  @Test
  void defaultsShedNothingFromAHealthyService() {
    try (AsyncRateLimiter limiter = limiter()) {
      Clock clock = new Clock();
      LoadShedder shedder = onClock(limiter, clock);
      Priority[] classes = Priority.values();
      for (int request = 0; request < 5_000; request++) {
        // Half the capacity of a service of 5 ms: a request every 10 ms, at times two at once.
        LoadShedder.Ticket first = shedder.admit(classes[request % 4]);
        LoadShedder.Ticket second =
            request % 7 == 0 ? shedder.admit(classes[(request + 1) % 4]) : null;
        assertNotNull(first, "request " + request);
        clock.advance(Duration.ofMillis(5));
        shedder.finished(first, 200, false);
        if (request % 7 == 0) {
          assertNotNull(second);
          clock.advance(Duration.ofMillis(2));
          shedder.finished(second, 200, false);
        }
        clock.advance(Duration.ofMillis(5));
      }
      assertFalse(shedder.limit().congested());
    }
  }

  @Test
  void thePackagesOwnAnswerLeavesTheLocalLimitUnmeasured() {
    try (AsyncRateLimiter limiter = limiter()) {
      Clock clock = new Clock();
      LoadShedder shedder = onClock(limiter, clock);
      // A request the package answered after a failing server's 1 s timeout: it leaves the
      // requests in flight, and its second is no latency of the service's.
      LoadShedder.Ticket ticket = shedder.admit(Priority.CRITICAL);
      assertEquals(1, shedder.limit().inflight());
      clock.advance(Duration.ofSeconds(1));
      shedder.finished(ticket, 503, true);
      assertEquals(0, shedder.limit().inflight());
      assertEquals(Double.POSITIVE_INFINITY, shedder.limit().noload());
      // The service's own answer is its latency.
      ticket = shedder.admit(Priority.CRITICAL);
      clock.advance(Duration.ofMillis(2));
      shedder.finished(ticket, 200, false);
      assertEquals(2000.0, shedder.limit().noload());
    }
  }

  @Test
  void aLimitsRefusalAndThePackagesOwnAnswersSayNothingOfTheService() {
    try (AsyncRateLimiter limiter = limiter()) {
      LoadShedder shedder = LoadShedder.builder(limiter, service()).withoutLimit().build();
      shedder.finished(shedder.admit(Priority.CRITICAL), 429, false);
      shedder.finished(shedder.admit(Priority.CRITICAL), 503, true);
      shedder.finished(shedder.admit(Priority.CRITICAL), 500, true);
      shedder.finished(shedder.admit(Priority.CRITICAL), 503, false);
      shedder.finished(shedder.admit(Priority.CRITICAL), 200, false);
      Map<String, Double> sample = shedder.signals().sample();
      assertEquals(0.0, sample.get("inflight"));
      assertEquals(2.0, sample.get("requests"));
      assertEquals(1.0, sample.get("successes"));
      assertEquals(0.5, sample.get("errors"));
    }
  }
}
