package io.github.redisratelimit.spring;

import io.github.redisratelimit.Answered;
import org.springframework.http.HttpHeaders;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.RestControllerAdvice;

/**
 * Answers a {@link RateLimitedException} in Spring MVC and WebFlux: 429 with {@code Retry-After}
 * and the IETF RateLimit fields; 503 with {@code Retry-After} when the server failed under {@code
 * on-error: deny} or a load gate shed the call.
 */
@RestControllerAdvice
public class RateLimitedAdvice {
  @ExceptionHandler(RateLimitedException.class)
  public ResponseEntity<String> refused(RateLimitedException refused) {
    Answered.markOwn();
    HttpHeaders headers = new HttpHeaders();
    refused.headers().forEach(headers::set);
    headers.setContentType(MediaType.TEXT_PLAIN);
    String body = refused.status() == 429 ? "Too Many Requests" : "Service Unavailable";
    return ResponseEntity.status(refused.status()).headers(headers).body(body);
  }
}
