package io.github.redisratelimit.spring;

import io.github.redisratelimit.Answered;
import io.github.redisratelimit.Fields;
import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.Options;
import io.github.redisratelimit.RateLimit;
import io.github.redisratelimit.RateLimiter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.util.List;
import org.springframework.web.filter.OncePerRequestFilter;

/**
 * {@code ratelimit.paths} in a servlet container: a request whose path matches a rule is checked
 * against its limits (one call, all or nothing) before anything else runs; refused, it gets 429
 * with {@code Retry-After} and the IETF fields (503 under {@code on-error: deny} while the server
 * fails); admitted, the fields.
 */
public class PathRateLimitFilter extends OncePerRequestFilter {
  private final RateLimiter limiter;
  private final PathRules rules;
  private final boolean shadow;

  public PathRateLimitFilter(
      RateLimiter limiter, List<RateLimitProperties.PathRule> rules, boolean shadow) {
    this.limiter = limiter;
    this.rules = new PathRules(rules);
    this.shadow = shadow;
  }

  @Override
  protected void doFilterInternal(
      HttpServletRequest request, HttpServletResponse response, FilterChain chain)
      throws ServletException, IOException {
    String path = request.getRequestURI().substring(request.getContextPath().length());
    RateLimitProperties.PathRule rule = rules.ruleFor(path);
    String who =
        rule == null
            ? null
            : PathRules.who(
                rule,
                request::getHeader,
                request.getRemoteAddr(),
                request.getUserPrincipal() == null ? null : request.getUserPrincipal().getName());
    if (who == null) {
      chain.doFilter(request, response);
      return;
    }
    List<Limiter> limiters = PathRules.limiters(rule, who);
    RateLimit result = limiter.check(limiters, Options.defaults(), shadow);
    if (!result.allowed()) {
      Answered.markOwn();
      RateLimitedException refused = new RateLimitedException(result, limiters);
      refused.headers().forEach(response::setHeader);
      response.setStatus(refused.status());
      response.setContentType("text/plain");
      response
          .getWriter()
          .write(refused.status() == 429 ? "Too Many Requests" : "Service Unavailable");
      return;
    }
    if (!result.failed()) {
      Fields.headers(result, limiters).forEach(response::setHeader);
    }
    chain.doFilter(request, response);
  }
}
