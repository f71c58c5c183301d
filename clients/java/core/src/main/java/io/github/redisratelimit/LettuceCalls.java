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
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * The client's calls over Lettuce (Spring Data Redis' default driver): a single server's connection
 * or a Cluster's, each command dispatched as it is ({@code dispatch}, no script), the Cluster's
 * routed by the command's key. A connection made from a client here is closed with this; one given
 * is the caller's.
 *
 * <p>A transaction ({@link SharedLists}' writes) needs its connection to itself while it runs:
 * {@link #connect} opens one for them; over a connection given with {@link #of}, give the lists a
 * connection of their own.
 */
public final class LettuceCalls implements RedisCalls {
  private final StatefulRedisConnection<String, String> single;
  private final StatefulRedisClusterConnection<String, String> cluster;
  private final AbstractRedisClient client;
  private volatile LettuceCalls transactions;

  private LettuceCalls(
      StatefulRedisConnection<String, String> single,
      StatefulRedisClusterConnection<String, String> cluster,
      AbstractRedisClient client) {
    this.single = single;
    this.cluster = cluster;
    this.client = client;
  }

  /** Over a connection of the caller's (a {@code StringCodec} one). */
  public static LettuceCalls of(StatefulRedisConnection<String, String> connection) {
    return new LettuceCalls(connection, null, null);
  }

  /** Over a Cluster connection of the caller's (a {@code StringCodec} one). */
  public static LettuceCalls of(StatefulRedisClusterConnection<String, String> connection) {
    return new LettuceCalls(null, connection, null);
  }

  /**
   * Over a connection of its own from {@code client} (a {@code RedisClient} or a {@code
   * RedisClusterClient}: the application's, with its address, credentials and TLS), closed with
   * this.
   */
  public static LettuceCalls connect(AbstractRedisClient client) {
    if (client instanceof RedisClusterClient clusterClient) {
      return new LettuceCalls(null, clusterClient.connect(StringCodec.UTF8), client);
    }
    if (client instanceof RedisClient redisClient) {
      return new LettuceCalls(redisClient.connect(StringCodec.UTF8), null, client);
    }
    throw new IllegalArgumentException("a RedisClient or a RedisClusterClient, not " + client);
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
    if (client != null) {
      LettuceCalls own = transactions;
      if (own == null) {
        synchronized (this) {
          if (transactions == null) {
            transactions = connect(client).withoutClient();
          }
          own = transactions;
        }
      }
      return own.transaction(key, commands);
    }
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

  /** The same connection, transactions run on it (the dedicated one). */
  private LettuceCalls withoutClient() {
    return new LettuceCalls(single, cluster, null);
  }

  @Override
  public void close() {
    if (client != null) {
      if (single != null) {
        single.close();
      }
      if (cluster != null) {
        cluster.close();
      }
      LettuceCalls own = transactions;
      if (own != null) {
        own.closeConnection();
      }
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
