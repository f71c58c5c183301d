package io.github.redisratelimit.gateway;

import io.github.redisratelimit.ReactiveRateLimiter;
import io.github.redisratelimit.spring.RateLimitAutoConfiguration;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.cloud.gateway.filter.ratelimit.RedisRateLimiter;
import org.springframework.cloud.gateway.support.ConfigurationService;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Primary;

/**
 * The module in Spring Cloud Gateway: its {@code redisRateLimiter} bean (before the gateway's own,
 * which backs off) and {@code moduleRateLimiter}, on the starter's client.
 */
@AutoConfiguration(
    after = RateLimitAutoConfiguration.class,
    beforeName = "org.springframework.cloud.gateway.config.GatewayRedisAutoConfiguration")
@ConditionalOnClass(RedisRateLimiter.class)
@ConditionalOnBean(ReactiveRateLimiter.class)
public class GatewayRateLimitAutoConfiguration {
  /** The gateway's default rate limiter, as its own {@code redisRateLimiter} is. */
  @Bean
  @Primary
  @ConditionalOnMissingBean(RedisRateLimiter.class)
  public RedisRateLimiter redisRateLimiter(
      ReactiveRateLimiter limiter, ConfigurationService configurationService) {
    return new ModuleRedisRateLimiter(limiter, configurationService);
  }

  /**
   * Beyond the drop-in, named in a route ({@code rate-limiter: "#{@moduleRateLimiter}"}). Not a
   * candidate for injection by type: the gateway injects the one {@code RateLimiter} an application
   * has into its filter factory, and an application with a limiter bean of its own must still have
   * exactly one.
   */
  @Bean(autowireCandidate = false)
  @ConditionalOnMissingBean
  public ModuleRateLimiter moduleRateLimiter(
      ReactiveRateLimiter limiter, ConfigurationService configurationService) {
    return new ModuleRateLimiter(limiter, configurationService);
  }
}
