package io.github.redisratelimit.spring;

import io.github.redisratelimit.Answered;
import io.github.redisratelimit.Fields;
import io.github.redisratelimit.Priority;
import io.github.redisratelimit.load.LoadShedder;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicBoolean;
import org.springframework.core.Ordered;
import org.springframework.http.HttpStatus;
import org.springframework.http.HttpStatusCode;
import org.springframework.web.server.ServerWebExchange;
import org.springframework.web.server.WebFilter;
import org.springframework.web.server.WebFilterChain;
import reactor.core.publisher.Mono;

/**
 * Load shedding in WebFlux (and Spring Cloud Gateway), first of the filters, as {@link
 * LoadSheddingFilter} does it in a servlet container. The rate limiter's answers mark the exchange
 * ({@link Answered} in its attributes) and count as nothing of the service's health.
 */
public class LoadSheddingWebFilter implements WebFilter, Ordered {
  /** Where WebFlux puts the pattern that matched (its {@code HandlerMapping}'s attribute). */
  static final String MATCHED_PATTERN =
      "org.springframework.web.reactive.HandlerMapping.bestMatchingPattern";

  private final LoadShedder shedder;
  private final String priorityHeader;

  public LoadSheddingWebFilter(LoadShedder shedder, String priorityHeader) {
    this.shedder = shedder;
    this.priorityHeader = priorityHeader;
  }

  @Override
  public int getOrder() {
    return Ordered.HIGHEST_PRECEDENCE;
  }

  @Override
  public Mono<Void> filter(ServerWebExchange exchange, WebFilterChain chain) {
    Priority priority =
        Priority.orElse(
            exchange.getRequest().getHeaders().getFirst(priorityHeader), Priority.SHEDDABLE);
    LoadShedder.Ticket ticket = shedder.admit(priority);
    var response = exchange.getResponse();
    if (ticket == null) {
      response.setStatusCode(HttpStatus.SERVICE_UNAVAILABLE);
      response
          .getHeaders()
          .set("Retry-After", Long.toString(Math.max(1, Fields.seconds(shedder.retryAfter()))));
      return response.writeWith(
          Mono.just(
              response
                  .bufferFactory()
                  .wrap("Service Unavailable".getBytes(StandardCharsets.UTF_8))));
    }
    Answered answered = new Answered(begins -> shedder.waiting(ticket, begins));
    exchange.getAttributes().put(Answered.class.getName(), answered);
    AtomicBoolean done = new AtomicBoolean();
    return chain
        .filter(exchange)
        .doOnEach(
            signal -> {
              if ((signal.isOnComplete() || signal.isOnError())
                  && done.compareAndSet(false, true)) {
                HttpStatusCode status = response.getStatusCode();
                int code =
                    signal.isOnError() && status == null
                        ? 500
                        : status == null ? 200 : status.value();
                shedder.finished(ticket, code, answered.own(), routeOf(exchange));
              }
            })
        .doOnCancel(
            () -> {
              if (done.compareAndSet(false, true)) {
                shedder.finished(ticket, 499, answered.own(), routeOf(exchange));
              }
            });
  }

  /**
   * {@code call}, a call to the rate-limit server for the exchange in the Reactor context (the
   * starter's {@code ServerWebExchangeContextFilter} puts it there): the exchange's request waits
   * on the server from the call's subscription to its end, out of the shedder's requests in flight
   * meanwhile. For code the exchange is not given to, as Spring Cloud Gateway's {@code
   * RateLimiter}; {@code call} as it is where no exchange or no shedder is.
   */
  public static <T> Mono<T> waitingOnServer(Mono<T> call) {
    return Mono.deferContextual(
        context -> ReactiveLimits.Exchanges.waitingOn(ReactiveLimits.Exchanges.of(context), call));
  }

  /**
   * The route an exchange took, for the local limit to keep its latency apart: its method and the
   * pattern WebFlux matched, read once the chain answered; the path where none matched (a gateway's
   * routes, whose patterns are its predicates).
   */
  static String routeOf(ServerWebExchange exchange) {
    Object pattern = exchange.getAttribute(MATCHED_PATTERN);
    var request = exchange.getRequest();
    return request.getMethod().name()
        + " "
        + (pattern != null ? pattern : request.getPath().pathWithinApplication().value());
  }
}
