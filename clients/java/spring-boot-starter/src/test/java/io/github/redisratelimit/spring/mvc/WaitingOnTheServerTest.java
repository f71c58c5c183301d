package io.github.redisratelimit.spring.mvc;

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
 * A request of the MVC app waiting on a frozen server, its route limited by the annotation and the
 * app shedding load with the starter's defaults: while it waits, the shedder's signals count it,
 * and its local limit does not (a frozen server's timeout is not the service's concurrency).
 */
@SpringBootTest(classes = MvcApp.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class WaitingOnTheServerTest {
  static final Servers.FrozenProxy PROXY = Servers.FrozenProxy.inFront();

  @DynamicPropertySource
  static void properties(DynamicPropertyRegistry registry) {
    registry.add("spring.data.redis.url", () -> PROXY.uri().toString());
    registry.add("ratelimit.on-error", () -> "allow");
    registry.add("ratelimit.timeout", () -> "5s");
    registry.add("ratelimit.load-shedding.service", () -> "java:waits:" + UUID.randomUUID());
  }

  @LocalServerPort int port;

  @Autowired LoadShedder shedder;

  @Test
  void aRequestWaitingOnTheServerIsNotInTheLimitsFlight() throws Exception {
    Waiting.outOfTheLimitsFlight(shedder, PROXY, () -> Http.get(port, "/outage").statusCode());
  }
}
