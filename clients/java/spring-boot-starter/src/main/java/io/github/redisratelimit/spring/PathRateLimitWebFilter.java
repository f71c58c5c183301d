package io.github.redisratelimit.spring;

import io.github.redisratelimit.AsyncRateLimiter;
import io.github.redisratelimit.Fields;
import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.Options;
import io.github.redisratelimit.ReactiveRateLimiter;
import io.github.redisratelimit.ServerUnavailableException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.springframework.core.Ordered;
import org.springframework.http.HttpStatus;
import org.springframework.web.server.ServerWebExchange;
import org.springframework.web.server.WebFilter;
import org.springframework.web.server.WebFilterChain;
import reactor.core.publisher.Mono;

/**
 * {@code ratelimit.paths} in WebFlux, as {@link PathRateLimitFilter} does it in a servlet
 * container.
 */
public class PathRateLimitWebFilter implements WebFilter, Ordered {
  private final ReactiveRateLimiter limiter;
  private final PathRules rules;
  private final boolean shadow;

  public PathRateLimitWebFilter(
      AsyncRateLimiter limiter, List<RateLimitProperties.PathRule> rules, boolean shadow) {
    this.limiter = new ReactiveRateLimiter(limiter);
    this.rules = new PathRules(rules);
    this.shadow = shadow;
  }

  @Override
  public int getOrder() {
    return Ordered.HIGHEST_PRECEDENCE + 10;
  }

  @Override
  public Mono<Void> filter(ServerWebExchange exchange, WebFilterChain chain) {
    RateLimitProperties.PathRule rule =
        rules.ruleFor(exchange.getRequest().getPath().pathWithinApplication().value());
    if (rule == null) {
      return chain.filter(exchange);
    }
    return exchange
        .getPrincipal()
        .map(principal -> principal.getName())
        .defaultIfEmpty("")
        .flatMap(
            principal -> {
              InetSocketAddress remote = exchange.getRequest().getRemoteAddress();
              String who =
                  PathRules.who(
                      rule,
                      exchange.getRequest().getHeaders()::getFirst,
                      remote == null ? null : remote.getAddress().getHostAddress(),
                      principal.isEmpty() ? null : principal);
              if (who == null) {
                return chain.filter(exchange);
              }
              List<Limiter> limiters = PathRules.limiters(rule, who);
              return ReactiveLimits.Exchanges.waitingOn(
                      exchange, limiter.check(limiters, Options.defaults(), shadow))
                  .doOnError(ServerUnavailableException.class, failed -> mark(exchange))
                  .flatMap(
                      result -> {
                        if (!result.allowed()) {
                          mark(exchange);
                          RateLimitedException refused = new RateLimitedException(result, limiters);
                          var response = exchange.getResponse();
                          response.setStatusCode(HttpStatus.valueOf(refused.status()));
                          response.getHeaders().setAll(refused.headers());
                          String body =
                              refused.status() == 429 ? "Too Many Requests" : "Service Unavailable";
                          return response.writeWith(
                              Mono.just(
                                  response
                                      .bufferFactory()
                                      .wrap(body.getBytes(StandardCharsets.UTF_8))));
                        }
                        if (!result.failed()) {
                          exchange
                              .getResponse()
                              .getHeaders()
                              .setAll(Fields.headers(result, limiters));
                        }
                        return chain.filter(exchange);
                      });
            });
  }

  private static void mark(ServerWebExchange exchange) {
    ReactiveLimits.Exchanges.markOwn(exchange);
  }
}
