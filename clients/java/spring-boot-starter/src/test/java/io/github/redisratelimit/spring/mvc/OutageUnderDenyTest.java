package io.github.redisratelimit.spring.mvc;

import io.github.redisratelimit.Servers;
import java.util.UUID;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/** {@link Outage} with the failure policy `deny`. */
@SpringBootTest(classes = MvcApp.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class OutageUnderDenyTest {
  static final String SERVICE = "java:outage:deny:" + UUID.randomUUID();
  static final Servers.FrozenProxy PROXY = Servers.FrozenProxy.inFront();

  @DynamicPropertySource
  static void properties(DynamicPropertyRegistry registry) {
    registry.add("spring.data.redis.url", () -> PROXY.uri().toString());
    registry.add("ratelimit.on-error", () -> "deny");
    registry.add("ratelimit.load-shedding.service", () -> SERVICE);
  }

  @LocalServerPort int port;

  @Test
  void aServerOutageShedsNothingOnceItIsBack() throws Exception {
    Outage.shedsNothingOnceTheServerIsBack(port, PROXY, SERVICE, 503);
  }
}
