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
      // The first call opens the connection through the proxy, within the 200 ms timeout only
      // when the machine is not busy: wait for an answer, as after the freeze.
      assertTrue(answersWithin(limiter, burst, Duration.ofSeconds(10)), "the server answers");
      proxy.freeze();
      assertTrue(limiter.check(burst).failed());
      proxy.thaw();
      assertTrue(answersWithin(limiter, burst, Duration.ofSeconds(10)), "the server answers again");
    }
  }

  /** Whether a check of {@code burst} is answered by the server within {@code bound} (polled). */
  static boolean answersWithin(RateLimiter limiter, Limiter burst, Duration bound)
      throws InterruptedException {
    long deadline = System.nanoTime() + bound.toNanos();
    while (System.nanoTime() < deadline) {
      if (!limiter.check(burst).failed()) {
        return true;
      }
      Thread.sleep(50);
    }
    return false;
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

  /**
   * A connection made from a client while no server listens (an application starting during a
   * failover): made at once, each call answers by the policy within the deadline, and once the
   * server is there the next calls reach it; nothing is opened before the first call.
   */
  @Test
  void aClientMadeWhileTheServerIsDownStartsAndConnectsOnceItIsUp() throws Exception {
    int port;
    try (java.net.ServerSocket probe =
        new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      port = probe.getLocalPort();
    }
    io.lettuce.core.RedisClient client =
        io.lettuce.core.RedisClient.create("redis://127.0.0.1:" + port);
    Config config = Config.defaults().timeout(TIMEOUT).onError(OnError.ALLOW);
    try (RateLimiter limiter = new RateLimiter(LettuceCalls.connect(client), config)) {
      Limiter log = Limiter.log(Servers.unique("down-at-start"), 5, LONG);
      Duration took = timed(() -> assertTrue(limiter.check(log).failed()));
      assertTrue(took.compareTo(TIMEOUT.plus(MARGIN)) < 0, "took " + took);
      try (ForwardedPort forwarded = new ForwardedPort(port, Servers.uri())) {
        assertEquals(port, forwarded.port());
        long deadline = System.nanoTime() + LONG.toNanos();
        RateLimit answered = limiter.check(log);
        while (answered.failed() && System.nanoTime() < deadline) {
          Thread.sleep(50); // the circuit's cool-down, then a probe opens the connection
          answered = limiter.check(log);
        }
        assertFalse(answered.failed(), "the server was reached once it listened");
        assertEquals(4, answered.remaining());
      }
    } finally {
      client.shutdown();
    }
  }

  /** Port {@code port} relaying to the server, until closed. */
  static final class ForwardedPort implements AutoCloseable {
    private final java.net.ServerSocket socket;

    ForwardedPort(int port, java.net.URI server) throws java.io.IOException {
      socket = new java.net.ServerSocket(port, 16, java.net.InetAddress.getLoopbackAddress());
      Thread acceptor =
          new Thread(
              () -> {
                while (!socket.isClosed()) {
                  try {
                    java.net.Socket client = socket.accept();
                    java.net.Socket upstream =
                        new java.net.Socket(server.getHost(), server.getPort());
                    pipe(client, upstream);
                    pipe(upstream, client);
                  } catch (java.io.IOException closed) {
                    return;
                  }
                }
              },
              "forwarded-port");
      acceptor.setDaemon(true);
      acceptor.start();
    }

    private static void pipe(java.net.Socket from, java.net.Socket to) {
      Thread thread =
          new Thread(
              () -> {
                try {
                  from.getInputStream().transferTo(to.getOutputStream());
                } catch (java.io.IOException ended) {
                  // the connection ended
                }
              },
              "forwarded-port-copy");
      thread.setDaemon(true);
      thread.start();
    }

    int port() {
      return socket.getLocalPort();
    }

    @Override
    public void close() throws java.io.IOException {
      socket.close();
    }
  }
}
