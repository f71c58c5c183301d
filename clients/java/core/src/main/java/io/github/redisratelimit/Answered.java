package io.github.redisratelimit;

import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * Whose answer a response is: the service's, or the package's own. A load shedder counts the
 * responses it lets through as the service's health (latency, 5xx, successes); the package's own
 * answers say nothing of it: a limit's refusal (429, whoever made it), and the 5xx its failure
 * policy makes while the server fails (an exception, or a 503 under {@link OnError#DENY}) or a load
 * gate's shed. Counted, a server outage would read as the service failing, raise the fleet's level
 * and shed the service once the server is back.
 *
 * <p>The shedder runs the request {@link #watching}; the blocking {@link RateLimiter} marks the
 * request of the thread it runs on when it answers by its policy ({@link #markOwn}), and the web
 * adapters mark what they answer. A reactive pipeline carries the mark in its context instead (the
 * Spring starter's WebFilters do).
 *
 * <p>The same mark carries what the shedder does while the request waits on the rate-limit server
 * ({@link #waiting}): it leaves the requests in flight until the answer comes (a frozen server's
 * timeout is not the service's concurrency, and counted, a service whose requests wait on it would
 * refuse its other routes).
 */
public final class Answered {
  private static final ThreadLocal<Answered> CURRENT = new ThreadLocal<>();

  private volatile boolean own;
  private final Consumer<Boolean> waits;

  /** A mark with nothing told of the request's waits on the server. */
  public Answered() {
    this(null);
  }

  /**
   * A mark whose {@code waits} (if not null) is called with true as the request begins a wait on
   * the rate-limit server and false as the wait ends.
   */
  public Answered(Consumer<Boolean> waits) {
    this.waits = waits;
  }

  /** The request begins ({@code begins}) or ends a wait on the rate-limit server. */
  public void waiting(boolean begins) {
    if (waits != null) {
      waits.accept(begins);
    }
  }

  /** Whether the package answered the request by its policy. */
  public boolean own() {
    return own;
  }

  /** Marks this request's answer as the package's own. */
  public void mark() {
    own = true;
  }

  /** Runs {@code request} with a fresh mark on this thread; the mark, and what it returned. */
  public static <T> Watched<T> watching(Supplier<T> request) {
    Answered answered = new Answered();
    Answered before = CURRENT.get();
    CURRENT.set(answered);
    try {
      return new Watched<>(answered, request.get());
    } finally {
      if (before == null) {
        CURRENT.remove();
      } else {
        CURRENT.set(before);
      }
    }
  }

  /**
   * Watches the request this thread runs until the scope is closed (a servlet filter's {@code
   * try}): {@code try (Answered.Scope scope = Answered.open()) { chain.doFilter(...); }}, then
   * {@code scope.answered().own()}.
   */
  public static Scope open() {
    return open(null);
  }

  /**
   * {@link #open()} with a mark whose {@code waits} is told of the request's waits on the server.
   */
  public static Scope open(Consumer<Boolean> waits) {
    Answered answered = new Answered(waits);
    Answered before = CURRENT.get();
    CURRENT.set(answered);
    return new Scope(answered, before);
  }

  /** A watch opened by {@link #open()}: closing it restores what the thread watched before. */
  public static final class Scope implements AutoCloseable {
    private final Answered answered;
    private final Answered before;

    private Scope(Answered answered, Answered before) {
      this.answered = answered;
      this.before = before;
    }

    /** The mark of the request watched. */
    public Answered answered() {
      return answered;
    }

    @Override
    public void close() {
      if (before == null) {
        CURRENT.remove();
      } else {
        CURRENT.set(before);
      }
    }
  }

  /** The mark of the request this thread runs, if a shedder watches it. */
  public static Answered current() {
    return CURRENT.get();
  }

  /** Marks the request this thread runs, if watched, as the package's own answer. */
  public static void markOwn() {
    Answered answered = CURRENT.get();
    if (answered != null) {
      answered.mark();
    }
  }

  /**
   * Whether a response with HTTP {@code status} says anything about the service: not a limit's
   * refusal (429), and not a 5xx the package made by its policy ({@code own}).
   */
  public static boolean countsForService(int status, boolean own) {
    return status != 429 && !(own && status >= 500);
  }

  /** A request run by {@link #watching}: its mark and its value. */
  public record Watched<T>(Answered answered, T value) {}
}
