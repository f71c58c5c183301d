package io.github.redisratelimit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The server frozen (a proxy that stops relaying, as a stopped or partitioned server looks to its
 * clients): every call answers within the deadline with what the failure policy says, over each
 * driver; after a failure the circuit decides without asking, then one call probes while the others
 * keep the policy; service resumes once the server does.
 */
class FrozenTest {
  static final Duration TIMEOUT = Duration.ofMillis(200);

  /**
   * What a call may take past its deadline on a busy machine: the timer's wake-up and the future's
   * hand-off.
   */
  static final Duration MARGIN = Duration.ofMillis(800);

  static final Duration LONG = Duration.ofSeconds(30);

  static List<Servers.Driver> drivers() {
    return Servers.drivers();
  }

  static Duration timed(Runnable call) {
    long started = System.nanoTime();
    call.run();
    return Duration.ofNanos(System.nanoTime() - started);
  }

  @ParameterizedTest
  @MethodSource("drivers")
  void aFrozenServerCostsTheDeadlineThenThePolicyDecides(Servers.Driver driver) throws Exception {
    Limiter.Throttle burst =
        Limiter.throttle(Servers.unique("frozen"), 9, 10, Duration.ofSeconds(1));
    for (OnError policy : OnError.values()) {
      try (Servers.FrozenProxy proxy = new Servers.FrozenProxy(Servers.uri());
          RateLimiter limiter =
              new RateLimiter(
                  driver.on(proxy.uri()),
                  Config.defaults().timeout(TIMEOUT).onError(policy).cooldown(LONG))) {
        assertTrue(limiter.check(burst).allowed(), "through the proxy before it freezes");
        proxy.freeze();
        for (int call = 0; call < 3; call++) {
          RateLimit[] result = new RateLimit[1];
          Duration took =
              timed(
                  () -> {
                    if (policy == OnError.RAISE) {
                      assertThrows(ServerUnavailableException.class, () -> limiter.check(burst));
                    } else {
                      result[0] = limiter.check(burst);
                    }
                  });
          Duration bound = call == 0 ? TIMEOUT.plus(MARGIN) : MARGIN;
          assertTrue(took.compareTo(bound) < 0, policy + ", call " + call + " took " + took);
          if (policy != OnError.RAISE) {
            assertTrue(result[0].failed());
            assertEquals(policy == OnError.ALLOW, result[0].allowed(), policy.toString());
          }
        }
        // Leases follow the policy too.
        if (policy == OnError.RAISE) {
          assertThrows(
              ServerUnavailableException.class, () -> limiter.acquireLease("k", 1, LONG, 1));
        } else {
          Lease lease = limiter.acquireLease("k", 1, LONG, 1);
          assertEquals(policy == OnError.ALLOW, lease.allowed());
          assertEquals(0, lease.id());
          assertEquals(policy == OnError.ALLOW, limiter.renewLease("k", lease.id(), LONG));
        }
      }
    }
  }

  @ParameterizedTest
  @MethodSource("drivers")
  void serviceResumesOnceTheServerDoes(Servers.Driver driver) throws Exception {
    Limiter.Throttle burst =
        Limiter.throttle(Servers.unique("resume"), 99, 100, Duration.ofSeconds(1));
    try (Servers.FrozenProxy proxy = new Servers.FrozenProxy(Servers.uri());
        RateLimiter limiter =
            new RateLimiter(
                driver.on(proxy.uri()),
                Config.defaults()
                    .timeout(TIMEOUT)
                    .onError(OnError.DENY)
                    .cooldown(Duration.ofMillis(300)))) {
      assertFalse(limiter.check(burst).failed());
      proxy.freeze();
      assertTrue(limiter.check(burst).failed());
      proxy.thaw();
      long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
      boolean resumed = false;
      while (!resumed && System.nanoTime() < deadline) {
        resumed = !limiter.check(burst).failed();
        Thread.sleep(50);
      }
      assertTrue(resumed, "the server's answers again");
    }
  }

  /** Calls that never answer, counted; and a clock the test moves. */
  static final class Unanswered implements RedisCalls {
    final AtomicInteger calls = new AtomicInteger();

    @Override
    public CompletableFuture<Object> call(List<String> words) {
      calls.incrementAndGet();
      return new CompletableFuture<>();
    }

    @Override
    public CompletableFuture<List<Object>> transaction(String key, List<List<String>> commands) {
      return new CompletableFuture<>();
    }

    @Override
    public CompletableFuture<List<Object>> onEveryPrimary(List<String> words) {
      return new CompletableFuture<>();
    }
  }

  @Test
  void afterTheCooldownOneCallProbesWhileTheOthersKeepThePolicy() {
    Unanswered calls = new Unanswered();
    AtomicLong now = new AtomicLong();
    AsyncRateLimiter limiter =
        new AsyncRateLimiter(
            calls,
            Config.defaults()
                .timeout(Duration.ofMillis(50))
                .onError(OnError.DENY)
                .cooldown(Duration.ofSeconds(1))
                .clock(now::get));
    Limiter.Throttle burst = Limiter.throttle("probe", 9, 10, Duration.ofSeconds(1));
    assertTrue(
        limiter.check(burst).join().failed(), "the first call asks, and fails at its deadline");
    assertEquals(1, calls.calls.get());
    for (int call = 0; call < 5; call++) {
      assertTrue(limiter.check(burst).join().failed());
    }
    assertEquals(1, calls.calls.get(), "within the cool-down nothing asks");
    now.addAndGet(Duration.ofSeconds(1).toNanos());
    CompletableFuture<RateLimit> probe = limiter.check(burst);
    for (int call = 0; call < 5; call++) {
      assertTrue(limiter.check(burst).join().failed(), "decided while the probe is out");
    }
    assertEquals(2, calls.calls.get(), "one probe");
    assertTrue(probe.join().failed());
  }
}
