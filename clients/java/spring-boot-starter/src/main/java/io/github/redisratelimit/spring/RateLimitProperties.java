package io.github.redisratelimit.spring;

import io.github.redisratelimit.OnError;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * The starter's settings, under {@code ratelimit} in {@code application.yml}; the connection is the
 * application's own ({@code spring.data.redis.*}).
 *
 * <pre>
 * ratelimit:
 *   timeout: 1s            # the most a call waits; then on-error decides
 *   on-error: raise        # raise (500), allow, deny (503)
 *   paths:                 # whole paths, as the other packages' middleware
 *     - patterns: [/api/**]
 *       key: remote-address          # or header:X-API-Key, principal
 *       limits:
 *         - {rate: 10, burst: 20}
 *         - {limit: 10000, window: 1d, algorithm: fixed, name: day}
 *   load-shedding:
 *     service: load:checkout         # on when set
 * </pre>
 */
@ConfigurationProperties("ratelimit")
public class RateLimitProperties {
  /** The most a call to the server waits, whatever the driver's own timeouts. */
  private Duration timeout = Duration.ofSeconds(1);

  /** What a decision is when the server fails: raise, allow or deny. */
  private OnError onError = OnError.RAISE;

  /** After a failure, how long decisions are taken by on-error without asking. */
  private Duration cooldown = Duration.ofSeconds(1);

  /** How many standing refusals are answered locally (0: none). */
  private int denyCache;

  /** Refusals let through, counted and logged. */
  private boolean shadow;

  /** Rate limits on whole paths. */
  private List<PathRule> paths = new ArrayList<>();

  /** Load shedding, on when its service is set. */
  private LoadShedding loadShedding = new LoadShedding();

  public Duration getTimeout() {
    return timeout;
  }

  public void setTimeout(Duration timeout) {
    this.timeout = timeout;
  }

  public OnError getOnError() {
    return onError;
  }

  public void setOnError(OnError onError) {
    this.onError = onError;
  }

  public Duration getCooldown() {
    return cooldown;
  }

  public void setCooldown(Duration cooldown) {
    this.cooldown = cooldown;
  }

  public int getDenyCache() {
    return denyCache;
  }

  public void setDenyCache(int denyCache) {
    this.denyCache = denyCache;
  }

  public boolean isShadow() {
    return shadow;
  }

  public void setShadow(boolean shadow) {
    this.shadow = shadow;
  }

  public List<PathRule> getPaths() {
    return paths;
  }

  public void setPaths(List<PathRule> paths) {
    this.paths = paths;
  }

  public LoadShedding getLoadShedding() {
    return loadShedding;
  }

  public void setLoadShedding(LoadShedding loadShedding) {
    this.loadShedding = loadShedding;
  }

  /** Rate limits on the requests whose path matches one of {@code patterns}. */
  public static class PathRule {
    /** Path patterns ({@code /api/**}). */
    private List<String> patterns = new ArrayList<>();

    /** Whose limit: {@code remote-address}, {@code header:<name>} or {@code principal}. */
    private String key = "remote-address";

    /** The limits, decided together. */
    private List<LimitSpec> limits = new ArrayList<>();

    public List<String> getPatterns() {
      return patterns;
    }

    public void setPatterns(List<String> patterns) {
      this.patterns = patterns;
    }

    public String getKey() {
      return key;
    }

    public void setKey(String key) {
      this.key = key;
    }

    public List<LimitSpec> getLimits() {
      return limits;
    }

    public void setLimits(List<LimitSpec> limits) {
      this.limits = limits;
    }
  }

  /** One limit, as {@link RateLimit} says it: a rate, or a limit per window. */
  public static class LimitSpec {
    private String name = "";
    private double rate;
    private long limit;
    private Duration window = Duration.ofSeconds(1);
    private RateLimit.Algorithm algorithm = RateLimit.Algorithm.SLIDING;
    private long burst;

    public String getName() {
      return name;
    }

    public void setName(String name) {
      this.name = name;
    }

    public double getRate() {
      return rate;
    }

    public void setRate(double rate) {
      this.rate = rate;
    }

    public long getLimit() {
      return limit;
    }

    public void setLimit(long limit) {
      this.limit = limit;
    }

    public Duration getWindow() {
      return window;
    }

    public void setWindow(Duration window) {
      this.window = window;
    }

    public RateLimit.Algorithm getAlgorithm() {
      return algorithm;
    }

    public void setAlgorithm(RateLimit.Algorithm algorithm) {
      this.algorithm = algorithm;
    }

    public long getBurst() {
      return burst;
    }

    public void setBurst(long burst) {
      this.burst = burst;
    }

    /** This limit on {@code key}, as the client's limiter. */
    public io.github.redisratelimit.Limiter limiter(String key) {
      return LimitSpecs.limiter(key, this);
    }
  }

  /** Load shedding by the instance's own limit and the fleet's level (docs/load.md). */
  public static class LoadShedding {
    /** The service's key; load shedding is on when it is set. */
    private String service;

    /** The header a request names its priority in. */
    private String priorityHeader = "X-Priority";

    /** Between reports of the instance's health. */
    private Duration interval = Duration.ofSeconds(1);

    /** Nothing shed: what would be is counted and logged. */
    private boolean shadow;

    /** The instance's own limit on requests in flight (false: by the level alone). */
    private boolean limit = true;

    public String getService() {
      return service;
    }

    public void setService(String service) {
      this.service = service;
    }

    public String getPriorityHeader() {
      return priorityHeader;
    }

    public void setPriorityHeader(String priorityHeader) {
      this.priorityHeader = priorityHeader;
    }

    public Duration getInterval() {
      return interval;
    }

    public void setInterval(Duration interval) {
      this.interval = interval;
    }

    public boolean isShadow() {
      return shadow;
    }

    public void setShadow(boolean shadow) {
      this.shadow = shadow;
    }

    public boolean isLimit() {
      return limit;
    }

    public void setLimit(boolean limit) {
      this.limit = limit;
    }
  }
}
