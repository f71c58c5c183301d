package io.github.redisratelimit.spring;

import io.github.redisratelimit.Answered;
import io.github.redisratelimit.Fields;
import io.github.redisratelimit.Limiter;
import io.github.redisratelimit.Options;
import io.github.redisratelimit.RateLimiter;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.aspectj.lang.ProceedingJoinPoint;
import org.aspectj.lang.annotation.Around;
import org.aspectj.lang.annotation.Aspect;
import org.aspectj.lang.reflect.MethodSignature;
import org.springframework.context.expression.MethodBasedEvaluationContext;
import org.springframework.core.DefaultParameterNameDiscoverer;
import org.springframework.core.ParameterNameDiscoverer;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.expression.Expression;
import org.springframework.expression.ExpressionParser;
import org.springframework.expression.spel.standard.SpelExpressionParser;
import org.springframework.util.ClassUtils;
import org.springframework.web.context.request.RequestAttributes;
import org.springframework.web.context.request.RequestContextHolder;
import org.springframework.web.context.request.ServletRequestAttributes;

/**
 * What {@link RateLimit} does: the method's limits, keyed by their SpEL, checked in one call before
 * the method runs; a refusal throws {@link RateLimitedException}; an admitted servlet request
 * carries the IETF RateLimit fields. A method returning {@code Mono} or {@code Flux} is checked
 * when subscribed ({@link ReactiveLimits}).
 */
@Aspect
public class RateLimitAspect {
  private static final boolean REACTOR =
      ClassUtils.isPresent("reactor.core.publisher.Mono", RateLimitAspect.class.getClassLoader());
  private static final boolean SERVLET =
      ClassUtils.isPresent(
              "jakarta.servlet.http.HttpServletRequest", RateLimitAspect.class.getClassLoader())
          && ClassUtils.isPresent(
              "org.springframework.web.context.request.ServletRequestAttributes",
              RateLimitAspect.class.getClassLoader());

  private final RateLimiter limiter;
  private final boolean shadow;
  private final Object reactive;
  private final ExpressionParser parser = new SpelExpressionParser();
  private final ParameterNameDiscoverer names = new DefaultParameterNameDiscoverer();
  private final Map<String, Expression> expressions = new ConcurrentHashMap<>();

  /**
   * Checks through {@code limiter} (its reactive face for reactive methods); {@code shadow}: every
   * limit in shadow mode.
   */
  public RateLimitAspect(RateLimiter limiter, boolean shadow) {
    this.limiter = limiter;
    this.shadow = shadow;
    this.reactive = REACTOR ? new ReactiveLimits(limiter.async()) : null;
  }

  @Around(
      "@annotation(io.github.redisratelimit.spring.RateLimit)"
          + " || @annotation(io.github.redisratelimit.spring.RateLimit.List)"
          + " || @within(io.github.redisratelimit.spring.RateLimit)"
          + " || @within(io.github.redisratelimit.spring.RateLimit.List)")
  public Object limit(ProceedingJoinPoint call) throws Throwable {
    Method method = ((MethodSignature) call.getSignature()).getMethod();
    Set<RateLimit> annotations =
        AnnotatedElementUtils.findMergedRepeatableAnnotations(method, RateLimit.class);
    if (annotations.isEmpty()) {
      annotations =
          AnnotatedElementUtils.findMergedRepeatableAnnotations(
              call.getTarget().getClass(), RateLimit.class);
    }
    List<RateLimit> limits = List.copyOf(annotations);
    if (limits.isEmpty()) {
      return call.proceed();
    }
    boolean inShadow = shadow || limits.stream().anyMatch(RateLimit::shadow);
    Options options =
        Options.defaults().quantity(limits.stream().mapToLong(RateLimit::cost).max().orElse(1));
    if (reactive != null && ReactiveLimits.isReactive(method.getReturnType())) {
      return ((ReactiveLimits) reactive).limit(call, method, limits, options, inShadow, this);
    }
    List<Limiter> limiters =
        limiters(method, call.getArgs(), call.getTarget(), limits, Map.of(), SERVLET);
    io.github.redisratelimit.RateLimit result = limiter.check(limiters, options, inShadow);
    if (!result.allowed()) {
      Answered.markOwn();
      throw new RateLimitedException(result, limiters);
    }
    if (!result.failed() && SERVLET) {
      ServletFields.set(result, limiters);
    }
    return call.proceed();
  }

  /** The method's limiters for this call: each annotation's key evaluated, in order. */
  List<Limiter> limiters(
      Method method,
      Object[] args,
      Object target,
      List<RateLimit> limits,
      Map<String, Object> variables,
      boolean servlet) {
    String where = ClassUtils.getUserClass(target).getSimpleName() + "." + method.getName();
    List<Limiter> limiters = new ArrayList<>();
    MethodBasedEvaluationContext context = null;
    for (int index = 0; index < limits.size(); index++) {
      RateLimit limit = limits.get(index);
      String who = "";
      if (!limit.key().isEmpty()) {
        if (context == null) {
          context = new MethodBasedEvaluationContext(target, method, args, names);
          variables.forEach(context::setVariable);
          if (servlet) {
            ServletFields.addRequest(context);
          }
        }
        Expression expression = expressions.computeIfAbsent(limit.key(), parser::parseExpression);
        Object value = expression.getValue(context);
        who = value == null ? "" : value.toString();
      }
      limiters.add(LimitSpecs.limiter(LimitSpecs.key(who, where, index), limit));
    }
    return limiters;
  }

  /** The servlet request's variables and headers, where Spring MVC runs. */
  static final class ServletFields {
    private ServletFields() {}

    static void addRequest(MethodBasedEvaluationContext context) {
      RequestAttributes attributes = RequestContextHolder.getRequestAttributes();
      if (attributes instanceof ServletRequestAttributes servlet) {
        context.setVariable("request", servlet.getRequest());
        context.setVariable("principal", servlet.getRequest().getUserPrincipal());
      }
    }

    static void set(io.github.redisratelimit.RateLimit result, List<Limiter> limiters) {
      RequestAttributes attributes = RequestContextHolder.getRequestAttributes();
      if (attributes instanceof ServletRequestAttributes servlet && servlet.getResponse() != null) {
        Fields.headers(result, limiters).forEach(servlet.getResponse()::setHeader);
      }
    }
  }
}
