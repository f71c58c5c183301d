package io.github.redisratelimit.spring.webflux;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.RedisCalls;
import io.github.redisratelimit.load.LoadShedder;
import io.github.redisratelimit.spring.Http;
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
 * The starter in a real WebFlux app over real HTTP: {@code @RateLimit} on methods returning {@code
 * Mono} and {@code Flux}, keyed by the exchange, checked without blocking, answers 429 with {@code
 * Retry-After} and the IETF fields; {@code ratelimit.paths} as a WebFilter; load shedding as a
 * WebFilter answering 503 by priority.
 */
@SpringBootTest(
    classes = WebFluxApp.class,
    webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    properties = "spring.main.web-application-type=reactive")
class WebFluxTest {
  static final String SERVICE = "java:webflux:load:" + UUID.randomUUID();

  @DynamicPropertySource
  static void properties(DynamicPropertyRegistry registry) {
    registry.add("spring.data.redis.url", Http::redisUrl);
    registry.add("ratelimit.paths[0].patterns[0]", () -> "/paths/**");
    registry.add("ratelimit.paths[0].key", () -> "header:X-Client");
    registry.add("ratelimit.paths[0].limits[0].rate", () -> "1");
    registry.add("ratelimit.load-shedding.service", () -> SERVICE);
  }

  @LocalServerPort int port;
  @Autowired LoadShedder shedder;
  @Autowired RedisCalls calls;

  static String client() {
    return UUID.randomUUID().toString();
  }

  @Test
  void aRefusedMonoGets429WithRetryAfterAndTheFields() {
    String client = client();
    for (int call = 0; call < 3; call++) {
      HttpResponse<String> admitted = Http.get(port, "/limited", "X-Client", client);
      assertEquals(200, admitted.statusCode());
      assertEquals(
          "\"minute\";q=3;w=60", admitted.headers().firstValue("RateLimit-Policy").orElseThrow());
    }
    HttpResponse<String> refused = Http.get(port, "/limited", "X-Client", client);
    assertEquals(429, refused.statusCode());
    assertTrue(refused.headers().firstValue("Retry-After").isPresent());
    assertEquals(200, Http.get(port, "/limited", "X-Client", client()).statusCode());
  }

  @Test
  void aFluxIsCheckedWhenSubscribed() {
    String client = client();
    HttpResponse<String> first = Http.get(port, "/stream", "X-Client", client);
    assertEquals(200, first.statusCode());
    assertTrue(first.body().contains("a") && first.body().contains("b"));
    assertEquals(429, Http.get(port, "/stream", "X-Client", client).statusCode());
  }

  @Test
  void wholePathsAreLimitedByAWebFilter() {
    String client = client();
    assertEquals(200, Http.get(port, "/paths/one", "X-Client", client).statusCode());
    HttpResponse<String> refused = Http.get(port, "/paths/one", "X-Client", client);
    assertEquals(429, refused.statusCode());
    assertEquals(
        "\"rate\";q=1;w=1", refused.headers().firstValue("RateLimit-Policy").orElseThrow());
  }

  @Test
  void loadSheddingAnswers503ByPriority() {
    Shedding.shedsByPriority(calls, shedder, port, SERVICE, "critical_plus");
  }
}
