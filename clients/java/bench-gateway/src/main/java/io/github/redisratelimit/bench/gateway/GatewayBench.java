package io.github.redisratelimit.bench.gateway;

import java.net.URI;
import java.util.LinkedHashMap;
import java.util.Map;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.cloud.gateway.filter.ratelimit.KeyResolver;
import org.springframework.context.annotation.Bean;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;
import reactor.core.publisher.Mono;

/**
 * bench/java.py's gateway: one route, {@code /limited}, through {@code RequestRateLimiter} with the
 * {@code redisRateLimiter} bean and its limit far above the load, forwarded to a handler of the
 * same app. MODE {@code module} is the drop-in (the starter on the classpath, nothing configured);
 * {@code script} is Spring Cloud Gateway's own RedisRateLimiter, the drop-in's auto-configuration
 * excluded.
 *
 * <pre>java -cp ... io.github.redisratelimit.bench.gateway.GatewayBench PORT REDIS_URL MODE</pre>
 */
@SpringBootApplication
@RestController
public class GatewayBench {
  @GetMapping("/hello")
  Mono<String> hello() {
    return Mono.just("ok\n");
  }

  /** Every request one key: the route's limit is decided on one key, as a hot tenant's is. */
  @Bean
  KeyResolver everyone() {
    return exchange -> Mono.just("everyone");
  }

  public static void main(String[] args) {
    URI redis = URI.create(args[1]);
    Map<String, Object> properties = new LinkedHashMap<>();
    properties.put("server.port", args[0]);
    properties.put("server.address", "127.0.0.1");
    properties.put("spring.data.redis.host", redis.getHost());
    properties.put("spring.data.redis.port", redis.getPort());
    properties.put("logging.level.root", "ERROR");
    properties.put("spring.main.banner-mode", "off");
    String route = "spring.cloud.gateway.server.webflux.routes[0].";
    properties.put(route + "id", "limited");
    properties.put(route + "uri", "forward:/hello");
    properties.put(route + "predicates[0]", "Path=/limited");
    properties.put(route + "filters[0].name", "RequestRateLimiter");
    properties.put(route + "filters[0].args.key-resolver", "#{@everyone}");
    properties.put(route + "filters[0].args.redis-rate-limiter.replenishRate", "1000000000");
    properties.put(route + "filters[0].args.redis-rate-limiter.burstCapacity", "1000000000");
    switch (args[2]) {
      case "module" -> {}
      case "script" ->
          properties.put(
              "spring.autoconfigure.exclude",
              "io.github.redisratelimit.gateway.GatewayRateLimitAutoConfiguration");
      default -> throw new IllegalArgumentException("unknown mode " + args[2]);
    }
    SpringApplication application = new SpringApplication(GatewayBench.class);
    application.setDefaultProperties(properties);
    application.run();
  }
}
