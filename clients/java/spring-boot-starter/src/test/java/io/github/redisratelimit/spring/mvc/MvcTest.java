package io.github.redisratelimit.spring.mvc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.RedisCalls;
import io.github.redisratelimit.load.LoadShedder;
import io.github.redisratelimit.spring.Http;
import io.github.redisratelimit.spring.RateLimitedException;
import io.github.redisratelimit.spring.Shedding;
import java.net.http.HttpResponse;
import java.util.UUID;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The starter in a real Spring MVC app over real HTTP: {@code @RateLimit} answers 429 with {@code
 * Retry-After} and the IETF fields, several limits decided together, a rate under one a second; a
 * bean that is not a controller throws; {@code ratelimit.paths} limits whole paths; load shedding
 * answers 503 by priority.
 */
@SpringBootTest(classes = MvcApp.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class MvcTest {
  static final String SERVICE = "java:mvc:load:" + UUID.randomUUID();

  @DynamicPropertySource
  static void properties(DynamicPropertyRegistry registry) {
    registry.add("spring.data.redis.url", Http::redisUrl);
    registry.add("ratelimit.paths[0].patterns[0]", () -> "/paths/**");
    registry.add("ratelimit.paths[0].key", () -> "header:X-Client");
    registry.add("ratelimit.paths[0].limits[0].limit", () -> "2");
    registry.add("ratelimit.paths[0].limits[0].window", () -> "1m");
    registry.add("ratelimit.load-shedding.service", () -> SERVICE);
  }

  @LocalServerPort int port;
  @Autowired MvcApp.Billing billing;
  @Autowired LoadShedder shedder;
  @Autowired RedisCalls calls;

  static String client() {
    return UUID.randomUUID().toString();
  }

  @Test
  void aRefusedCallGets429WithRetryAfterAndTheFields() {
    String client = client();
    for (int call = 0; call < 3; call++) {
      HttpResponse<String> admitted = Http.get(port, "/limited", "X-Client", client);
      assertEquals(200, admitted.statusCode());
      assertEquals(
          "\"minute\";q=3;w=60", admitted.headers().firstValue("RateLimit-Policy").orElseThrow());
    }
    HttpResponse<String> refused = Http.get(port, "/limited", "X-Client", client);
    assertEquals(429, refused.statusCode());
    long retry = Long.parseLong(refused.headers().firstValue("Retry-After").orElseThrow());
    // A sliding window: what it counted weighs until the end of the next window on the clock.
    assertTrue(retry >= 1 && retry <= 120, "Retry-After " + retry);
    assertTrue(
        refused.headers().firstValue("RateLimit").orElseThrow().startsWith("\"minute\";r=0;"));
    assertEquals(
        200,
        Http.get(port, "/limited", "X-Client", client()).statusCode(),
        "another client's own limit");
  }

  @Test
  void severalLimitsAtARateUnderOneASecond() {
    String client = client();
    HttpResponse<String> first = Http.get(port, "/slow", "X-Client", client);
    assertEquals(200, first.statusCode());
    assertEquals(
        "\"rate\";q=1;w=2, \"day\";q=1000;w=86400",
        first.headers().firstValue("RateLimit-Policy").orElseThrow());
    HttpResponse<String> second = Http.get(port, "/slow", "X-Client", client);
    assertEquals(429, second.statusCode(), "one every two seconds");
    assertTrue(
        second.headers().firstValue("RateLimit").orElseThrow().contains("\"day\";r=999;"),
        "the day's limit was not charged");
  }

  @Test
  void aBeanThatIsNotAControllerThrows() {
    String customer = client();
    assertEquals("charged " + customer, billing.charge(customer));
    assertEquals("charged " + customer, billing.charge(customer));
    RateLimitedException refused =
        assertThrows(RateLimitedException.class, () -> billing.charge(customer));
    assertEquals(429, refused.status());
    assertNotNull(refused.result().retryAfter());
  }

  @Test
  void wholePathsAreLimitedByTheirRule() {
    String client = client();
    assertEquals(200, Http.get(port, "/paths/one", "X-Client", client).statusCode());
    assertEquals(200, Http.get(port, "/paths/one", "X-Client", client).statusCode());
    assertEquals(429, Http.get(port, "/paths/one", "X-Client", client).statusCode());
    assertEquals(
        200, Http.get(port, "/open", "X-Client", client).statusCode(), "no rule for /open");
    assertEquals(200, Http.get(port, "/paths/one").statusCode(), "no X-Client: not limited");
  }

  @Test
  void loadSheddingAnswers503ByPriority() {
    Shedding.shedsByPriority(calls, shedder, port, SERVICE, "critical");
  }
}
