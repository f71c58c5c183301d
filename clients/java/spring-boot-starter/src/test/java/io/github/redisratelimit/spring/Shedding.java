package io.github.redisratelimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import io.github.redisratelimit.RedisCalls;
import io.github.redisratelimit.load.LoadShedder;
import java.net.http.HttpResponse;
import java.util.List;

/** The load-shedding check each web stack's tests run over real HTTP. */
public final class Shedding {
  private Shedding() {}

  /**
   * Sets {@code service}'s policy so that its level sheds every {@code sheddable} request, and
   * checks that the app on {@code port} answers such a request 503 with {@code Retry-After} and
   * serves {@code admitted}; then lifts the policy and checks that a sheddable request is served
   * again.
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
  }

  /** A policy whose first level starts at {@code inflight} requests in flight. */
  private static void policy(RedisCalls calls, String service, String inflight) {
    String policy = "HOLD 0 LEVEL inflight " + inflight + " SHARES 1 1 0 0";
    calls.call(List.of(("RL.LOAD.POLICY " + service + " " + policy).split(" "))).join();
  }
}
