package io.github.redisratelimit.spring.mvc;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.LettuceCalls;
import io.github.redisratelimit.RedisCalls;
import io.github.redisratelimit.Servers;
import io.github.redisratelimit.spring.Http;
import io.lettuce.core.RedisClient;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * Issue 58: a 5 s outage of the server under the MVC app with both the rate limit and load shedding
 * at their defaults (and under deny) sheds nothing once the server is back: the limiter's own
 * answers while it failed (its 500s, its 503s) are not the service failing. What is asserted is
 * what the server reports (the service's level, polled from a connection of the test's own, not
 * through the proxy) and what the app answered.
 */
final class Outage {
  private Outage() {}

  enum Phase {
    BEFORE,
    FROZEN,
    BACK
  }

  record Answer(Phase phase, String path, int status) {}

  static void shedsNothingOnceTheServerIsBack(
      int port, Servers.FrozenProxy proxy, String service, int whileFrozen) throws Exception {
    try (RedisCalls direct = LettuceCalls.connect(RedisClient.create(Servers.url()))) {
      // Warmed up first, as a readiness probe would: a JVM's first requests (the dispatcher's
      // start, the first compilations) are no measure of its health.
      for (int request = 0; request < 50; request++) {
        Http.get(port, request % 2 == 0 ? "/outage" : "/open", "X-Priority", "critical_plus");
      }
      ConcurrentLinkedQueue<Answer> answers = new ConcurrentLinkedQueue<>();
      Phase[] phase = {Phase.BEFORE};
      ExecutorService senders = Executors.newFixedThreadPool(64);
      boolean[] running = {true};
      Thread pacer =
          new Thread(
              () -> {
                int number = 0;
                while (running[0]) {
                  String path = number++ % 2 == 0 ? "/outage" : "/open";
                  Phase at = phase[0];
                  senders.execute(
                      () -> answers.add(new Answer(at, path, Http.get(port, path).statusCode())));
                  try {
                    Thread.sleep(33);
                  } catch (InterruptedException stop) {
                    return;
                  }
                }
              });
      pacer.start();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (instances(direct, service) == 0 && System.nanoTime() < deadline) {
        Thread.sleep(100);
      }
      assertTrue(instances(direct, service) > 0, "the app reports before the outage");
      Thread.sleep(2000);
      phase[0] = Phase.FROZEN;
      proxy.freeze();
      Thread.sleep(5000);
      proxy.thaw();
      phase[0] = Phase.BACK;
      long highest = 0;
      boolean reported = false;
      for (int poll = 0; poll < 40; poll++) {
        List<?> status = (List<?>) direct.call(List.of("RL.LOAD.STATUS", service)).join();
        highest = Math.max(highest, (Long) status.get(1));
        reported |= (Long) status.get(5) > 0;
        Thread.sleep(100);
      }
      running[0] = false;
      pacer.join();
      senders.shutdown();
      senders.awaitTermination(30, TimeUnit.SECONDS);
      List<String> failures = new ArrayList<>();
      List<Integer> frozen =
          answers.stream()
              .filter(one -> one.phase == Phase.FROZEN && one.path.equals("/outage"))
              .map(Answer::status)
              .toList();
      if (!frozen.contains(whileFrozen)) {
        failures.add("/outage answered " + frozen + " while frozen");
      }
      for (Phase at : Phase.values()) {
        List<Integer> open =
            answers.stream()
                .filter(one -> one.phase == at && one.path.equals("/open"))
                .map(Answer::status)
                .toList();
        List<Integer> refused = new ArrayList<>();
        for (int index = 0; index < open.size(); index++) {
          if (open.get(index) != 200) {
            refused.add(index);
          }
        }
        if (!refused.isEmpty()) {
          failures.add(
              at
                  + ": /open answered other than 200 at "
                  + refused
                  + " of "
                  + open.size()
                  + ": "
                  + open);
        }
      }
      if (!reported) {
        failures.add("no report after the outage");
      }
      if (highest != 0) {
        failures.add("the level rose to " + highest + " after the outage");
      }
      List<Integer> back =
          answers.stream()
              .filter(one -> one.phase == Phase.BACK && one.path.equals("/outage"))
              .map(Answer::status)
              .toList();
      if (!back.contains(200)) {
        failures.add("/outage answered " + back + " after");
      }
      assertTrue(failures.isEmpty(), String.join("\n", failures));
    }
  }

  private static long instances(RedisCalls direct, String service) {
    List<?> status = (List<?>) direct.call(List.of("RL.LOAD.STATUS", service)).join();
    return (Long) status.get(5);
  }
}
