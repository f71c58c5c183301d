package io.github.redisratelimit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.load.LoadShedder;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * A request waiting on a frozen server is out of the load shedder's local limit: what the tests of
 * it in Spring MVC, WebFlux and Spring Cloud Gateway share.
 */
public final class Waiting {
  private Waiting() {}

  /**
   * {@code request} (a call the app limits, its status) is answered; then, the server behind {@code
   * proxy} frozen, it waits on it: read before its wait ends, the shedder's signals count it and
   * its local limit does not. It is answered 200 once the wait gives up (the app's failure policy
   * allows), and nothing is left in flight once the app has finished it.
   */
  public static void outOfTheLimitsFlight(
      LoadShedder shedder, Servers.FrozenProxy proxy, Supplier<Integer> request) throws Exception {
    assertEquals(200, request.get());
    // A response reaches the client before the app's filter finishes its request (WebFlux, a
    // gateway): the requests before are out of flight first.
    nothingInFlight(shedder);
    proxy.freeze();
    try {
      CompletableFuture<Integer> waiting = CompletableFuture.supplyAsync(request);
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
      proxy.thaw();
    }
    nothingInFlight(shedder);
  }

  /** Waits (at most 10 s) until the shedder's local limit counts no request in flight. */
  static void nothingInFlight(LoadShedder shedder) throws InterruptedException {
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (shedder.limit().inflight() != 0) {
      assertTrue(
          System.nanoTime() < deadline, shedder.limit().inflight() + " in flight after 10 s");
      Thread.sleep(5);
    }
  }
}
