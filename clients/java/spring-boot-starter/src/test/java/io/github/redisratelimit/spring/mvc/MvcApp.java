package io.github.redisratelimit.spring.mvc;

import io.github.redisratelimit.spring.RateLimit;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.stereotype.Service;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RestController;

/** A Spring MVC service limited as the starter's README shows. */
@SpringBootApplication
public class MvcApp {
  @RestController
  public static class Endpoints {
    @RateLimit(key = "#request.getHeader('X-Client')", limit = 3, window = "1m", name = "minute")
    @GetMapping("/limited")
    public String limited() {
      return "ok";
    }

    @RateLimit(key = "#request.getHeader('X-Client')", rate = 0.5)
    @RateLimit(
        key = "#request.getHeader('X-Client')",
        limit = 1000,
        window = "1d",
        algorithm = RateLimit.Algorithm.FIXED,
        name = "day")
    @GetMapping("/slow")
    public String slow() {
      return "ok";
    }

    @RateLimit(limit = 1_000_000, window = "1m", name = "outage")
    @GetMapping("/outage")
    public String outage() {
      return "ok";
    }

    @GetMapping("/open")
    public String open() {
      return "ok";
    }

    @GetMapping("/items/{number}")
    public String item(@PathVariable String number) {
      return number;
    }

    @GetMapping("/paths/one")
    public String path() {
      return "ok";
    }
  }

  /** A bean that is not a controller: a refusal throws. */
  @Service
  public static class Billing {
    @RateLimit(key = "#customer", limit = 2, window = "1m", algorithm = RateLimit.Algorithm.LOG)
    public String charge(String customer) {
      return "charged " + customer;
    }
  }
}
