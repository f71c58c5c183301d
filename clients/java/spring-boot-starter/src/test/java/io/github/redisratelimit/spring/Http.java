package io.github.redisratelimit.spring;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/** Plain HTTP requests to the app under test. */
public final class Http {
  private static final HttpClient CLIENT =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();

  private Http() {}

  public static HttpResponse<String> get(int port, String path, String... headers) {
    HttpRequest.Builder request =
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .timeout(Duration.ofSeconds(20));
    for (int index = 0; index + 1 < headers.length; index += 2) {
      request.header(headers[index], headers[index + 1]);
    }
    try {
      return CLIENT.send(request.build(), HttpResponse.BodyHandlers.ofString());
    } catch (IOException failed) {
      throw new IllegalStateException(failed);
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(interrupted);
    }
  }

  /** The server the tests run against: {@code REDIS_URL}. */
  public static String redisUrl() {
    String url = System.getenv("REDIS_URL");
    if (url == null) {
      throw new IllegalStateException(
          "REDIS_URL names the server with the module (make test sets it)");
    }
    return url;
  }
}
