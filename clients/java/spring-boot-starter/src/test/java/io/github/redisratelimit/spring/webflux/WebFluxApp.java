package io.github.redisratelimit.spring.webflux;

import io.github.redisratelimit.spring.RateLimit;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RestController;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;

/** A WebFlux service limited as the starter's README shows. */
@SpringBootApplication
public class WebFluxApp {
  @RestController
  public static class Endpoints {
    @RateLimit(
        key = "#exchange.request.headers.getFirst('X-Client')",
        limit = 3,
        window = "1m",
        name = "minute")
    @GetMapping("/limited")
    public Mono<String> limited() {
      return Mono.just("ok");
    }

    @RateLimit(
        key = "#exchange.request.headers.getFirst('X-Client')",
        limit = 1,
        window = "1m",
        algorithm = RateLimit.Algorithm.GCRA)
    @GetMapping("/stream")
    public Flux<String> stream() {
      return Flux.just("a", "b");
    }

    @GetMapping("/open")
    public Mono<String> open() {
      return Mono.just("ok");
    }

    @GetMapping("/items/{number}")
    public Mono<String> item(@PathVariable String number) {
      return Mono.just(number);
    }

    @GetMapping("/paths/one")
    public Mono<String> path() {
      return Mono.just("ok");
    }
  }
}
