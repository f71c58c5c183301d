package io.github.redisratelimit.gateway;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import io.github.redisratelimit.RedisCalls;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.cloud.gateway.filter.ratelimit.RedisRateLimiter;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A real Spring Cloud Gateway over real HTTP: a route's {@code RequestRateLimiter} on the gateway's
 * own {@code redisRateLimiter} bean, now the drop-in (no script run: {@code INFO commandstats}
 * counts no {@code EVALSHA}), answers 429 with {@code RedisRateLimiter}'s headers; a route on
 * {@code moduleRateLimiter} holds a day's limit beside its bucket, with the IETF fields.
 */
@SpringBootTest(
    classes = GatewayApp.class,
    webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    properties = "spring.main.web-application-type=reactive")
class GatewayTest {
  static final HttpServer UPSTREAM;

  static {
    try {
      UPSTREAM = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 64);
    } catch (IOException failed) {
      throw new UncheckedIOException(failed);
    }
    UPSTREAM.createContext(
        "/",
        exchange -> {
          byte[] body = "ok".getBytes();
          exchange.sendResponseHeaders(200, body.length);
          exchange.getResponseBody().write(body);
          exchange.close();
        });
    UPSTREAM.start();
  }

  @DynamicPropertySource
  static void properties(DynamicPropertyRegistry registry) {
    String upstream = "http://127.0.0.1:" + UPSTREAM.getAddress().getPort();
    registry.add("spring.data.redis.url", () -> System.getenv("REDIS_URL"));
    String bucket = route(registry, 0, "bucket", upstream);
    registry.add(bucket + "redis-rate-limiter.replenishRate", () -> "1");
    registry.add(bucket + "redis-rate-limiter.burstCapacity", () -> "2");
    String day = route(registry, 1, "day", upstream);
    registry.add(day + "rate-limiter", () -> "#{@moduleRateLimiter}");
    registry.add(day + "module-rate-limiter.replenishRate", () -> "100");
    registry.add(day + "module-rate-limiter.burstCapacity", () -> "100");
    registry.add(day + "module-rate-limiter.limits[0].limit", () -> "2");
    registry.add(day + "module-rate-limiter.limits[0].window", () -> "1d");
    registry.add(day + "module-rate-limiter.limits[0].algorithm", () -> "fixed");
    registry.add(day + "module-rate-limiter.limits[0].name", () -> "day");
  }

  /**
   * Registers the gateway's route {@code index}: {@code id}, to {@code upstream}, for the paths
   * under {@code /id/}, limited by {@code RequestRateLimiter} per {@code X-Client}; the prefix of
   * the filter's arguments, for the limiter's own.
   */
  static String route(DynamicPropertyRegistry registry, int index, String id, String upstream) {
    String route = "spring.cloud.gateway.server.webflux.routes[" + index + "].";
    registry.add(route + "id", () -> id);
    registry.add(route + "uri", () -> upstream);
    registry.add(route + "predicates[0]", () -> "Path=/" + id + "/**");
    registry.add(route + "filters[0].name", () -> "RequestRateLimiter");
    registry.add(route + "filters[0].args.key-resolver", () -> "#{@clientKeyResolver}");
    return route + "filters[0].args.";
  }

  @LocalServerPort int port;
  @Autowired RedisRateLimiter redisRateLimiter;
  @Autowired RedisCalls calls;

  HttpResponse<String> get(String path, String client) throws Exception {
    HttpRequest request =
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .header("X-Client", client)
            .build();
    return HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString());
  }

  long evalshas() {
    String stats = (String) calls.call(List.of("INFO", "commandstats")).join();
    return stats
        .lines()
        .filter(line -> line.startsWith("cmdstat_evalsha:") || line.startsWith("cmdstat_eval:"))
        .mapToLong(line -> Long.parseLong(line.replaceAll(".*calls=(\\d+).*", "$1")))
        .sum();
  }

  @Test
  void theGatewaysOwnRedisRateLimiterIsTheDropIn() throws Exception {
    assertInstanceOf(ModuleRedisRateLimiter.class, redisRateLimiter);
    long scripts = evalshas();
    String client = UUID.randomUUID().toString();
    HttpResponse<String> first = get("/bucket/a", client);
    assertEquals(200, first.statusCode());
    assertEquals("1", first.headers().firstValue("X-RateLimit-Remaining").orElseThrow());
    assertEquals("1", first.headers().firstValue("X-RateLimit-Replenish-Rate").orElseThrow());
    assertEquals("2", first.headers().firstValue("X-RateLimit-Burst-Capacity").orElseThrow());
    assertEquals(200, get("/bucket/a", client).statusCode());
    HttpResponse<String> refused = get("/bucket/a", client);
    assertEquals(429, refused.statusCode());
    assertEquals("0", refused.headers().firstValue("X-RateLimit-Remaining").orElseThrow());
    assertEquals(scripts, evalshas(), "no script ran");
  }

  @Test
  void aRouteHoldsADaysLimitBesideItsBucket() throws Exception {
    String client = UUID.randomUUID().toString();
    HttpResponse<String> first = get("/day/a", client);
    assertEquals(200, first.statusCode());
    assertEquals(
        "\"bucket\";q=100;w=1, \"day\";q=2;w=86400",
        first.headers().firstValue("RateLimit-Policy").orElseThrow());
    assertEquals(200, get("/day/a", client).statusCode());
    HttpResponse<String> refused = get("/day/a", client);
    assertEquals(429, refused.statusCode());
    assertTrue(refused.headers().firstValue("RateLimit").orElseThrow().contains("\"day\";r=0;"));
    assertTrue(refused.headers().firstValue("Retry-After").isPresent());
  }
}
