package io.github.redisratelimit.load;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class SignalsTest {
  private static final long MS = 1_000_000L;

  private final AtomicLong now = new AtomicLong();
  // No cgroup here: the CPU is the process's, which these tests do not read.
  private final Signals signals = new Signals(now::get, Path.of("/nonexistent"), false);

  @Test
  void onlyBusySecondsGiveMaxRpsAndMinRt() {
    now.set(10_200 * MS);
    signals.done(20 * MS, 200, false, "GET /work");
    signals.done(60 * MS, 503, false, "GET /work");
    Map<String, Double> idle = signals.sample();
    assertFalse(idle.containsKey("max_rps"));
    assertFalse(idle.containsKey("min_rt"));
    assertEquals(0.5, idle.get("errors"));
    now.set(12_300 * MS);
    signals.done(40 * MS, 200, true, "GET /work");
    signals.done(30 * MS, 200, true, "GET /work");
    Map<String, Double> busy = signals.sample();
    assertEquals(2.0, busy.get("max_rps"));
    assertEquals(30.0, busy.get("min_rt"));
  }

  @Test
  void minRtIsTheNoLoadLatencyOfTheMixNotOfItsFastestRoute() {
    // A health check of 1 ms polled beside work of 30 ms or more: the pipe is what the work
    // holds. The least latency of all would read it as a thirtieth of that, and a service at its
    // capacity as thirty times over it (bbr).
    now.set(3_500 * MS);
    signals.done(1 * MS, 200, true, "GET /health");
    for (long latency : new long[] {40, 30, 50}) {
      signals.done(latency * MS, 200, true, "GET /work");
    }
    now.set(4_500 * MS);
    signals.done(35 * MS, 200, true, "GET /work");
    Map<String, Double> sample = signals.sample();
    assertEquals(4.0, sample.get("max_rps"));
    assertEquals((4 * 30 + 1 * 1) / 5.0, sample.get("min_rt"), 1e-9);
    // A second not busy counts for neither.
    now.set(5_500 * MS);
    signals.done(MS / 2, 200, false, "GET /health");
    assertEquals((4 * 30 + 1 * 1) / 5.0, signals.sample().get("min_rt"), 1e-9);
  }

  @Test
  void aSecondKeepsSoManyRoutesApartAndTheRestTogether() {
    now.set(1_500 * MS);
    for (int route = 0; route < Signals.ROUTES_KEPT; route++) {
      signals.done(10 * MS, 200, true, "GET /" + route);
    }
    // Past them, two routes share an entry: the least of the two for both requests.
    signals.done(20 * MS, 200, true, "GET /late");
    signals.done(60 * MS, 200, true, "GET /later");
    double expected = (Signals.ROUTES_KEPT * 10 + 2 * 20) / (double) (Signals.ROUTES_KEPT + 2);
    assertEquals(expected, signals.sample().get("min_rt"), 1e-9);
  }
}
