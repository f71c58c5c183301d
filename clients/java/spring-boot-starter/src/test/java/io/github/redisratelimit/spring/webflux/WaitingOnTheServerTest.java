package io.github.redisratelimit.spring.webflux;

import io.github.redisratelimit.Servers;
import io.github.redisratelimit.Waiting;
import io.github.redisratelimit.load.LoadShedder;
import io.github.redisratelimit.spring.Http;
import java.util.UUID;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A request of the WebFlux app waiting on a frozen server, its path limited by a rule and the app
 * shedding load with the starter's defaults: while it waits, the shedder's signals count it, and
 * its local limit does not (a frozen server's timeout is not the service's concurrency).
 */
@SpringBootTest(
    classes = WebFluxApp.class,
    webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    properties = "spring.main.web-application-type=reactive")
class WaitingOnTheServerTest {
  static final Servers.FrozenProxy PROXY = Servers.FrozenProxy.inFront();

  @DynamicPropertySource
  static void properties(DynamicPropertyRegistry registry) {
    registry.add("spring.data.redis.url", () -> PROXY.uri().toString());
    registry.add("ratelimit.on-error", () -> "allow");
    registry.add("ratelimit.timeout", () -> "5s");
    registry.add("ratelimit.paths[0].patterns[0]", () -> "/paths/**");
    registry.add("ratelimit.paths[0].key", () -> "header:X-Client");
    registry.add("ratelimit.paths[0].limits[0].rate", () -> "1000");
    registry.add("ratelimit.load-shedding.service", () -> "java:waits:" + UUID.randomUUID());
  }

  @LocalServerPort int port;

  @Autowired LoadShedder shedder;

  @Test
  void aRequestWaitingOnTheServerIsNotInTheLimitsFlight() throws Exception {
    Waiting.outOfTheLimitsFlight(
        shedder, PROXY, () -> Http.get(port, "/paths/one", "X-Client", "waits").statusCode());
  }
}
