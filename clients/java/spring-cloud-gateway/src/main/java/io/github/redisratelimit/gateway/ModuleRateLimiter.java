package io.github.redisratelimit.gateway;

import io.github.redisratelimit.Fields;
import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.Options;
import io.github.redisratelimit.RateLimit;
import io.github.redisratelimit.ReactiveRateLimiter;
import io.github.redisratelimit.spring.LoadSheddingWebFilter;
import io.github.redisratelimit.spring.RateLimitProperties;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.commons.logging.Log;
import org.apache.commons.logging.LogFactory;
import org.springframework.cloud.gateway.filter.ratelimit.AbstractRateLimiter;
import org.springframework.cloud.gateway.filter.ratelimit.RedisRateLimiter;
import org.springframework.cloud.gateway.route.RouteDefinitionRouteLocator;
import org.springframework.cloud.gateway.support.ConfigurationService;
import reactor.core.publisher.Mono;

/**
 * Beyond {@code RedisRateLimiter}: what its users ask for (spring-cloud-gateway #2373, #2845,
 * #1327) — limits per minute, hour or day, rates under one a second, several limits at once, any
 * algorithm — each route's limits decided together in one call ({@code RL.ALL}, all or nothing).
 * The bean {@code moduleRateLimiter}, named in a route's {@code RequestRateLimiter} filter:
 *
 * <pre>
 * filters:
 *   - name: RequestRateLimiter
 *     args:
 *       rate-limiter: "#{@moduleRateLimiter}"
 *       key-resolver: "#{@userKeyResolver}"
 *       module-rate-limiter.replenishRate: 10        # the token bucket, as RedisRateLimiter's
 *       module-rate-limiter.burstCapacity: 20
 *       module-rate-limiter.limits[0].limit: 1000    # and 1,000 a day
 *       module-rate-limiter.limits[0].window: 1d
 *       module-rate-limiter.limits[0].algorithm: fixed
 *       module-rate-limiter.limits[0].name: day
 * </pre>
 *
 * Headers: {@code RedisRateLimiter}'s {@code X-RateLimit-*} for the bucket (when one is set), the
 * IETF {@code RateLimit-Policy} and {@code RateLimit} for every limit, and {@code Retry-After} on a
 * refusal. A failing server is logged and the request allowed.
 */
public class ModuleRateLimiter extends AbstractRateLimiter<ModuleRateLimiter.Config> {
  /** The route arguments' prefix. */
  public static final String CONFIGURATION_PROPERTY_NAME = "module-rate-limiter";

  private static final Log LOG = LogFactory.getLog(ModuleRateLimiter.class);

  private final ReactiveRateLimiter limiter;

  public ModuleRateLimiter(ReactiveRateLimiter limiter, ConfigurationService configurationService) {
    super(Config.class, CONFIGURATION_PROPERTY_NAME, configurationService);
    this.limiter = limiter;
  }

  /** A route's limits: a token bucket as {@code RedisRateLimiter}'s, and any others. */
  public static class Config {
    private int replenishRate;
    private long burstCapacity;
    private int requestedTokens = 1;
    private List<RateLimitProperties.LimitSpec> limits = new ArrayList<>();

    public int getReplenishRate() {
      return replenishRate;
    }

    public Config setReplenishRate(int replenishRate) {
      this.replenishRate = replenishRate;
      return this;
    }

    public long getBurstCapacity() {
      return burstCapacity;
    }

    public Config setBurstCapacity(long burstCapacity) {
      this.burstCapacity = burstCapacity;
      return this;
    }

    public int getRequestedTokens() {
      return requestedTokens;
    }

    public Config setRequestedTokens(int requestedTokens) {
      this.requestedTokens = requestedTokens;
      return this;
    }

    public List<RateLimitProperties.LimitSpec> getLimits() {
      return limits;
    }

    public Config setLimits(List<RateLimitProperties.LimitSpec> limits) {
      this.limits = limits;
      return this;
    }
  }

  Config configFor(String routeId) {
    Config config = getConfig().get(routeId);
    if (config == null) {
      config = getConfig().get(RouteDefinitionRouteLocator.DEFAULT_FILTERS);
    }
    if (config == null) {
      throw new IllegalArgumentException(
          "No Configuration found for route " + routeId + " or defaultFilters");
    }
    return config;
  }

  /** The route's limiters for caller {@code id}, the bucket first; all on one hash tag. */
  static List<Limiter> limiters(Config config, String routeId, String id) {
    List<Limiter> limiters = new ArrayList<>();
    String key = Buckets.key(routeId, id);
    if (config.getReplenishRate() > 0) {
      limiters.add(Buckets.bucket(key, config.getReplenishRate(), config.getBurstCapacity()));
    }
    for (int index = 0; index < config.getLimits().size(); index++) {
      limiters.add(config.getLimits().get(index).limiter(key + ":" + index));
    }
    if (limiters.isEmpty()) {
      throw new IllegalArgumentException("route " + routeId + ": a replenishRate or limits");
    }
    return limiters;
  }

  @Override
  public Mono<Response> isAllowed(String routeId, String id) {
    Config config = configFor(routeId);
    List<Limiter> limiters = limiters(config, routeId, id);
    long quantity = config.getReplenishRate() > 0 ? config.getRequestedTokens() : 1;
    return LoadSheddingWebFilter.waitingOnServer(
            limiter.check(limiters, Options.defaults().quantity(quantity)))
        .map(result -> new Response(result.allowed(), headers(config, limiters, result)))
        .onErrorResume(
            failed -> {
              LOG.error("Error determining if user allowed from redis", failed);
              return Mono.just(new Response(true, bucketHeaders(config, -1L)));
            });
  }

  private static Map<String, String> headers(
      Config config, List<Limiter> limiters, RateLimit result) {
    Map<String, String> headers = new LinkedHashMap<>();
    if (result.failed()) {
      return bucketHeaders(config, -1L);
    }
    if (config.getReplenishRate() > 0) {
      RateLimit bucket = result.each().isEmpty() ? result : result.each().get(0);
      headers.putAll(bucketHeaders(config, bucket.remaining()));
    }
    headers.putAll(Fields.headers(result, limiters));
    return headers;
  }

  private static Map<String, String> bucketHeaders(Config config, long remaining) {
    Map<String, String> headers = new LinkedHashMap<>();
    if (config.getReplenishRate() > 0) {
      headers.put(RedisRateLimiter.REMAINING_HEADER, Long.toString(remaining));
      headers.put(
          RedisRateLimiter.REPLENISH_RATE_HEADER, Integer.toString(config.getReplenishRate()));
      headers.put(RedisRateLimiter.BURST_CAPACITY_HEADER, Long.toString(config.getBurstCapacity()));
      headers.put(
          RedisRateLimiter.REQUESTED_TOKENS_HEADER, Integer.toString(config.getRequestedTokens()));
    }
    return headers;
  }
}
