package io.github.redisratelimit.spring;

import io.github.redisratelimit.Limiter;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import org.springframework.util.AntPathMatcher;

/** The {@code ratelimit.paths} rules: which apply to a path, and their limiters for a caller. */
final class PathRules {
  private final List<RateLimitProperties.PathRule> rules;
  private final AntPathMatcher matcher = new AntPathMatcher();

  PathRules(List<RateLimitProperties.PathRule> rules) {
    this.rules = List.copyOf(rules);
    for (RateLimitProperties.PathRule rule : rules) {
      if (rule.getPatterns().isEmpty() || rule.getLimits().isEmpty()) {
        throw new IllegalArgumentException("a ratelimit.paths rule has patterns and limits");
      }
      String key = rule.getKey();
      if (!key.equals("remote-address") && !key.equals("principal") && !key.startsWith("header:")) {
        throw new IllegalArgumentException(
            "a ratelimit.paths key is remote-address, principal or header:<name>, not " + key);
      }
      for (RateLimitProperties.LimitSpec spec : rule.getLimits()) {
        LimitSpecs.limiter("check", spec); // a bad limit fails at start-up, not at a request
      }
    }
  }

  boolean isEmpty() {
    return rules.isEmpty();
  }

  /** The first rule whose pattern matches {@code path}, or null. */
  RateLimitProperties.PathRule ruleFor(String path) {
    for (RateLimitProperties.PathRule rule : rules) {
      for (String pattern : rule.getPatterns()) {
        if (matcher.match(pattern, path)) {
          return rule;
        }
      }
    }
    return null;
  }

  /**
   * The caller a rule limits, from {@code header} (a header's value by name), {@code remote} and
   * {@code principal}: null when there is none (the request is not limited).
   */
  static String who(
      RateLimitProperties.PathRule rule,
      Function<String, String> header,
      String remote,
      String principal) {
    String key = rule.getKey();
    if (key.startsWith("header:")) {
      return header.apply(key.substring("header:".length()));
    }
    return key.equals("principal") ? principal : remote;
  }

  /** The rule's limiters for {@code who}. */
  static List<Limiter> limiters(RateLimitProperties.PathRule rule, String who) {
    List<Limiter> limiters = new ArrayList<>();
    String where = "path:" + String.join(",", rule.getPatterns());
    for (int index = 0; index < rule.getLimits().size(); index++) {
      limiters.add(
          LimitSpecs.limiter(LimitSpecs.key(who, where, index), rule.getLimits().get(index)));
    }
    return limiters;
  }
}
