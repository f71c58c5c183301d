package io.github.redisratelimit;

import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.TransactionResult;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.async.RedisAsyncCommands;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.CommandOutput;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;

/**
 * The client's calls over Lettuce (Spring Data Redis' default driver): a single server's connection
 * or a Cluster's, each command dispatched as it is ({@code dispatch}, no script), the Cluster's
 * routed by the command's key. A connection made from a client here is closed with this; one given
 * is the caller's.
 *
 * <p>A connection made from a client ({@link #connect}) is opened on a thread of its own, begun
 * when it is made and begun again at the next call after an attempt failed: an application whose
 * server is down when it starts still starts, and its calls go by the failure policy (a call waits
 * for an attempt within its deadline) until the server answers.
 *
 * <p>A transaction ({@link SharedLists}' writes) needs its connection to itself while it runs:
 * {@link #connect} opens one for them; over a connection given with {@link #of}, give the lists a
 * connection of their own.
 */
public final class LettuceCalls implements RedisCalls {
  /** Where connections are opened: a blocking call, kept off the callers' threads. */
  private static final ExecutorService OPENING =
      Executors.newCachedThreadPool(
          task -> {
            Thread thread = new Thread(task, "redis-ratelimit-connect");
            thread.setDaemon(true);
            return thread;
          });

  /** How long {@link #connect} waits for its connection before it returns without one. */
  static final Duration STARTUP_WAIT = Duration.ofSeconds(2);

  private volatile StatefulRedisConnection<String, String> single;
  private volatile StatefulRedisClusterConnection<String, String> cluster;

  /** The client to open the connection from, when this made it (null: the caller's). */
  private final AbstractRedisClient client;

  /** Whether this is the connection transactions run on (opened from {@link #client} too). */
  private final boolean forTransactions;

  /** The attempt to open the connection, if one was made (guarded by this). */
  private CompletableFuture<Void> opening;

  private boolean closed;
  private volatile LettuceCalls transactions;

  private LettuceCalls(
      StatefulRedisConnection<String, String> single,
      StatefulRedisClusterConnection<String, String> cluster,
      AbstractRedisClient client,
      boolean forTransactions) {
    this.single = single;
    this.cluster = cluster;
    this.client = client;
    this.forTransactions = forTransactions;
  }

  /** Over a connection of the caller's (a {@code StringCodec} one). */
  public static LettuceCalls of(StatefulRedisConnection<String, String> connection) {
    return new LettuceCalls(connection, null, null, false);
  }

  /** Over a Cluster connection of the caller's (a {@code StringCodec} one). */
  public static LettuceCalls of(StatefulRedisClusterConnection<String, String> connection) {
    return new LettuceCalls(null, connection, null, false);
  }

  /**
   * Over a connection of its own from {@code client} (a {@code RedisClient} or a {@code
   * RedisClusterClient}: the application's, with its address, credentials and TLS), closed with
   * this. Waits up to {@link #STARTUP_WAIT} for it to open; never fails for a server that is down.
   */
  public static LettuceCalls connect(AbstractRedisClient client) {
    if (!(client instanceof RedisClusterClient) && !(client instanceof RedisClient)) {
      throw new IllegalArgumentException("a RedisClient or a RedisClusterClient, not " + client);
    }
    LettuceCalls calls = new LettuceCalls(null, null, client, false);
    try {
      // Open when this returns, as a connection normally is; a server that is down or slow
      // leaves it opening (or to open at the next call) instead of failing the application.
      calls.open().get(STARTUP_WAIT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (ExecutionException | TimeoutException notYet) {
      // the calls go by the failure policy until it opens
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
    }
    return calls;
  }

  /** Done once the connection is open: at once, or when an attempt to open it ends. */
  private CompletableFuture<Void> open() {
    if (single != null || cluster != null) {
      return CompletableFuture.completedFuture(null);
    }
    synchronized (this) {
      if (closed) {
        return CompletableFuture.failedFuture(
            new IllegalStateException("the rate limiter's connection is closed"));
      }
      if (single == null
          && cluster == null
          && (opening == null || opening.isCompletedExceptionally())) {
        opening = CompletableFuture.runAsync(this::openNow, OPENING);
      }
      return single != null || cluster != null ? CompletableFuture.completedFuture(null) : opening;
    }
  }

  private void openNow() {
    if (client instanceof RedisClusterClient clusterClient) {
      StatefulRedisClusterConnection<String, String> opened =
          clusterClient.connect(StringCodec.UTF8);
      synchronized (this) {
        if (closed) {
          opened.close();
        } else {
          cluster = opened;
        }
      }
    } else {
      StatefulRedisConnection<String, String> opened =
          ((RedisClient) client).connect(StringCodec.UTF8);
      synchronized (this) {
        if (closed) {
          opened.close();
        } else {
          single = opened;
        }
      }
    }
  }

  /** {@code then} once the connection is open, its failures as the package's. */
  private <T> CompletableFuture<T> whenOpen(Supplier<CompletableFuture<T>> then) {
    if (single != null || cluster != null) {
      return then.get();
    }
    return translated(open().thenCompose(opened -> then.get()));
  }

  /** A command's name, as Lettuce sends it. */
  private static final class Keyword implements ProtocolKeyword {
    private final byte[] bytes;
    private final String name;

    Keyword(String name) {
      this.name = name;
      this.bytes = name.getBytes(StandardCharsets.UTF_8);
    }

    @Override
    public byte[] getBytes() {
      return bytes;
    }

    @Override
    public String toString() {
      return name;
    }
  }

  /** The command's arguments, its routing key marked as a key (a Cluster routes by it). */
  private static CommandArgs<String, String> arguments(List<String> words) {
    CommandArgs<String, String> args = new CommandArgs<>(StringCodec.UTF8);
    String key = Protocol.routingKey(words);
    boolean keyed = false;
    for (int index = 1; index < words.size(); index++) {
      String word = words.get(index);
      if (!keyed && word.equals(key) && index <= 2) {
        args.addKey(word);
        keyed = true;
      } else {
        args.add(word);
      }
    }
    return args;
  }

  private static CompletableFuture<Object> dispatch(
      RedisAsyncCommandsLike commands, List<String> words) {
    return translated(
        commands
            .dispatch(new Keyword(words.get(0)), new ReplyOutput(), arguments(words))
            .toCompletableFuture());
  }

  /** Lettuce's {@code dispatch}, on a single server's or a Cluster's async commands. */
  @FunctionalInterface
  private interface RedisAsyncCommandsLike {
    io.lettuce.core.RedisFuture<Object> dispatch(
        ProtocolKeyword type,
        CommandOutput<String, String, Object> output,
        CommandArgs<String, String> args);
  }

  /**
   * Any reply, read as the package reads replies: an integer as a {@code Long}, a string as a
   * {@code String}, an array as a {@code List}, nested as deep as it goes.
   */
  static final class ReplyOutput extends CommandOutput<String, String, Object> {
    private final Deque<List<Object>> stack = new ArrayDeque<>();
    private int depth;

    ReplyOutput() {
      super(StringCodec.UTF8, null);
    }

    private void add(Object value) {
      if (stack.isEmpty()) {
        output = value;
      } else {
        stack.peek().add(value);
      }
    }

    @Override
    public void set(ByteBuffer bytes) {
      add(bytes == null ? null : codec.decodeValue(bytes));
    }

    @Override
    public void set(long integer) {
      add(integer);
    }

    @Override
    public void set(double number) {
      add(number);
    }

    @Override
    public void multi(int count) {
      List<Object> list = new ArrayList<>(Math.max(count, 0));
      add(list);
      stack.push(list);
      depth++;
    }

    @Override
    public void complete(int depth) {
      while (this.depth > depth && !stack.isEmpty()) {
        stack.pop();
        this.depth--;
      }
    }
  }

  @Override
  public CompletableFuture<Object> call(List<String> words) {
    return whenOpen(() -> callNow(words));
  }

  private CompletableFuture<Object> callNow(List<String> words) {
    try {
      if (cluster != null) {
        return dispatch(cluster.async()::dispatch, words);
      }
      return dispatch(single.async()::dispatch, words);
    } catch (RuntimeException failed) {
      return CompletableFuture.failedFuture(translate(failed));
    }
  }

  @Override
  public CompletableFuture<List<Object>> transaction(String key, List<List<String>> commands) {
    if (client != null && !forTransactions) {
      LettuceCalls own = transactions;
      if (own == null) {
        synchronized (this) {
          if (transactions == null) {
            transactions = new LettuceCalls(null, null, client, true);
          }
          own = transactions;
        }
      }
      return own.transaction(key, commands);
    }
    return whenOpen(() -> transactionNow(key, commands));
  }

  private CompletableFuture<List<Object>> transactionNow(String key, List<List<String>> commands) {
    CompletableFuture<TransactionResult> result;
    try {
      if (cluster != null) {
        // A transaction runs on one node: the key's.
        int slot = io.lettuce.core.cluster.SlotHash.getSlot(key);
        RedisClusterNode node = cluster.getPartitions().getPartitionBySlot(slot);
        result = runTransaction(cluster.getConnection(node.getNodeId()), commands);
      } else {
        result = runTransaction(single, commands);
      }
    } catch (RuntimeException failed) {
      return CompletableFuture.failedFuture(translate(failed));
    }
    return translated(
        result.thenApply(
            done -> {
              if (done.wasDiscarded()) {
                throw new CommandException("the transaction was discarded", null);
              }
              List<Object> replies = new ArrayList<>();
              for (Object one : done) {
                replies.add(one);
              }
              return replies;
            }));
  }

  private static CompletableFuture<TransactionResult> runTransaction(
      StatefulRedisConnection<String, String> connection, List<List<String>> commands) {
    // MULTI ... EXEC must not interleave with this package's other transactions.
    synchronized (connection) {
      RedisAsyncCommands<String, String> async = connection.async();
      async.multi();
      for (List<String> words : commands) {
        async.dispatch(new Keyword(words.get(0)), new ReplyOutput(), arguments(words));
      }
      return async.exec().toCompletableFuture();
    }
  }

  @Override
  public CompletableFuture<List<Object>> onEveryPrimary(List<String> words) {
    return whenOpen(() -> onEveryPrimaryNow(words));
  }

  private CompletableFuture<List<Object>> onEveryPrimaryNow(List<String> words) {
    if (cluster == null) {
      return call(words).thenApply(List::of);
    }
    List<CompletableFuture<Object>> replies = new ArrayList<>();
    try {
      for (RedisClusterNode node : cluster.getPartitions()) {
        if (node.is(RedisClusterNode.NodeFlag.UPSTREAM)) {
          RedisAsyncCommands<String, String> onNode =
              cluster.getConnection(node.getNodeId()).async();
          replies.add(dispatch(onNode::dispatch, words));
        }
      }
    } catch (RuntimeException failed) {
      return CompletableFuture.failedFuture(translate(failed));
    }
    return CompletableFuture.allOf(replies.toArray(CompletableFuture[]::new))
        .thenApply(done -> replies.stream().map(CompletableFuture::join).toList());
  }

  @Override
  public void close() {
    if (client == null) {
      return; // the caller's connection
    }
    synchronized (this) {
      closed = true;
    }
    closeConnection();
    LettuceCalls own = transactions;
    if (own != null) {
      own.close();
    }
  }

  private void closeConnection() {
    if (single != null) {
      single.close();
    }
    if (cluster != null) {
      cluster.close();
    }
  }

  private static <T> CompletableFuture<T> translated(CompletableFuture<T> future) {
    return future.handle(
        (value, error) -> {
          if (error != null) {
            throw new CompletionException(translate(error));
          }
          return value;
        });
  }

  /** Lettuce's exceptions as the package's: an error reply by its first word, else a failure. */
  static RateLimitException translate(Throwable error) {
    Throwable cause = error;
    while (cause instanceof CompletionException && cause.getCause() != null) {
      cause = cause.getCause();
    }
    if (cause instanceof RateLimitException already) {
      return already;
    }
    if (cause instanceof RedisCommandExecutionException reply) {
      return RedisCalls.replyError(reply.getMessage(), reply);
    }
    return new ServerUnavailableException(
        "the server failed: " + cause, cause, java.time.Duration.ZERO);
  }
}
