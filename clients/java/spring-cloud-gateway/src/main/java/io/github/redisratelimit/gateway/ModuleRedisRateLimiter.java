package io.github.redisratelimit.gateway;

import io.github.redisratelimit.Options;
import io.github.redisratelimit.ReactiveRateLimiter;
import io.github.redisratelimit.spring.LoadSheddingWebFilter;
import java.util.List;
import org.apache.commons.logging.Log;
import org.apache.commons.logging.LogFactory;
import org.springframework.beans.BeansException;
import org.springframework.cloud.gateway.filter.ratelimit.RedisRateLimiter;
import org.springframework.cloud.gateway.route.RouteDefinitionRouteLocator;
import org.springframework.cloud.gateway.support.ConfigurationService;
import org.springframework.context.ApplicationContext;
import reactor.core.publisher.Mono;

/**
 * A drop-in for Spring Cloud Gateway's {@link RedisRateLimiter}: the same bean ({@code
 * redisRateLimiter}), the same configuration ({@code redis-rate-limiter.replenishRate}, {@code
 * burstCapacity}, {@code requestedTokens}, per route or as a default) and the same {@code
 * X-RateLimit-*} headers, decided by the module in one call ({@code CL.THROTTLE}) instead of a Lua
 * script. Adding the dependency replaces the script; nothing else changes.
 *
 * <p>The one difference: the script reads {@code TIME}'s whole seconds, so its bucket refills
 * {@code replenishRate} tokens at once at each second; the module refills continuously. At any
 * moment the two have admitted the same requests to within one second's {@code replenishRate}
 * (tested against the script on the same server). A failing server is logged and the request
 * allowed, as the script's gateway does.
 */
public class ModuleRedisRateLimiter extends RedisRateLimiter {
  private static final Log LOG = LogFactory.getLog(ModuleRedisRateLimiter.class);

  private final ReactiveRateLimiter limiter;
  private Config fallback;

  /** The auto-configured bean: its configuration from the routes. */
  public ModuleRedisRateLimiter(
      ReactiveRateLimiter limiter, ConfigurationService configurationService) {
    super(null, null, configurationService);
    this.limiter = limiter;
  }

  /** With a default configuration, for the Java DSL (as {@code new RedisRateLimiter(10, 20)}). */
  public ModuleRedisRateLimiter(ReactiveRateLimiter limiter, int replenishRate, int burstCapacity) {
    this(limiter, replenishRate, burstCapacity, 1);
  }

  /**
   * With a default configuration, for the Java DSL (as {@code new RedisRateLimiter(10, 20, 2)}).
   */
  public ModuleRedisRateLimiter(
      ReactiveRateLimiter limiter, int replenishRate, int burstCapacity, int requestedTokens) {
    super(replenishRate, burstCapacity, requestedTokens);
    this.limiter = limiter;
    this.fallback =
        new Config()
            .setReplenishRate(replenishRate)
            .setBurstCapacity(burstCapacity)
            .setRequestedTokens(requestedTokens);
  }

  /**
   * Only the configuration service is taken from the context: the script and its template are not
   * needed.
   */
  @Override
  public void setApplicationContext(ApplicationContext context) throws BeansException {
    if (context.getBeanNamesForType(ConfigurationService.class).length > 0) {
      setConfigurationService(context.getBean(ConfigurationService.class));
    }
  }

  Config configFor(String routeId) {
    Config config = getConfig().getOrDefault(routeId, fallback);
    if (config == null) {
      config = getConfig().get(RouteDefinitionRouteLocator.DEFAULT_FILTERS);
    }
    if (config == null) {
      throw new IllegalArgumentException(
          "No Configuration found for route " + routeId + " or defaultFilters");
    }
    return config;
  }

  @Override
  public Mono<Response> isAllowed(String routeId, String id) {
    Config config = configFor(routeId);
    if (config.getBurstCapacity() < 1 || config.getRequestedTokens() > config.getBurstCapacity()) {
      // A bucket of 0 (SCG's way to block a route), or a request it can never hold.
      return Mono.just(new Response(false, getHeaders(config, 0L)));
    }
    var bucket =
        Buckets.bucket(
            Buckets.key(routeId, id), config.getReplenishRate(), config.getBurstCapacity());
    return LoadSheddingWebFilter.waitingOnServer(
            limiter.check(
                List.of(bucket), Options.defaults().quantity(config.getRequestedTokens())))
        .map(
            result ->
                new Response(
                    result.allowed(),
                    getHeaders(config, result.failed() ? -1L : result.remaining())))
        .onErrorResume(
            failed -> {
              LOG.error("Error determining if user allowed from redis", failed);
              return Mono.just(new Response(true, getHeaders(config, -1L)));
            });
  }
}
