package io.github.redisratelimit.guava;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisratelimit.LettuceCalls;
import io.github.redisratelimit.RateLimit;
import io.github.redisratelimit.RedisCalls;
import io.lettuce.core.RedisClient;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The distributed Guava RateLimiter: Guava's methods, and its SmoothBursty and SmoothWarmingUp
 * semantics as the server decides them (the waits it gives, not this machine's clock).
 */
class GuavaRateLimiterTest {
  static RedisCalls calls() {
    return LettuceCalls.connect(RedisClient.create(System.getenv("REDIS_URL")));
  }

  static String key() {
    return "java:guava:" + UUID.randomUUID();
  }

  static String signature(Method method) {
    return method.getName() + Arrays.toString(method.getParameterTypes());
  }

  @Test
  void everyMethodOfGuavasIsHereUnderItsName() {
    Set<String> guava = new TreeSet<>();
    for (Method method : com.google.common.util.concurrent.RateLimiter.class.getDeclaredMethods()) {
      if (Modifier.isPublic(method.getModifiers()) && !Modifier.isStatic(method.getModifiers())) {
        guava.add(signature(method));
      }
    }
    Set<String> ours = new TreeSet<>();
    for (Method method : RateLimiter.class.getDeclaredMethods()) {
      if (Modifier.isPublic(method.getModifiers()) && !Modifier.isStatic(method.getModifiers())) {
        ours.add(signature(method));
      }
    }
    guava.remove("toString[]");
    assertTrue(
        ours.containsAll(guava),
        "missing: " + guava.stream().filter(one -> !ours.contains(one)).toList());
  }

  @Test
  void smoothBurstyStoresASecondOfPermitsAndSpacesTheRest() {
    try (RedisCalls calls = calls()) {
      RateLimiter limiter = RateLimiter.create(calls, key(), 5.0);
      assertEquals(5.0, limiter.getRate());
      // A second of permits stored (5), and the one whose debt the next caller pays: 6 at once.
      for (int permit = 0; permit < 6; permit++) {
        assertTrue(limiter.tryAcquire(), "permit " + permit);
      }
      assertFalse(limiter.tryAcquire(), "the seventh waits");
      // Then one every 200 ms: the k-th waits k intervals, as the server schedules them.
      for (int later = 1; later <= 3; later++) {
        RateLimit reserved = limiter.reserve(1, Duration.ofSeconds(5));
        assertTrue(reserved.allowed());
        double waited = reserved.waitFor().toNanos() / 1e9;
        assertEquals(0.2 * later, waited, 0.05, "the " + later + "th after the burst");
      }
      // tryAcquire with a timeout shorter than the wait takes nothing.
      assertFalse(limiter.tryAcquire(1, 100, TimeUnit.MILLISECONDS));
      assertThrows(IllegalArgumentException.class, () -> limiter.acquire(0));
      assertThrows(IllegalArgumentException.class, () -> limiter.setRate(0));
    }
  }

  @Test
  void aRequestLargerThanTheBucketIsTakenAndOwedAsGuavaDoes() {
    try (RedisCalls calls = calls()) {
      RateLimiter limiter = RateLimiter.create(calls, key(), 2.0);
      RateLimit big = limiter.reserve(10);
      assertTrue(big.allowed());
      assertEquals(Duration.ZERO, big.waitFor(), "taken at once");
      RateLimit next = limiter.reserve(1, Duration.ofSeconds(60));
      double waited = next.waitFor().toNanos() / 1e9;
      assertEquals(
          4.0,
          waited,
          0.1,
          "the next caller waits out the 7 owed beyond the 3 stored, and its own");
    }
  }

  @Test
  void smoothWarmingUpStartsColdAndWarmsOverThePeriod() {
    try (RedisCalls calls = calls()) {
      RateLimiter limiter = RateLimiter.create(calls, key(), 10.0, 10, TimeUnit.SECONDS);
      int cold = 0;
      while (limiter.tryAcquire()) {
        cold++;
      }
      // Cold, a bucket of 11 takes 3 permits at three intervals each
      // (docs/commands/cl.throttle.md).
      assertEquals(3, cold, "a cold limiter lets fewer through at once");
      RateLimiter warm = RateLimiter.create(calls, key(), 10.0);
      int bursty = 0;
      while (warm.tryAcquire()) {
        bursty++;
      }
      assertEquals(11, bursty);
    }
  }

  @Test
  void setRateCountsWhatWasUsedAtTheNewRate() {
    try (RedisCalls calls = calls()) {
      RateLimiter limiter = RateLimiter.create(calls, key(), 1.0);
      assertTrue(limiter.tryAcquire(2));
      assertFalse(limiter.tryAcquire());
      limiter.setRate(100.0);
      assertEquals(100.0, limiter.getRate());
      assertTrue(limiter.tryAcquire(50), "a raised rate admits at once");
      List<Integer> none = List.of();
      assertTrue(none.isEmpty());
    }
  }
}
