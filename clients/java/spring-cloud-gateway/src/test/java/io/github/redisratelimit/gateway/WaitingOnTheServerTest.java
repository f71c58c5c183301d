package io.github.redisratelimit.gateway;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.Servers;
import io.github.redisratelimit.Waiting;
import io.github.redisratelimit.load.LoadShedder;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.UUID;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A gateway request waiting on a frozen server, its route limited by {@code RequestRateLimiter} and
 * the gateway shedding load with the starter's defaults: while it waits, the shedder's signals
 * count it and its local limit does not, on the gateway's own {@code redisRateLimiter} (the
 * drop-in) and on {@code moduleRateLimiter} alike, though Spring Cloud Gateway gives a {@code
 * RateLimiter} no exchange.
 */
@SpringBootTest(
    classes = GatewayApp.class,
    webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    properties = "spring.main.web-application-type=reactive")
class WaitingOnTheServerTest {
  static final Servers.FrozenProxy PROXY = Servers.FrozenProxy.inFront();

  @DynamicPropertySource
  static void properties(DynamicPropertyRegistry registry) {
    String upstream = "http://127.0.0.1:" + GatewayTest.UPSTREAM.getAddress().getPort();
    registry.add("spring.data.redis.url", () -> PROXY.uri().toString());
    registry.add("ratelimit.timeout", () -> "5s");
    registry.add(
        "ratelimit.load-shedding.service", () -> "java:gateway-waits:" + UUID.randomUUID());
    String bucket = GatewayTest.route(registry, 0, "bucket", upstream);
    registry.add(bucket + "redis-rate-limiter.replenishRate", () -> "1000");
    registry.add(bucket + "redis-rate-limiter.burstCapacity", () -> "1000");
    String module = GatewayTest.route(registry, 1, "module", upstream);
    registry.add(module + "rate-limiter", () -> "#{@moduleRateLimiter}");
    registry.add(module + "module-rate-limiter.replenishRate", () -> "1000");
    registry.add(module + "module-rate-limiter.burstCapacity", () -> "1000");
    registry.add(module + "module-rate-limiter.limits[0].limit", () -> "1000");
    registry.add(module + "module-rate-limiter.limits[0].window", () -> "1m");
  }

  @LocalServerPort int port;

  @Autowired LoadShedder shedder;

  HttpResponse<Void> get(String path) {
    HttpRequest request =
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .header("X-Client", "waits")
            .build();
    try {
      return HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.discarding());
    } catch (Exception failed) {
      throw new IllegalStateException(failed);
    }
  }

  /**
   * Waits (at most 20 s) until a request on {@code path} is answered by the server, not by the
   * failure policy ({@code X-RateLimit-Remaining} is -1 then): the circuit a test's frozen server
   * opened has closed.
   */
  void answeredByTheServer(String path) throws InterruptedException {
    long deadline = System.nanoTime() + 20_000_000_000L;
    while (get(path).headers().firstValue("X-RateLimit-Remaining").orElse("-1").equals("-1")) {
      assertTrue(System.nanoTime() < deadline, "the server never answered on " + path);
      Thread.sleep(50);
    }
  }

  @Test
  void aRequestWaitingOnTheServerIsNotInTheLimitsFlight() throws Exception {
    for (String path : new String[] {"/bucket/a", "/module/a"}) {
      answeredByTheServer(path);
      Waiting.outOfTheLimitsFlight(shedder, PROXY, () -> get(path).statusCode());
    }
  }
}
