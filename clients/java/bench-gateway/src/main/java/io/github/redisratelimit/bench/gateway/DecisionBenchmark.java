package io.github.redisratelimit.bench.gateway;

import io.github.bucket4j.Bucket;
import io.github.bucket4j.BucketConfiguration;
import io.github.bucket4j.redis.lettuce.Bucket4jLettuce;
import io.github.bucket4j.redis.lettuce.cas.LettuceBasedProxyManager;
import io.github.redisratelimit.LettuceCalls;
import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.Quota;
import io.github.redisratelimit.RateLimiter;
import io.lettuce.core.RedisClient;
import io.lettuce.core.ScriptOutputType;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.codec.RedisCodec;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.AuxCounters;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.springframework.core.io.ClassPathResource;

/**
 * One decision on one key, every limit far above the load, one thread, on the server in {@code
 * REDIS_URL}: the client's check (one {@code CL.THROTTLE}), Spring Cloud Gateway's
 * request_rate_limiter.lua (from the gateway's jar, by {@code EVALSHA}, as RedisRateLimiter sends
 * it), and bucket4j's Lettuce proxy (a compare-and-swap); and quota leases, a decision taken from
 * what a process holds, at three batches. bench/java.py runs it with {@code -prof gc} for the
 * allocations.
 */
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class DecisionBenchmark {
  static final long FAR = 1L << 40;

  /** The server, and a key of each benchmark's own. */
  @State(Scope.Benchmark)
  public static class Server {
    RedisClient client;
    StatefulRedisConnection<String, String> connection;
    RedisCommands<String, String> commands;
    RateLimiter limiter;
    String key;

    @Setup(Level.Trial)
    public void connect() {
      client = RedisClient.create(System.getenv("REDIS_URL"));
      connection = client.connect();
      commands = connection.sync();
      limiter = new RateLimiter(LettuceCalls.connect(client));
      key = "bench:java:" + UUID.randomUUID();
    }

    @TearDown(Level.Trial)
    public void close() {
      limiter.close();
      connection.close();
      client.shutdown();
    }
  }

  /** Spring Cloud Gateway's script, loaded as RedisRateLimiter loads it. */
  @State(Scope.Benchmark)
  public static class Script {
    String sha;
    String[] keys;

    @Setup(Level.Trial)
    public void load(Server server) throws java.io.IOException {
      String text =
          new ClassPathResource("META-INF/scripts/request_rate_limiter.lua")
              .getContentAsString(StandardCharsets.UTF_8);
      sha = server.commands.scriptLoad(text);
      keys =
          new String[] {
            "request_rate_limiter.{" + server.key + "}.tokens",
            "request_rate_limiter.{" + server.key + "}.timestamp"
          };
    }
  }

  /** bucket4j's Lettuce proxy manager and one bucket, its capacity far above the load. */
  @State(Scope.Benchmark)
  public static class Bucket4j {
    StatefulRedisConnection<byte[], byte[]> connection;
    Bucket bucket;

    @Setup(Level.Trial)
    public void build(Server server) {
      connection =
          server.client.connect(RedisCodec.of(ByteArrayCodec.INSTANCE, ByteArrayCodec.INSTANCE));
      LettuceBasedProxyManager<byte[]> manager =
          Bucket4jLettuce.casBasedBuilder(connection).build();
      BucketConfiguration configuration =
          BucketConfiguration.builder()
              .addLimit(
                  limit -> limit.capacity(FAR).refillGreedy(100_000_000, Duration.ofSeconds(1)))
              .build();
      bucket =
          manager.builder().build(server.key.getBytes(StandardCharsets.UTF_8), () -> configuration);
    }

    @TearDown(Level.Trial)
    public void close() {
      connection.close();
    }
  }

  @Benchmark
  public boolean clientCheck(Server server) {
    return server
        .limiter
        .check(Limiter.throttle(server.key, FAR, FAR, Duration.ofSeconds(1)))
        .allowed();
  }

  @Benchmark
  public Object scgScript(Server server, Script script) {
    return server.commands.evalsha(
        script.sha, ScriptOutputType.MULTI, script.keys, "1000000000", "1000000000", "", "1");
  }

  @Benchmark
  public boolean bucket4jLettuce(Bucket4j bucket4j) {
    return bucket4j.bucket.tryConsume(1);
  }

  /** A quota at a batch: decisions a second, and the server calls among them. */
  @State(Scope.Benchmark)
  public static class Leases {
    @Param({"10", "50", "100"})
    public long batch;

    Quota quota;

    @Setup(Level.Trial)
    public void take(Server server) {
      quota =
          new Quota(
              server.limiter,
              List.of(Limiter.window(server.key + ":quota:" + batch, FAR, Duration.ofMinutes(1))),
              batch,
              Duration.ofSeconds(1));
    }

    @TearDown(Level.Trial)
    public void close() {
      quota.close();
    }
  }

  /** What a quota's decisions cost the server: calls, counted per iteration. */
  @AuxCounters(AuxCounters.Type.EVENTS)
  @State(Scope.Thread)
  public static class Calls {
    public long calls;
  }

  @Benchmark
  public boolean quotaLease(Leases leases, Calls calls) {
    long before = leases.quota.counters()[2];
    boolean taken = leases.quota.take(1);
    calls.calls += leases.quota.counters()[2] - before;
    return taken;
  }
}
