package io.github.redisratelimit;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * The client's calls over Jedis (the articles' driver): a {@code JedisPool} (the articles' {@code
 * jedis.eval} setup, each call on a pooled connection), a {@code JedisPooled} or a {@code
 * JedisCluster} (routed by the command's key). Jedis blocks: each call runs on a worker of this
 * adapter's (at most {@code workers}), so that the client's deadline holds however long the socket
 * waits; a call given up on at its deadline goes on until Jedis' own timeout ends it.
 */
public final class JedisCalls implements RedisCalls {
  private final JedisPool pool;
  private final UnifiedJedis unified;
  private final ExecutorService workers;

  private JedisCalls(JedisPool pool, UnifiedJedis unified, int workers) {
    if (workers < 1) {
      throw new IllegalArgumentException("at least one worker");
    }
    this.pool = pool;
    this.unified = unified;
    AtomicInteger number = new AtomicInteger();
    this.workers =
        new ThreadPoolExecutor(
            workers,
            workers,
            30,
            TimeUnit.SECONDS,
            new LinkedBlockingQueue<>(),
            task -> {
              Thread thread = new Thread(task, "ratelimit-jedis-" + number.incrementAndGet());
              thread.setDaemon(true);
              return thread;
            });
    ((ThreadPoolExecutor) this.workers).allowCoreThreadTimeOut(true);
  }

  /** Over a pool of the caller's, with 16 workers. */
  public static JedisCalls of(JedisPool pool) {
    return new JedisCalls(pool, null, 16);
  }

  /** Over a {@code JedisPooled} or a {@code JedisCluster} of the caller's, with 16 workers. */
  public static JedisCalls of(UnifiedJedis jedis) {
    return new JedisCalls(null, jedis, 16);
  }

  /** Over a pool of the caller's, calls running on at most {@code workers} threads. */
  public static JedisCalls of(JedisPool pool, int workers) {
    return new JedisCalls(pool, null, workers);
  }

  private record Command(byte[] getRaw) implements ProtocolCommand {
    Command(String name) {
      this(name.getBytes(StandardCharsets.UTF_8));
    }
  }

  private static String[] rest(List<String> words) {
    return words.subList(1, words.size()).toArray(String[]::new);
  }

  private Object send(List<String> words) {
    Command command = new Command(words.get(0));
    if (pool != null) {
      try (Jedis jedis = pool.getResource()) {
        return read(jedis.sendCommand(command, rest(words)));
      }
    }
    String key = Protocol.routingKey(words);
    if (unified instanceof JedisCluster && key != null) {
      return read(
          unified.sendCommand(key.getBytes(StandardCharsets.UTF_8), command, bytes(rest(words))));
    }
    return read(unified.sendCommand(command, rest(words)));
  }

  private static byte[][] bytes(String[] words) {
    byte[][] out = new byte[words.length][];
    for (int index = 0; index < words.length; index++) {
      out[index] = words[index].getBytes(StandardCharsets.UTF_8);
    }
    return out;
  }

  /** Jedis' reply read as the package reads replies: bytes as a string, arrays as lists. */
  static Object read(Object reply) {
    if (reply instanceof byte[] bytes) {
      return new String(bytes, StandardCharsets.UTF_8);
    }
    if (reply instanceof List<?> list) {
      List<Object> read = new ArrayList<>(list.size());
      for (Object one : list) {
        read.add(read(one));
      }
      return read;
    }
    if (reply instanceof JedisDataException error) {
      throw RedisCalls.replyError(error.getMessage(), error);
    }
    return reply;
  }

  private <T> CompletableFuture<T> onWorker(java.util.function.Supplier<T> call) {
    CompletableFuture<T> future = new CompletableFuture<>();
    try {
      workers.execute(
          () -> {
            if (future.isDone()) {
              return; // given up on before it started
            }
            try {
              future.complete(call.get());
            } catch (RuntimeException failed) {
              future.completeExceptionally(translate(failed));
            }
          });
    } catch (RuntimeException rejected) {
      future.completeExceptionally(translate(rejected));
    }
    return future;
  }

  @Override
  public CompletableFuture<Object> call(List<String> words) {
    return onWorker(() -> send(words));
  }

  @Override
  public CompletableFuture<List<Object>> transaction(String key, List<List<String>> commands) {
    return onWorker(
        () -> {
          if (pool != null) {
            try (Jedis jedis = pool.getResource()) {
              Transaction transaction = jedis.multi();
              for (List<String> words : commands) {
                transaction.sendCommand(new Command(words.get(0)), rest(words));
              }
              return readAll(transaction.exec());
            }
          }
          if (unified instanceof JedisCluster cluster) {
            // A JedisCluster transaction runs on the node of the key it is opened for.
            try (var transaction = cluster.multi()) {
              for (List<String> words : commands) {
                transaction.sendCommand(new Command(words.get(0)), rest(words));
              }
              return readAll(transaction.exec());
            }
          }
          try (var transaction = unified.multi()) {
            for (List<String> words : commands) {
              transaction.sendCommand(new Command(words.get(0)), rest(words));
            }
            return readAll(transaction.exec());
          }
        });
  }

  private static List<Object> readAll(List<Object> replies) {
    if (replies == null) {
      throw new CommandException("the transaction was aborted", null);
    }
    List<Object> read = new ArrayList<>();
    for (Object one : replies) {
      read.add(read(one));
    }
    return read;
  }

  @Override
  public CompletableFuture<List<Object>> onEveryPrimary(List<String> words) {
    if (unified instanceof JedisCluster cluster) {
      return onWorker(
          () -> {
            List<Object> replies = new ArrayList<>();
            for (var node : cluster.getClusterNodes().entrySet()) {
              try (var connection = node.getValue().getResource()) {
                Object role =
                    read(
                        connection.executeCommand(
                            new redis.clients.jedis.CommandArguments(new Command("ROLE"))));
                if (role instanceof List<?> fields && "master".equals(fields.get(0))) {
                  replies.add(
                      read(
                          connection.executeCommand(
                              new redis.clients.jedis.CommandArguments(new Command(words.get(0)))
                                  .addObjects((Object[]) rest(words)))));
                }
              }
            }
            return replies;
          });
    }
    return call(words).thenApply(List::of);
  }

  /** Stops the workers; the pool or client given stays the caller's. */
  @Override
  public void close() {
    workers.shutdownNow();
  }

  static RateLimitException translate(Throwable error) {
    if (error instanceof RateLimitException already) {
      return already;
    }
    if (error instanceof JedisDataException reply
        && !(error instanceof redis.clients.jedis.exceptions.JedisClusterOperationException)) {
      return RedisCalls.replyError(reply.getMessage(), reply);
    }
    return new ServerUnavailableException("the server failed: " + error, error, Duration.ZERO);
  }
}
