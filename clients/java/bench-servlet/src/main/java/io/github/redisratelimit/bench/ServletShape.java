package io.github.redisratelimit.bench;

import com.netflix.concurrency.limits.Limiter;
import com.netflix.concurrency.limits.limit.Gradient2Limit;
import com.netflix.concurrency.limits.limiter.SimpleLimiter;
import io.github.redisratelimit.load.LoadShedder;
import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServletResponse;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Profile;
import org.springframework.core.Ordered;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;

/**
 * Shape (g) of bench/overload.py: a Spring MVC service (Tomcat, its 200 threads), each request
 * burning CPU_MS of CPU, protected as clients/java/README.md shows with every option at its default
 * ({@code ratelimit.load-shedding.service}), or by the starter's fixed limit ({@code
 * ratelimit.paths}, one key at the capacity), or by nothing, or by Netflix's concurrency-limits
 * with Gradient2 and its defaults (its core's {@code SimpleLimiter}, as its servlet filter builds
 * it: the published filter is for javax.servlet).
 *
 * <pre>
 * java -cp ... io.github.redisratelimit.bench.ServletShape PORT REDIS_URL MODE CPU_MS [CAPACITY]
 * </pre>
 */
@SpringBootApplication
@RestController
public class ServletShape {
  static double cpuMillis;

  private final ObjectProvider<LoadShedder> shedder;

  /** The shedder, when the mode declares one (a handler's parameter cannot be a provider). */
  ServletShape(ObjectProvider<LoadShedder> shedder) {
    this.shedder = shedder;
  }

  /** Arithmetic for {@code millis} of this thread's CPU time; its result, read. */
  static double work(double millis) {
    var bean = java.lang.management.ManagementFactory.getThreadMXBean();
    long until = bean.getCurrentThreadCpuTime() + (long) (millis * 1e6);
    double x = 1;
    while (bean.getCurrentThreadCpuTime() < until) {
      for (int i = 0; i < 1000; i++) {
        x = Math.sqrt(x + i);
      }
    }
    return x;
  }

  @GetMapping("/")
  String hello() {
    return work(cpuMillis) < 0 ? "?" : "ok\n";
  }

  @GetMapping("/stats")
  Map<String, Object> stats() {
    Map<String, Object> counters = new LinkedHashMap<>();
    Optional.ofNullable(shedder.getIfAvailable())
        .ifPresent(
            each -> {
              counters.put("level", each.standing().level());
              counters.put("shares", each.standing().shares());
            });
    Optional.ofNullable(shedder.getIfAvailable())
        .map(LoadShedder::limit)
        .ifPresent(
            limit -> {
              counters.put("changes", limit.changes());
              counters.put("congestions", limit.congestions());
              counters.put("limit", limit.limit());
              counters.put("congested", limit.congested());
              counters.put("inflight", limit.inflight());
              counters.put("noload", limit.noload());
            });
    counters.putIfAbsent("changes", 0);
    counters.putIfAbsent("congestions", 0);
    return counters;
  }

  /** Gradient2, its defaults: a request over the limit gets 429, as its servlet filter answers. */
  @Bean
  @Profile("gradient2")
  FilterRegistrationBean<Filter> gradient2() {
    Limiter<Void> limiter = SimpleLimiter.newBuilder().limit(Gradient2Limit.newDefault()).build();
    Filter filter =
        (request, response, chain) -> {
          Optional<Limiter.Listener> listener = limiter.acquire(null);
          if (listener.isEmpty()) {
            ((HttpServletResponse) response).setStatus(429);
            return;
          }
          try {
            chain.doFilter(request, response);
            listener.get().onSuccess();
          } catch (Exception failed) {
            listener.get().onIgnore();
            throw failed;
          }
        };
    FilterRegistrationBean<Filter> registration = new FilterRegistrationBean<>(filter);
    registration.setOrder(Ordered.HIGHEST_PRECEDENCE);
    return registration;
  }

  public static void main(String[] args) {
    String port = args[0];
    String url = args[1];
    String mode = args[2];
    cpuMillis = Double.parseDouble(args[3]);
    double capacity = args.length > 4 ? Double.parseDouble(args[4]) : 0;
    java.net.URI redis = java.net.URI.create(url);
    Map<String, Object> properties = new LinkedHashMap<>();
    properties.put("server.port", port);
    properties.put("server.address", "127.0.0.1");
    properties.put("spring.data.redis.host", redis.getHost());
    properties.put("spring.data.redis.port", redis.getPort());
    properties.put("logging.level.root", "ERROR");
    properties.put("spring.main.banner-mode", "off");
    switch (mode) {
      case "shed" -> properties.put("ratelimit.load-shedding.service", "load:" + port);
      case "fixed" -> {
        long rate = Math.max(1, Math.round(capacity));
        properties.put("ratelimit.paths[0].patterns[0]", "/");
        properties.put("ratelimit.paths[0].key", "remote-address"); // every request: one key
        properties.put("ratelimit.paths[0].limits[0].rate", rate);
        properties.put("ratelimit.paths[0].limits[0].burst", Math.max(1, rate / 10));
      }
      case "none", "gradient2" -> {}
      default -> throw new IllegalArgumentException("unknown mode " + mode);
    }
    SpringApplication application = new SpringApplication(ServletShape.class);
    application.setDefaultProperties(properties);
    application.setAdditionalProfiles(mode);
    application.run();
  }
}
