package io.github.redisratelimit.spring;

import io.github.redisratelimit.AsyncRateLimiter;
import io.github.redisratelimit.Config;
import io.github.redisratelimit.JedisCalls;
import io.github.redisratelimit.LettuceCalls;
import io.github.redisratelimit.Metrics;
import io.github.redisratelimit.MicrometerMetrics;
import io.github.redisratelimit.RateLimiter;
import io.github.redisratelimit.ReactiveRateLimiter;
import io.github.redisratelimit.RedisCalls;
import io.github.redisratelimit.load.LoadShedder;
import io.micrometer.core.instrument.MeterRegistry;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnExpression;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.boot.autoconfigure.data.redis.RedisAutoConfiguration;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;
import org.springframework.data.redis.connection.RedisConnectionFactory;
import org.springframework.data.redis.connection.jedis.JedisConnectionFactory;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.util.ClassUtils;
import org.springframework.web.filter.reactive.ServerWebExchangeContextFilter;

/**
 * The starter's auto-configuration: the client on the application's own Redis connection (Spring
 * Data Redis' {@code RedisConnectionFactory}: Lettuce's client, or Jedis' settings),
 * {@code @RateLimit}, the answer to a refusal, {@code ratelimit.paths} and load shedding, in
 * whichever web stack runs. Every bean backs off when the application defines its own.
 */
@AutoConfiguration(after = RedisAutoConfiguration.class)
@ConditionalOnBean(RedisConnectionFactory.class)
@EnableConfigurationProperties(RateLimitProperties.class)
public class RateLimitAutoConfiguration {

  /** The calls, on a connection of its own from the application's client. */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  public RedisCalls rateLimitRedisCalls(RedisConnectionFactory factory) {
    if (ClassUtils.isPresent("io.lettuce.core.RedisClient", getClass().getClassLoader())
        && factory instanceof LettuceConnectionFactory lettuce) {
      if (!lettuce.isRunning()) {
        lettuce.start();
      }
      return LettuceCalls.connect(lettuce.getNativeClient());
    }
    if (ClassUtils.isPresent("redis.clients.jedis.JedisPooled", getClass().getClassLoader())
        && factory instanceof JedisConnectionFactory jedis) {
      return Jedis.calls(jedis);
    }
    throw new IllegalStateException("the rate limiter runs on Lettuce or Jedis, not " + factory);
  }

  /** Jedis' settings as a pool of the limiter's own. */
  static final class Jedis {
    private Jedis() {}

    static RedisCalls calls(JedisConnectionFactory factory) {
      var config =
          redis.clients.jedis.DefaultJedisClientConfig.builder()
              .database(factory.getDatabase())
              .ssl(factory.isUseSsl())
              .password(factory.getPassword())
              .timeoutMillis(factory.getTimeout())
              .build();
      return JedisCalls.of(
          new redis.clients.jedis.JedisPooled(
              new redis.clients.jedis.HostAndPort(factory.getHostName(), factory.getPort()),
              config));
    }
  }

  @Bean(destroyMethod = "")
  @ConditionalOnMissingBean
  public AsyncRateLimiter asyncRateLimiter(
      RedisCalls calls, RateLimitProperties properties, ObjectProvider<Metrics> metrics) {
    Config config =
        Config.defaults()
            .timeout(properties.getTimeout())
            .onError(properties.getOnError())
            .cooldown(properties.getCooldown())
            .denyCache(properties.getDenyCache())
            .shadow(properties.isShadow())
            .metrics(metrics.getIfAvailable(() -> Metrics.NONE));
    return new AsyncRateLimiter(calls, config);
  }

  /** The decisions counted in the application's Micrometer registry, when it has one. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(name = "io.micrometer.core.instrument.MeterRegistry")
  static class Micrometer {
    @Bean
    @ConditionalOnMissingBean(Metrics.class)
    @ConditionalOnBean(MeterRegistry.class)
    public Metrics rateLimitMetrics(MeterRegistry registry) {
      return new MicrometerMetrics(registry);
    }
  }

  @Bean
  @ConditionalOnMissingBean
  public RateLimiter rateLimiter(AsyncRateLimiter async) {
    return async.blocking();
  }

  @Bean
  @ConditionalOnMissingBean
  public RateLimitAspect rateLimitAspect(RateLimiter limiter, RateLimitProperties properties) {
    return new RateLimitAspect(limiter, properties.isShadow());
  }

  @Bean
  @ConditionalOnMissingBean
  @ConditionalOnClass(name = "org.springframework.web.bind.annotation.RestControllerAdvice")
  public RateLimitedAdvice rateLimitedAdvice() {
    return new RateLimitedAdvice();
  }

  /**
   * The load shedder, reporting once it is made, when {@code ratelimit.load-shedding.service} is
   * set.
   */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  @ConditionalOnProperty(prefix = "ratelimit.load-shedding", name = "service")
  public LoadShedder loadShedder(AsyncRateLimiter limiter, RateLimitProperties properties) {
    RateLimitProperties.LoadShedding settings = properties.getLoadShedding();
    LoadShedder.Builder builder =
        LoadShedder.builder(limiter, settings.getService())
            .interval(settings.getInterval())
            .shadow(settings.isShadow());
    if (!settings.isLimit()) {
      builder.withoutLimit();
    }
    return builder.build().start();
  }

  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(name = "reactor.core.publisher.Mono")
  static class Reactive {
    @Bean
    @ConditionalOnMissingBean
    public ReactiveRateLimiter reactiveRateLimiter(AsyncRateLimiter async) {
      return new ReactiveRateLimiter(async);
    }
  }

  /** The servlet stack: the filters, registered first. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
  static class Servlet {
    @Bean
    @ConditionalOnProperty(prefix = "ratelimit.load-shedding", name = "service")
    public FilterRegistrationBean<LoadSheddingFilter> loadSheddingFilter(
        LoadShedder shedder, RateLimitProperties properties) {
      FilterRegistrationBean<LoadSheddingFilter> registration =
          new FilterRegistrationBean<>(
              new LoadSheddingFilter(shedder, properties.getLoadShedding().getPriorityHeader()));
      registration.setOrder(Ordered.HIGHEST_PRECEDENCE);
      return registration;
    }

    @Bean
    @ConditionalOnExpression("!'${ratelimit.paths[0].patterns[0]:}'.isEmpty()")
    public FilterRegistrationBean<PathRateLimitFilter> pathRateLimitFilter(
        RateLimiter limiter, RateLimitProperties properties) {
      FilterRegistrationBean<PathRateLimitFilter> registration =
          new FilterRegistrationBean<>(
              new PathRateLimitFilter(limiter, properties.getPaths(), properties.isShadow()));
      registration.setOrder(Ordered.HIGHEST_PRECEDENCE + 10);
      return registration;
    }
  }

  /**
   * The reactive stack (WebFlux, Spring Cloud Gateway): the WebFilters, and the exchange in the
   * Reactor context.
   */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.REACTIVE)
  static class WebFlux {
    @Bean
    @ConditionalOnMissingBean
    public ServerWebExchangeContextFilter serverWebExchangeContextFilter() {
      return new ServerWebExchangeContextFilter();
    }

    @Bean
    @ConditionalOnProperty(prefix = "ratelimit.load-shedding", name = "service")
    public LoadSheddingWebFilter loadSheddingWebFilter(
        LoadShedder shedder, RateLimitProperties properties) {
      return new LoadSheddingWebFilter(shedder, properties.getLoadShedding().getPriorityHeader());
    }

    @Bean
    @ConditionalOnExpression("!'${ratelimit.paths[0].patterns[0]:}'.isEmpty()")
    public PathRateLimitWebFilter pathRateLimitWebFilter(
        AsyncRateLimiter limiter, RateLimitProperties properties) {
      return new PathRateLimitWebFilter(limiter, properties.getPaths(), properties.isShadow());
    }
  }
}
