package io.github.redisratelimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.RedisCalls;
import io.github.redisratelimit.load.LoadShedder;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

/** The load-shedding check each web stack's tests run over real HTTP. */
public final class Shedding {
  private Shedding() {}

  /**
   * Sets {@code service}'s policy so that its level sheds every {@code sheddable} request, and
   * checks that the app on {@code port} answers such a request 503 with {@code Retry-After} and
   * serves {@code admitted}; then lifts the policy and checks that a sheddable request is served
   * again. Then two requests to {@code /items/{number}}: the local limit keeps each route's latency
   * apart, named by the pattern the framework matched, not by the path.
   */
  public static void shedsByPriority(
      RedisCalls calls, LoadShedder shedder, int port, String service, String admitted) {
    policy(calls, service, "0");
    assertNotNull(shedder.report());
    HttpResponse<String> shed = Http.get(port, "/open", "X-Priority", "sheddable");
    assertEquals(503, shed.statusCode());
    assertEquals("1", shed.headers().firstValue("Retry-After").orElseThrow());
    assertEquals(200, Http.get(port, "/open", "X-Priority", admitted).statusCode());
    policy(calls, service, "1000000");
    assertNotNull(shedder.report());
    assertEquals(200, Http.get(port, "/open", "X-Priority", "sheddable").statusCode());
    for (String number : List.of("1", "2")) {
      assertEquals(number, Http.get(port, "/items/" + number, "X-Priority", admitted).body());
    }
    // The filter counts a request's end once the response is written: wait for it, bounded.
    String item = "GET /items/{number}";
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (!shedder.limit().routes().contains(item) && System.nanoTime() < deadline) {
      LockSupport.parkNanos(5_000_000);
    }
    List<String> routes = shedder.limit().routes();
    assertTrue(routes.containsAll(List.of("GET /open", item)), routes.toString());
    assertTrue(
        routes.stream().noneMatch(route -> route.startsWith("GET /items/1")), routes.toString());
  }

  /** A policy whose first level starts at {@code inflight} requests in flight. */
  private static void policy(RedisCalls calls, String service, String inflight) {
    String policy = "HOLD 0 LEVEL inflight " + inflight + " SHARES 1 1 0 0";
    calls.call(List.of(("RL.LOAD.POLICY " + service + " " + policy).split(" "))).join();
  }
}
