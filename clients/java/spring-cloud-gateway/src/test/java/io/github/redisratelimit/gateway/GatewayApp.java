package io.github.redisratelimit.gateway;

import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.cloud.gateway.filter.ratelimit.KeyResolver;
import org.springframework.context.annotation.Bean;
import reactor.core.publisher.Mono;

/** A gateway limited as the package's README shows. */
@SpringBootApplication
public class GatewayApp {
  /** The caller: the X-Client header. */
  @Bean
  public KeyResolver clientKeyResolver() {
    return exchange -> Mono.justOrEmpty(exchange.getRequest().getHeaders().getFirst("X-Client"));
  }
}
