package io.github.redisratelimit.spring;

import io.github.redisratelimit.Answered;
import io.github.redisratelimit.Fields;
import io.github.redisratelimit.Priority;
import io.github.redisratelimit.load.LoadShedder;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import org.springframework.web.filter.OncePerRequestFilter;

/**
 * Load shedding in a servlet container (docs/load.md), first of the filters: a request that the
 * instance's own limit or the fleet's level does not admit gets 503 with {@code Retry-After} before
 * anything else runs; every request admitted is counted in the shedder's limit and signals (in
 * flight, latency, status) until its response ends. Its priority is the {@code X-Priority} header
 * ({@code critical_plus}, {@code critical}, {@code sheddable_plus}, {@code sheddable}; none or
 * another: {@code sheddable}). The rate limiter's own answers (a 429, a 503 or 500 of its failure
 * policy) count as nothing of the service's health.
 */
public class LoadSheddingFilter extends OncePerRequestFilter {
  /** Where Spring MVC puts the pattern that matched (its {@code HandlerMapping}'s attribute). */
  static final String MATCHED_PATTERN =
      "org.springframework.web.servlet.HandlerMapping.bestMatchingPattern";

  private final LoadShedder shedder;
  private final String priorityHeader;

  public LoadSheddingFilter(LoadShedder shedder, String priorityHeader) {
    this.shedder = shedder;
    this.priorityHeader = priorityHeader;
  }

  @Override
  protected void doFilterInternal(
      HttpServletRequest request, HttpServletResponse response, FilterChain chain)
      throws ServletException, IOException {
    Priority priority = Priority.orElse(request.getHeader(priorityHeader), Priority.SHEDDABLE);
    LoadShedder.Ticket ticket = shedder.admit(priority);
    if (ticket == null) {
      response.setStatus(503);
      response.setHeader(
          "Retry-After", Long.toString(Math.max(1, Fields.seconds(shedder.retryAfter()))));
      response.setContentType("text/plain");
      response.getWriter().write("Service Unavailable");
      return;
    }
    int status = 500;
    boolean own = false;
    try (Answered.Scope scope = Answered.open(begins -> shedder.waiting(ticket, begins))) {
      try {
        chain.doFilter(request, response);
        status = response.getStatus();
      } finally {
        own = scope.answered().own();
      }
    } finally {
      shedder.finished(ticket, status, own, routeOf(request));
    }
  }

  /**
   * The route a request took, for the local limit to keep its latency apart: its method and the
   * pattern Spring MVC matched, read once the chain answered; the path where none matched.
   */
  static String routeOf(HttpServletRequest request) {
    Object pattern = request.getAttribute(MATCHED_PATTERN);
    return request.getMethod() + " " + (pattern != null ? pattern : request.getRequestURI());
  }
}
