package io.github.redisratelimit.spring.mvc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.Servers;
import io.github.redisratelimit.load.LoadShedder;
import io.github.redisratelimit.spring.Http;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
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
  static final Servers.FrozenProxy PROXY;

  static {
    try {
      PROXY = new Servers.FrozenProxy(Servers.uri());
    } catch (IOException failed) {
      throw new UncheckedIOException(failed);
    }
  }

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
    assertEquals(200, Http.get(port, "/outage").statusCode());
    PROXY.freeze();
    try {
      CompletableFuture<Integer> waiting =
          CompletableFuture.supplyAsync(() -> Http.get(port, "/outage").statusCode());
      // Admitted (the signals count it) and waiting on the server (the limit does not), read
      // before the request's wait ends.
      boolean aside = false;
      while (!aside && !waiting.isDone()) {
        // The signals read on both sides of the limit: the request was in flight throughout.
        boolean before = shedder.signals().sample().get("inflight") == 1.0;
        long counted = shedder.limit().inflight();
        aside = before && counted == 0 && shedder.signals().sample().get("inflight") == 1.0;
        Thread.sleep(5);
      }
      assertTrue(aside, "waiting on the server: " + shedder.limit().inflight() + " in flight");
      assertEquals(200, waiting.get(30, TimeUnit.SECONDS), "allowed after the timeout");
    } finally {
      PROXY.thaw();
    }
    assertEquals(0, shedder.limit().inflight());
  }
}
