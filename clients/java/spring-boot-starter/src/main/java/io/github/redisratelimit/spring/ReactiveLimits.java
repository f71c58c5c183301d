package io.github.redisratelimit.spring;

import io.github.redisratelimit.Answered;
import io.github.redisratelimit.AsyncRateLimiter;
import io.github.redisratelimit.Fields;
import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.Options;
import io.github.redisratelimit.ReactiveRateLimiter;
import io.github.redisratelimit.ServerUnavailableException;
import java.lang.reflect.Method;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.aspectj.lang.ProceedingJoinPoint;
import org.reactivestreams.Publisher;
import org.springframework.util.ClassUtils;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;
import reactor.util.context.ContextView;

/**
 * {@link RateLimit} on a method returning {@code Mono} or {@code Flux}: checked when subscribed,
 * without blocking; the keys see {@code #exchange} and {@code #principal} in WebFlux (the exchange
 * from the Reactor context, which the starter's {@code ServerWebExchangeContextFilter} puts there);
 * an admitted response carries the IETF fields.
 */
final class ReactiveLimits {
  private static final boolean WEBFLUX =
      ClassUtils.isPresent(
          "org.springframework.web.server.ServerWebExchange",
          ReactiveLimits.class.getClassLoader());

  private final ReactiveRateLimiter limiter;

  ReactiveLimits(AsyncRateLimiter limiter) {
    this.limiter = new ReactiveRateLimiter(limiter);
  }

  static boolean isReactive(Class<?> type) {
    return Publisher.class.isAssignableFrom(type);
  }

  Object limit(
      ProceedingJoinPoint call,
      Method method,
      List<RateLimit> limits,
      Options options,
      boolean shadow,
      RateLimitAspect aspect) {
    Mono<Object> checked =
        Mono.deferContextual(
            context -> {
              Object exchange = WEBFLUX ? Exchanges.of(context) : null;
              Map<String, Object> variables = new HashMap<>();
              if (exchange != null) {
                variables.put("exchange", exchange);
              }
              List<Limiter> limiters =
                  aspect.limiters(
                      method, call.getArgs(), call.getTarget(), limits, variables, false);
              return Exchanges.waitingOn(exchange, limiter.check(limiters, options, shadow))
                  .doOnError(
                      ServerUnavailableException.class, failed -> Exchanges.markOwn(exchange))
                  .flatMap(
                      result -> {
                        if (!result.allowed()) {
                          Exchanges.markOwn(exchange);
                          return Mono.error(new RateLimitedException(result, limiters));
                        }
                        if (!result.failed() && exchange != null) {
                          Exchanges.setFields(exchange, Fields.headers(result, limiters));
                        }
                        return Mono.just(result);
                      });
            });
    if (Flux.class.isAssignableFrom(method.getReturnType())) {
      return checked.flatMapMany(admitted -> Flux.from(proceed(call)));
    }
    return checked.flatMap(admitted -> Mono.from(proceed(call)));
  }

  @SuppressWarnings("unchecked")
  private static Publisher<Object> proceed(ProceedingJoinPoint call) {
    try {
      return (Publisher<Object>) call.proceed();
    } catch (RuntimeException | Error unchecked) {
      throw unchecked;
    } catch (Throwable checked) {
      return Mono.error(checked);
    }
  }

  /** WebFlux's exchange in the Reactor context, and what is set on it. */
  static final class Exchanges {
    private Exchanges() {}

    static Object of(ContextView context) {
      return org.springframework.web.filter.reactive.ServerWebExchangeContextFilter.getExchange(
              context)
          .orElse(null);
    }

    static void setFields(Object exchange, Map<String, String> fields) {
      ((ServerWebExchange) exchange).getResponse().getHeaders().setAll(fields);
    }

    static void markOwn(Object exchange) {
      Answered mark = answered(exchange);
      if (mark != null) {
        mark.mark();
      }
    }

    /**
     * {@code call}, the exchange's request waiting on the rate-limit server from its subscription
     * to its end (the load-shedding filter leaves it out of the requests in flight meanwhile).
     */
    static <T> Mono<T> waitingOn(Object exchange, Mono<T> call) {
      Answered mark = answered(exchange);
      if (mark == null) {
        return call;
      }
      return Mono.defer(
          () -> {
            mark.waiting(true);
            return call.doFinally(signal -> mark.waiting(false));
          });
    }

    /** The mark the load-shedding filter set on the exchange, if any. */
    static Answered answered(Object exchange) {
      if (exchange == null) {
        return null;
      }
      Object answered =
          ((ServerWebExchange) exchange).getAttributes().get(Answered.class.getName());
      return answered instanceof Answered mark ? mark : null;
    }
  }
}
