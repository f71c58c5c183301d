package io.github.redisratelimit;

import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;

/**
 * How the client talks to the server: one command, a transaction, one command on every primary.
 * Replies come as {@code Long}, {@code String}, {@code List} or null. A call that fails completes
 * with {@link ServerUnavailableException} when the server failed (the connection, or a reply saying
 * it cannot serve now: {@code LOADING}, {@code READONLY}, {@code TRYAGAIN}, {@code CLUSTERDOWN},
 * {@code MASTERDOWN}, {@code BUSY}) and with {@link CommandException} when it refused the call; the
 * deadline is the client's ({@link Config#timeout()}).
 *
 * <p>{@link LettuceCalls} and {@link JedisCalls} are the two there are; a test or another driver
 * can give its own.
 */
public interface RedisCalls extends AutoCloseable {
  /** Replies that say the server cannot serve now, by their first word. */
  Set<String> UNAVAILABLE =
      Set.of("LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY");

  /** One command, its name first; on a Cluster, routed by its key. */
  CompletableFuture<Object> call(List<String> words);

  /** Several commands on {@code key}'s node, all or none ({@code MULTI}/{@code EXEC}). */
  CompletableFuture<List<Object>> transaction(String key, List<List<String>> commands);

  /** One command on the server, or on every primary of a Cluster: one reply each. */
  CompletableFuture<List<Object>> onEveryPrimary(List<String> words);

  /** Closes what the adapter opened itself (a connection it made); never the caller's. */
  @Override
  default void close() {}

  /**
   * The exception for an error reply {@code message}: a server that cannot serve now, or a call it
   * refused.
   */
  static RateLimitException replyError(String message, Throwable cause) {
    String first = message == null ? "" : message.split(" ", 2)[0];
    if (UNAVAILABLE.contains(first)) {
      return new ServerUnavailableException(
          "the server cannot serve now: " + message, cause, java.time.Duration.ZERO);
    }
    return new CommandException(message, cause);
  }
}
