package io.github.redisratelimit.gateway;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.AsyncRateLimiter;
import io.github.redisratelimit.LettuceCalls;
import io.github.redisratelimit.ReactiveRateLimiter;
import io.github.redisratelimit.RedisCalls;
import io.lettuce.core.RedisClient;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.gateway.filter.ratelimit.RateLimiter;
import org.springframework.cloud.gateway.filter.ratelimit.RedisRateLimiter;
import org.springframework.core.io.ClassPathResource;

/**
 * The drop-in admits what Spring Cloud Gateway's own Lua script admits (its {@code
 * request_rate_limiter.lua}, from the gateway's jar, run with {@code EVAL} on the same server), on
 * the same sequence of requests, to within what the script's whole-second clock rounds: one
 * second's {@code replenishRate}. Same headers; SCG's {@code requestedTokens} trick as the script
 * does it.
 */
class ScriptComparisonTest {
  static RedisCalls calls;
  static String script;

  @BeforeAll
  static void connect() throws IOException {
    calls = LettuceCalls.connect(RedisClient.create(System.getenv("REDIS_URL")));
    script =
        new ClassPathResource("META-INF/scripts/request_rate_limiter.lua")
            .getContentAsString(StandardCharsets.UTF_8);
  }

  @AfterAll
  static void close() {
    calls.close();
  }

  /** One request through the script: allowed, and the tokens left. */
  static long[] script(String id, int rate, int burst, int requested) {
    String prefix = "request_rate_limiter.{script." + id + "}.";
    List<?> reply =
        (List<?>)
            calls
                .call(
                    List.of(
                        "EVAL",
                        script,
                        "2",
                        prefix + "tokens",
                        prefix + "timestamp",
                        Integer.toString(rate),
                        Integer.toString(burst),
                        "",
                        Integer.toString(requested)))
                .join();
    return new long[] {(Long) reply.get(0), (Long) reply.get(1)};
  }

  static ModuleRedisRateLimiter dropIn(int rate, int burst, int requested) {
    return new ModuleRedisRateLimiter(
        new ReactiveRateLimiter(new AsyncRateLimiter(calls)), rate, burst, requested);
  }

  @Test
  void itAdmitsWhatTheScriptAdmitsWithinOneSecondsRefill() throws InterruptedException {
    for (int[] shape : new int[][] {{10, 20, 1}, {5, 5, 1}, {20, 40, 3}}) {
      int rate = shape[0];
      int burst = shape[1];
      int requested = shape[2];
      String id = UUID.randomUUID().toString();
      ModuleRedisRateLimiter module = dropIn(rate, burst, requested);
      Random gaps = new Random(58);
      long byScript = 0;
      long byModule = 0;
      long widest = 0;
      for (int request = 0; request < 150; request++) {
        byScript += script(id, rate, burst, requested)[0];
        RateLimiter.Response response = module.isAllowed("module", id).block();
        byModule += response.isAllowed() ? 1 : 0;
        widest = Math.max(widest, Math.abs(byModule - byScript));
        Thread.sleep(gaps.nextInt(60));
      }
      long bound = (rate + requested - 1) / requested + 1;
      assertTrue(
          widest <= bound,
          shape[0] + "/" + shape[1] + "/" + shape[2] + ": apart by " + widest + " > " + bound);
      assertTrue(
          byModule > burst / requested, "it admitted its burst and its refills: " + byModule);
    }
  }

  @Test
  void theSameHeadersTheRequestedTokensTrickAndABucketOfZero() {
    String id = UUID.randomUUID().toString();
    ModuleRedisRateLimiter perMinute = dropIn(1, 60, 60);
    RateLimiter.Response first = perMinute.isAllowed("route", id).block();
    assertTrue(first.isAllowed());
    assertEquals(
        Map.of(
            RedisRateLimiter.REMAINING_HEADER, "0",
            RedisRateLimiter.REPLENISH_RATE_HEADER, "1",
            RedisRateLimiter.BURST_CAPACITY_HEADER, "60",
            RedisRateLimiter.REQUESTED_TOKENS_HEADER, "60"),
        first.getHeaders());
    assertFalse(perMinute.isAllowed("route", id).block().isAllowed(), "one request a minute");
    assertEquals(1, script(id, 1, 60, 60)[0]);
    assertEquals(0, script(id, 1, 60, 60)[0], "the script does the same");
  }
}
