package io.github.redisratelimit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every command and option against the live server, over Lettuce and over Jedis: typed results,
 * several limits at once, leases, counts, top keys, the load gate; many threads on one key counted
 * exactly; the deny cache, shadow mode and the metrics; quota leases and the shared lists; and bad
 * input refused before any call.
 */
class ClientTest {
  static List<Servers.Driver> drivers() {
    return Servers.drivers();
  }

  static final Duration SECOND = Duration.ofSeconds(1);
  static final Duration MINUTE = Duration.ofSeconds(60);

  @ParameterizedTest
  @MethodSource("drivers")
  void everyLimiterAndOptionOnTheServer(Servers.Driver driver) {
    try (RateLimiter limiter = new RateLimiter(driver.onServer())) {
      String user = Servers.unique("throttle");
      Limiter.Throttle burst = Limiter.throttle(user, 4, 1, MINUTE);
      for (int request = 0; request < 5; request++) {
        RateLimit admitted = limiter.check(burst);
        assertTrue(admitted.allowed());
        assertEquals(5, admitted.limit());
        assertEquals(4 - request, admitted.remaining());
        assertNull(admitted.retryAfter());
      }
      RateLimit refused = limiter.check(burst);
      assertFalse(refused.allowed());
      assertTrue(refused.retryAfter().compareTo(Duration.ofSeconds(55)) > 0, refused.toString());
      assertFalse(limiter.peek(List.of(burst), 1).allowed(), "a peek answers as a check would");
      // A refund gives back what a request took.
      assertTrue(limiter.check(List.of(burst), Options.defaults().refund()).allowed());
      assertTrue(limiter.check(burst).allowed());

      // Several limits, all or nothing: the day's limit is charged only with the burst's.
      String tag = "{" + Servers.unique("all") + "}";
      Limiter.Throttle second = Limiter.throttle(tag + ":burst", 1, 1, SECOND).named("burst");
      Limiter.Window day =
          Limiter.window(tag + ":day", 1000, Duration.ofDays(1))
              .algorithm(Limiter.Algorithm.FIXED)
              .named("day");
      RateLimit both = limiter.check(List.of(second, day), Options.defaults());
      assertTrue(both.allowed());
      assertEquals(2, both.each().size());
      assertEquals(999, both.each().get(1).remaining());
      Map<String, String> fields = Fields.headers(both, List.of(second, day));
      assertEquals("\"burst\";q=2;w=2, \"day\";q=1000;w=86400", fields.get("RateLimit-Policy"));

      // DELAY: the request waits its turn; AT_MOST: what fits; FORCE: owed.
      String delayed = Servers.unique("delay");
      Limiter.Throttle slow = Limiter.throttle(delayed, 0, 1, Duration.ofSeconds(10));
      assertTrue(limiter.check(slow).allowed());
      RateLimit waits =
          limiter.check(List.of(slow), Options.defaults().delay(Duration.ofSeconds(30)));
      assertTrue(waits.allowed());
      assertTrue(waits.waitFor().compareTo(Duration.ofSeconds(9)) > 0, waits.toString());
      Limiter.Log log = Limiter.log(Servers.unique("log"), 10, MINUTE);
      RateLimit some = limiter.check(List.of(log), Options.defaults().quantity(8).atMost());
      assertEquals(8L, some.granted());
      RateLimit rest = limiter.check(List.of(log), Options.defaults().quantity(8).atMost());
      assertEquals(2L, rest.granted());
      RateLimit owed =
          limiter.check(
              List.of(Limiter.log(Servers.unique("force"), 10, MINUTE)),
              Options.defaults().quantity(15).force());
      assertTrue(owed.allowed());

      // BLOCK: a refusal keeps the key refused.
      Limiter.Throttle blocked = Limiter.throttle(Servers.unique("block"), 0, 1, MINUTE);
      limiter.check(blocked);
      RateLimit penalty =
          limiter.check(List.of(blocked), Options.defaults().block(Duration.ofSeconds(900)));
      assertEquals(Duration.ofSeconds(900), penalty.retryAfter());

      // Counts of a window and a log.
      Counts counts = limiter.counts(log);
      assertEquals(10, ((Counts.LogCounts) counts).count());

      // Leases.
      String exports = Servers.unique("leases");
      Lease lease = limiter.acquireLease(exports, 1, Duration.ofMinutes(5), 1);
      assertTrue(lease.allowed());
      assertFalse(limiter.acquireLease(exports, 1, Duration.ofMinutes(5), 1).allowed());
      assertFalse(limiter.peekLease(exports, 1, Duration.ofMinutes(5), 1).allowed());
      assertTrue(limiter.renewLease(exports, lease.id(), Duration.ofMinutes(1)));
      assertTrue(limiter.releaseLease(exports, lease.id()));
      assertFalse(limiter.releaseLease(exports, lease.id()), "released already");

      // Slots in RL.ALL: a lease beside a rate, its id in the result.
      String slotsTag = "{" + Servers.unique("slots") + "}";
      RateLimit slotted =
          limiter.check(
              List.of(
                  Limiter.throttle(slotsTag + ":rate", 9, 10, SECOND),
                  Limiter.slots(slotsTag + ":slots", 2, MINUTE)),
              Options.defaults());
      assertTrue(slotted.allowed());
      assertTrue(slotted.leaseId() > 0);
      assertTrue(limiter.releaseLease(slotsTag + ":slots", slotted.leaseId()));
    }
  }

  @ParameterizedTest
  @MethodSource("drivers")
  void theLoadGateShedsWithNothingCharged(Servers.Driver driver) {
    try (RedisCalls calls = driver.onServer();
        RateLimiter limiter = new RateLimiter(calls)) {
      String tag = "{" + Servers.unique("gate") + "}";
      String service = tag + ":load";
      calls
          .call(
              List.of(
                  ("RL.LOAD.POLICY " + service + " HOLD 0 LEVEL inflight 0 SHARES 1 1 0 0")
                      .split(" ")))
          .join();
      calls.call(List.of("RL.LOAD.REPORT", service, "a", "60000", "inflight", "1")).join();
      Limiter.Throttle user = Limiter.throttle(tag + ":user", 4, 1, MINUTE);
      RateLimit admitted =
          limiter.check(
              List.of(Limiter.load(service, Priority.CRITICAL), user), Options.defaults());
      assertTrue(admitted.allowed());
      assertEquals(0, admitted.shedLevel());
      RateLimit shed =
          limiter.check(
              List.of(Limiter.load(service, Priority.SHEDDABLE), user), Options.defaults());
      assertFalse(shed.allowed());
      assertEquals(1, shed.shedLevel());
      assertEquals(4, shed.remaining(), "nothing charged");
    }
  }

  @ParameterizedTest
  @MethodSource("drivers")
  void manyThreadsOnOneKeyAreCountedExactly(Servers.Driver driver) throws Exception {
    try (RateLimiter limiter = new RateLimiter(driver.onServer())) {
      Limiter.Log log = Limiter.log(Servers.unique("threads"), 1000, MINUTE);
      ExecutorService threads = Executors.newFixedThreadPool(16);
      AtomicInteger admitted = new AtomicInteger();
      List<Future<?>> done = new ArrayList<>();
      for (int thread = 0; thread < 16; thread++) {
        done.add(
            threads.submit(
                () -> {
                  for (int call = 0; call < 100; call++) {
                    if (limiter.check(log).allowed()) {
                      admitted.incrementAndGet();
                    }
                  }
                }));
      }
      for (Future<?> one : done) {
        one.get();
      }
      threads.shutdown();
      assertEquals(1000, admitted.get(), "1,600 requests against a limit of 1,000");
      assertEquals(1000, ((Counts.LogCounts) limiter.counts(log)).count());
    }
  }

  @Test
  void theAsyncAndReactiveFacesAnswerAsTheBlockingOne() {
    try (AsyncRateLimiter async = new AsyncRateLimiter(Servers.drivers().get(0).onServer())) {
      Limiter.Throttle burst = Limiter.throttle(Servers.unique("faces"), 1, 1, MINUTE);
      CompletableFuture<RateLimit> first = async.check(burst);
      RateLimit second =
          new ReactiveRateLimiter(async).check(List.of(burst), Options.defaults()).block();
      RateLimit third = async.blocking().check(burst);
      assertTrue(first.join().allowed());
      assertNotNull(second);
      assertTrue(second.allowed());
      assertFalse(third.allowed());
    }
  }

  @Test
  void topKeysAreTheServersRefusalsMergedOverItsPrimaries() {
    try (RedisCalls calls = Servers.drivers().get(0).onServer();
        RateLimiter limiter = new RateLimiter(calls)) {
      calls.call(List.of("CONFIG", "SET", "ratelimit.top-keys", "128")).join();
      Limiter.Throttle hot = Limiter.throttle(Servers.unique("top"), 0, 1, MINUTE);
      for (int request = 0; request < 6; request++) {
        limiter.check(hot);
      }
      List<TopKey> top = limiter.top(1000);
      assertTrue(
          top.stream().anyMatch(row -> row.key().equals(hot.key()) && row.refusals() >= 5),
          top.toString());
    }
  }

  /** Calls that fail the test if anything is sent: bad input is refused before any call. */
  static final RedisCalls NEVER =
      new RedisCalls() {
        @Override
        public CompletableFuture<Object> call(List<String> words) {
          throw new AssertionError("a call was made: " + words);
        }

        @Override
        public CompletableFuture<List<Object>> transaction(
            String key, List<List<String>> commands) {
          throw new AssertionError("a call was made");
        }

        @Override
        public CompletableFuture<List<Object>> onEveryPrimary(List<String> words) {
          throw new AssertionError("a call was made");
        }
      };

  @Test
  void badInputGetsAClearExceptionBeforeAnyCall() {
    RateLimiter limiter = new RateLimiter(NEVER);
    assertThrows(
        IllegalArgumentException.class,
        () -> Limiter.throttle("k", 1, 1, Duration.ZERO),
        "a zero period");
    assertThrows(
        IllegalArgumentException.class, () -> Limiter.window("k", 10, Duration.ofSeconds(-1)));
    assertThrows(IllegalArgumentException.class, () -> Limiter.log("", 10, MINUTE), "an empty key");
    assertThrows(
        IllegalArgumentException.class, () -> Limiter.throttle("k", 1, 0, MINUTE), "a count of 0");
    assertThrows(
        IllegalArgumentException.class,
        () -> limiter.check(List.of(), Options.defaults()),
        "no limiter");
    assertThrows(
        IllegalArgumentException.class, () -> Priority.parse("urgent"), "an unknown priority");
    assertThrows(IllegalArgumentException.class, () -> Options.defaults().quantity(-1));
    assertThrows(IllegalArgumentException.class, () -> Options.defaults().delay(SECOND).force());
    assertThrows(IllegalArgumentException.class, () -> Options.defaults().refund().atMost());
    assertThrows(
        IllegalArgumentException.class, () -> Options.defaults().block(SECOND).delay(SECOND));
    assertThrows(IllegalArgumentException.class, () -> Limiter.Algorithm.buckets(0));
    assertThrows(IllegalArgumentException.class, () -> limiter.top(0));
    assertThrows(IllegalArgumentException.class, () -> limiter.acquireLease("k", 0, MINUTE, 1));
    assertThrows(IllegalArgumentException.class, () -> Config.defaults().timeout(Duration.ZERO));
    assertThrows(
        IllegalArgumentException.class,
        () ->
            limiter.counts(Limiter.window("k", 1, MINUTE).algorithm(Limiter.Algorithm.buckets(4))));
    assertThrows(IllegalArgumentException.class, () -> new Quota(limiter, List.of(), 10, SECOND));
  }

  @ParameterizedTest
  @MethodSource("drivers")
  void theDenyCacheShadowModeAndTheMetrics(Servers.Driver driver) {
    PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
    Config config = Config.defaults().denyCache(100).metrics(new MicrometerMetrics(registry));
    try (RedisCalls calls = driver.onServer();
        RateLimiter limiter = new RateLimiter(calls, config)) {
      Limiter.Throttle one = Limiter.throttle(Servers.unique("cache"), 0, 1, MINUTE).named("one");
      assertTrue(limiter.check(one).allowed());
      assertFalse(limiter.check(one).allowed());
      RateLimit cached = limiter.check(one);
      assertFalse(cached.allowed());
      assertTrue(cached.retryAfter().compareTo(Duration.ofSeconds(50)) > 0);
      RateLimit shadow = limiter.check(List.of(one), Options.defaults(), true);
      assertTrue(shadow.allowed());
      assertTrue(shadow.shadow());
      String scrape = registry.scrape();
      assertTrue(
          scrape.contains("ratelimit_decisions_total{outcome=\"deny_cache\",policy=\"one\"} 1.0"),
          scrape);
      assertTrue(
          scrape.contains("ratelimit_decisions_total{outcome=\"shadow\",policy=\"one\"} 1.0"),
          scrape);
      assertTrue(
          scrape.contains("ratelimit_decisions_total{outcome=\"refused\",policy=\"one\"} 1.0"),
          scrape);
      assertTrue(
          scrape.contains("ratelimit_decisions_total{outcome=\"allowed\",policy=\"one\"} 1.0"),
          scrape);
      assertTrue(scrape.contains("ratelimit_server_call_duration_seconds_count"), scrape);
    }
  }

  @ParameterizedTest
  @MethodSource("drivers")
  void quotaLeasesHoldTheLimitWithACallPerBatch(Servers.Driver driver) throws Exception {
    try (RateLimiter limiter = new RateLimiter(driver.onServer())) {
      Limiter.Window global =
          Limiter.window(Servers.unique("quota"), 500, MINUTE).algorithm(Limiter.Algorithm.FIXED);
      List<Quota> quotas =
          List.of(
              new Quota(limiter, List.of(global), 20, Duration.ofSeconds(30)),
              new Quota(limiter, List.of(global), 20, Duration.ofSeconds(30)));
      int admitted = 0;
      for (int request = 0; request < 700; request++) {
        if (quotas.get(request % 2).take(1)) {
          admitted++;
        }
      }
      long calls = quotas.stream().mapToLong(quota -> quota.counters()[2]).sum();
      assertTrue(admitted <= 500, "never over the limit: " + admitted);
      assertTrue(admitted >= 500 - 2 * 20, "at most a batch per process held back: " + admitted);
      assertTrue(calls < 100, "a call per batch, not per request: " + calls);
      for (Quota quota : quotas) {
        quota.close();
      }
    }
  }

  @ParameterizedTest
  @MethodSource("drivers")
  void sharedListsChangeInOneTransactionAndReadersFollowTheVersion(Servers.Driver driver) {
    try (AsyncRateLimiter limiter = new AsyncRateLimiter(driver.onServer())) {
      String hash = Servers.unique("lists");
      SharedLists writer = new SharedLists(limiter, hash, Duration.ofMillis(1));
      SharedLists reader = new SharedLists(limiter, hash, Duration.ofMillis(1));
      writer.add("deny", "203.0.113.7", "1");
      assertTrue(reader.contains("deny", "203.0.113.7"));
      writer.remove("deny", "203.0.113.7");
      assertFalse(reader.contains("deny", "203.0.113.7"));
    }
  }
}
