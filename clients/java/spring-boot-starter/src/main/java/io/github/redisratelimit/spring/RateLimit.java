package io.github.redisratelimit.spring;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Repeatable;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Limits calls of a method (or of every method of a class), in the articles' style: on a controller
 * or any bean method, keyed by SpEL, any algorithm, any unit; several on one method are decided
 * together, all or nothing, in one call.
 *
 * <pre>{@code
 * @RateLimit(rate = 200.0)                                             // 200 a second, for everyone
 * @RateLimit(key = "#request.remoteAddr", limit = 100, window = "1m")  // and 100 a minute per client
 * @GetMapping("/search")
 * public List<Hit> search(@RequestParam String q) { ... }
 * }</pre>
 *
 * A refused call throws {@link RateLimitedException}, which the starter answers 429 with {@code
 * Retry-After} and the IETF RateLimit fields in Spring MVC and WebFlux (503 when the server fails
 * under {@code on-error: deny}, or a load gate sheds); an admitted web request carries the fields.
 * A method returning {@code Mono} or {@code Flux} is checked when subscribed, without blocking.
 */
@Target({ElementType.METHOD, ElementType.TYPE})
@Retention(RetentionPolicy.RUNTIME)
@Documented
@Repeatable(RateLimit.List.class)
public @interface RateLimit {
  /** The policy's name in the HTTP fields and the metrics; empty: the algorithm's. */
  String name() default "";

  /**
   * Whose limit, in SpEL: the method's parameters by name ({@code #userId}), {@code #request} (the
   * servlet request), {@code #principal} (the servlet request's user), {@code #exchange}
   * (WebFlux's), or a constant ({@code 'global'}). Empty: one limit for every call of the method.
   */
  String key() default "";

  /**
   * Permits a second (GCRA, {@code CL.THROTTLE}), as the articles' {@code @XlpRateLimiter(rate =
   * 200.0)}: evenly spaced, a second's worth at once unless {@link #burst()} says; under one a
   * second works ({@code 0.5}: one every two seconds).
   */
  double rate() default 0;

  /** Or {@code limit} calls per {@link #window()}, by {@link #algorithm()}. */
  long limit() default 0;

  /**
   * The window of {@link #limit()}: {@code 500ms}, {@code 1s}, {@code 10m}, {@code 1h}, {@code 1d}
   * or ISO-8601.
   */
  String window() default "1s";

  /** How {@link #limit()} is counted. */
  Algorithm algorithm() default Algorithm.SLIDING;

  /** With {@link #rate()} or {@code GCRA}: how many at once (a second's worth, or the limit). */
  long burst() default 0;

  /** What one call weighs. */
  long cost() default 1;

  /**
   * Refusals let through, counted ({@code shadow}) and logged: a limit watched before it refuses.
   */
  boolean shadow() default false;

  /** How a limit is counted: the module's algorithms. */
  enum Algorithm {
    /** GCRA ({@code CL.THROTTLE}): evenly spaced, in bursts. */
    GCRA,
    /** The sliding window counter ({@code RL.WINDOW}, the default). */
    SLIDING,
    /** Fixed windows on the clock. */
    FIXED,
    /** Windows that begin with a key's first call. */
    ANCHORED,
    /** The exact sliding log ({@code RL.LOG}). */
    LOG
  }

  /** Several limits on one method, decided together. */
  @Target({ElementType.METHOD, ElementType.TYPE})
  @Retention(RetentionPolicy.RUNTIME)
  @Documented
  @interface List {
    RateLimit[] value();
  }
}
