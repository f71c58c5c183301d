package io.github.redisratelimit;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.redisratelimit.load.ConcurrencyLimit;
import io.github.redisratelimit.load.LimitOptions;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * clients/conformance.json, the table every package of the project is tested against: the words
 * each limiter spec and option must produce, the result and HTTP fields each reply must give (calls
 * whose limits change between them too), the leases', RL.TOP's, the shared lists', the load
 * reports' and the counts' words and replies, and the local limit's traces, replayed exactly. Every
 * part but {@code lua}, which the nginx package's test reads; a part added to the table fails here
 * until it is read.
 */
class ConformanceTest {
  static JsonNode table;

  /** Every part this test reads. */
  static final Set<String> PARTS =
      Set.of(
          "about",
          "commands",
          "replies",
          "leases",
          "lease_replies",
          "top",
          "lists",
          "load",
          "load_replies",
          "counts",
          "changed_limits",
          "concurrency",
          "lua");

  @BeforeAll
  static void read() throws IOException {
    table = new ObjectMapper().readTree(Path.of("../../conformance.json").toFile());
  }

  static Duration seconds(JsonNode value) {
    return Duration.ofNanos(Math.round(value.asDouble() * 1e9));
  }

  static Limiter limiter(JsonNode spec) {
    String key = spec.get("key").asText();
    Limiter made =
        switch (spec.get("kind").asText()) {
          case "throttle" -> {
            Limiter.Throttle throttle =
                Limiter.throttle(
                    key,
                    spec.get("max_burst").asLong(),
                    spec.get("count").asLong(),
                    seconds(spec.get("period")));
            yield spec.has("warmup") ? throttle.warmup(seconds(spec.get("warmup"))) : throttle;
          }
          case "window" -> {
            Limiter.Window window =
                Limiter.window(key, spec.get("limit").asLong(), seconds(spec.get("window")));
            yield spec.has("algorithm")
                ? window.algorithm(Limiter.Algorithm.parse(spec.get("algorithm").asText()))
                : window;
          }
          case "log" -> Limiter.log(key, spec.get("limit").asLong(), seconds(spec.get("window")));
          case "load" ->
              Limiter.load(key, Priority.parse(spec.path("priority").asText("sheddable")));
          case "lease" ->
              Limiter.slots(key, spec.get("limit").asLong(), seconds(spec.get("lease")));
          default -> throw new IllegalArgumentException("unknown kind " + spec);
        };
    if (!spec.has("name")) {
      return made;
    }
    String name = spec.get("name").asText();
    if (made instanceof Limiter.Throttle throttle) {
      return throttle.named(name);
    }
    if (made instanceof Limiter.Window window) {
      return window.named(name);
    }
    if (made instanceof Limiter.Log log) {
      return log.named(name);
    }
    if (made instanceof Limiter.Slots slots) {
      return slots.named(name);
    }
    return made;
  }

  static List<Limiter> limiters(JsonNode specs) {
    List<Limiter> out = new ArrayList<>();
    specs.forEach(spec -> out.add(limiter(spec)));
    return out;
  }

  static Options options(JsonNode spec) {
    Options options = Options.defaults();
    for (var field : spec.properties()) {
      JsonNode value = field.getValue();
      options =
          switch (field.getKey()) {
            case "quantity" -> options.quantity(value.asLong());
            case "refund" -> value.asBoolean() ? options.refund() : options;
            case "block" -> options.block(seconds(value));
            case "delay" -> options.delay(seconds(value));
            case "at_most" -> value.asBoolean() ? options.atMost() : options;
            case "force" -> value.asBoolean() ? options.force() : options;
            case "read_only" -> value.asBoolean() ? options.readOnly() : options;
            default -> throw new IllegalArgumentException("unknown option " + field.getKey());
          };
    }
    return options;
  }

  static List<String> strings(JsonNode words) {
    List<String> out = new ArrayList<>();
    words.forEach(word -> out.add(word.isTextual() ? word.asText() : word.toString()));
    return out;
  }

  /** A reply as a driver gives it: integers as Long, strings as String, arrays as List. */
  static Object reply(JsonNode value) {
    if (value.isArray()) {
      List<Object> out = new ArrayList<>();
      value.forEach(one -> out.add(reply(one)));
      return out;
    }
    if (value.isIntegralNumber()) {
      return value.asLong();
    }
    return value.asText();
  }

  static Double seconds(Duration duration) {
    return duration == null ? null : duration.toNanos() / 1e9;
  }

  @Test
  void everyPartOfTheTableIsRead() {
    Set<String> parts = new HashSet<>();
    table.fieldNames().forEachRemaining(parts::add);
    assertEquals(PARTS, parts);
  }

  @Test
  void everySpecBuildsItsWords() {
    for (JsonNode one : table.get("commands")) {
      checkWords(one);
    }
  }

  @Test
  void everyReplyGivesItsResultAndFields() {
    for (JsonNode one : table.get("replies")) {
      checkReply(one);
    }
  }

  @Test
  void callsWhoseLimitsChangeSendThemAndReadTheirReplies() {
    for (JsonNode one : table.get("changed_limits")) {
      for (JsonNode step : one.get("steps")) {
        checkWords(step);
        checkReply(step);
      }
    }
  }

  void checkWords(JsonNode one) {
    List<String> words =
        Protocol.command(limiters(one.get("limiters")), options(one.get("options")));
    assertEquals(strings(one.get("words")), words, one.toString());
  }

  void checkReply(JsonNode one) {
    List<Limiter> specs = limiters(one.get("limiters"));
    RateLimit got =
        Protocol.result((List<?>) reply(one.get("reply")), specs, options(one.get("options")));
    JsonNode expected = one.get("result");
    assertEquals(expected.get("allowed").asBoolean(), got.allowed(), one.toString());
    assertEquals(expected.get("limit").asLong(), got.limit());
    assertEquals(expected.get("remaining").asLong(), got.remaining());
    assertEquals(
        expected.get("retry_after").isNull() ? null : expected.get("retry_after").asDouble(),
        seconds(got.retryAfter()));
    assertEquals(expected.get("reset_after").asDouble(), seconds(got.resetAfter()));
    assertEquals(expected.get("wait").asDouble(), seconds(got.waitFor()));
    assertEquals(
        expected.get("granted").isNull() ? null : expected.get("granted").asLong(), got.granted());
    assertEquals(expected.get("shed_level").asInt(), got.shedLevel());
    assertEquals(expected.get("lease_id").asLong(), got.leaseId());
    assertEquals(expected.get("each").size(), got.each().size());
    for (int index = 0; index < got.each().size(); index++) {
      JsonNode wanted = expected.get("each").get(index);
      RateLimit each = got.each().get(index);
      Map<String, Object> read = new LinkedHashMap<>();
      Map<String, Object> want = new LinkedHashMap<>();
      wanted
          .properties()
          .forEach(
              field -> {
                want.put(
                    field.getKey(),
                    field.getValue().isNull()
                        ? null
                        : field.getValue().isBoolean()
                            ? (Object) field.getValue().asBoolean()
                            : (Object) field.getValue().asDouble());
                read.put(
                    field.getKey(),
                    switch (field.getKey()) {
                      case "allowed" -> each.allowed();
                      case "limit" -> (double) each.limit();
                      case "remaining" -> (double) each.remaining();
                      case "retry_after" -> seconds(each.retryAfter());
                      case "reset_after" -> seconds(each.resetAfter());
                      case "wait" -> seconds(each.waitFor());
                      case "granted" ->
                          each.granted() == null ? null : (Object) (double) each.granted();
                      case "shed_level" -> (double) each.shedLevel();
                      case "lease_id" -> (double) each.leaseId();
                      default ->
                          throw new IllegalArgumentException("unknown field " + field.getKey());
                    });
              });
      assertEquals(want, read, one.toString());
    }
    Map<String, String> fields = new LinkedHashMap<>();
    one.get("fields")
        .properties()
        .forEach(field -> fields.put(field.getKey(), field.getValue().asText()));
    assertEquals(fields, Fields.headers(got, specs), one.toString());
  }

  @Test
  void leasesBuildTheirWordsAndReadTheirReplies() {
    for (JsonNode one : table.get("leases")) {
      String key = one.get("key").asText();
      List<String> words =
          switch (one.get("call").asText()) {
            case "acquire", "peek" ->
                Protocol.leaseCommand(
                    key,
                    one.get("limit").asLong(),
                    seconds(one.get("lease")),
                    one.get("quantity").asLong(),
                    one.get("call").asText().equals("peek"));
            case "release" -> Protocol.releaseCommand(key, one.get("id").asLong());
            default ->
                Protocol.renewCommand(key, one.get("id").asLong(), seconds(one.get("lease")));
          };
      assertEquals(strings(one.get("words")), words);
    }
    for (JsonNode one : table.get("lease_replies")) {
      Lease lease = Protocol.lease((List<?>) reply(one.get("reply")));
      assertEquals(one.get("allowed").asBoolean(), lease.allowed());
      assertEquals(one.get("id").asLong(), lease.id());
      assertEquals(one.get("remaining").asLong(), lease.result().remaining());
      assertEquals(
          one.get("retry_after").isNull() ? null : one.get("retry_after").asDouble(),
          seconds(lease.result().retryAfter()));
    }
  }

  @Test
  void topMergesEveryPrimary() {
    for (JsonNode one : table.get("top")) {
      List<TopKey> rows =
          Protocol.topKeys((List<?>) reply(one.get("replies")), one.get("count").asInt());
      List<List<Object>> read =
          rows.stream()
              .map(row -> List.<Object>of(row.key(), row.refusals(), row.error()))
              .toList();
      assertEquals(reply(one.get("rows")), read);
    }
  }

  @Test
  void theListsChangeInOneTransaction() {
    for (JsonNode one : table.get("lists")) {
      String hash = one.get("hash").asText();
      List<List<String>> built =
          one.get("change").asText().equals("add")
              ? Protocol.addCommands(
                  hash,
                  one.get("list").asText(),
                  one.get("item").asText(),
                  one.get("value").asText())
              : Protocol.removeCommands(hash, one.get("list").asText(), one.get("item").asText());
      List<List<String>> expected = new ArrayList<>();
      one.get("commands").forEach(command -> expected.add(strings(command)));
      assertEquals(expected, built);
    }
  }

  @Test
  void loadReportsBuildTheirWordsAndReadTheirReplies() {
    for (JsonNode one : table.get("load")) {
      Map<String, Double> factors = new LinkedHashMap<>();
      one.get("factors").forEach(pair -> factors.put(pair.get(0).asText(), pair.get(1).asDouble()));
      List<String> words =
          Protocol.reportCommand(
              one.get("service").asText(),
              one.get("instance").asText(),
              seconds(one.get("ttl")),
              factors);
      assertEquals(strings(one.get("words")), words);
    }
    for (JsonNode one : table.get("load_replies")) {
      LoadStanding standing = Protocol.standing((List<?>) reply(one.get("reply")));
      assertEquals(one.get("level").asInt(), standing.level());
      assertEquals(one.get("instances").asInt(), standing.instances());
      List<Double> shares = new ArrayList<>();
      for (double share : standing.shares()) {
        shares.add(share);
      }
      List<Double> expected = new ArrayList<>();
      one.get("shares").forEach(share -> expected.add(share.asDouble()));
      assertEquals(expected, shares);
    }
  }

  @Test
  void theLocalLimitReplaysEveryTrace() {
    JsonNode part = table.get("concurrency");
    assertEquals(
        options(part.get("defaults"), LimitOptions.DEFAULTS),
        LimitOptions.DEFAULTS,
        "the shipped defaults");
    for (JsonNode trace : part.get("traces")) {
      ConcurrencyLimit limit =
          new ConcurrencyLimit(options(trace.get("options"), LimitOptions.DEFAULTS));
      JsonNode events = trace.get("events");
      JsonNode expect = trace.get("expect");
      for (int step = 0; step < events.size(); step++) {
        JsonNode event = events.get(step);
        long at = event.get(0).asLong();
        Object decision = null;
        if (event.get(1).asText().equals("admit")) {
          Priority priority = Priority.parse(event.get(2).asText());
          long backlog = event.size() > 3 ? event.get(3).asLong() : 0;
          decision = limit.admit(priority, at, backlog);
        } else if (event.get(1).asText().equals("leave")) {
          limit.leave(at);
        } else if (event.get(1).asText().equals("back")) {
          limit.back(at);
        } else if (event.get(1).asText().equals("level")) {
          limit.shedByLevel(at);
        } else {
          String route = event.size() > 3 && !event.get(3).isNull() ? event.get(3).asText() : null;
          long backlog = event.size() > 4 ? event.get(4).asLong() : 0;
          limit.finish(event.get(2).asLong(), at, route, backlog);
        }
        JsonNode wanted = expect.get(step);
        String where = trace.get("name").asText() + ", step " + step + ": " + event;
        assertEquals(wanted.get(0).isNull() ? null : wanted.get(0).asBoolean(), decision, where);
        assertEquals(wanted.get(1).asDouble(), limit.limit(), 0.0, where);
        assertEquals(wanted.get(2).asBoolean(), limit.congested(), where);
      }
    }
  }

  /** {@code base} with the table's options over it. */
  static LimitOptions options(JsonNode spec, LimitOptions base) {
    double[] shares = base.shares();
    if (spec.has("shares")) {
      for (int index = 0; index < 4; index++) {
        shares[index] = spec.get("shares").get(index).asDouble();
      }
    }
    return new LimitOptions(
        spec.path("initial").asDouble(base.initial()),
        spec.path("floor").asDouble(base.floor()),
        spec.path("ceiling").asDouble(base.ceiling()),
        spec.path("interval_us").asLong(base.intervalUs()),
        spec.path("target_us").asLong(base.targetUs()),
        spec.path("enter").asInt(base.enter()),
        spec.path("deep").asDouble(base.deep()),
        spec.path("epoch_us").asLong(base.epochUs()),
        spec.path("decay").asDouble(base.decay()),
        shares,
        spec.path("sojourn").asDouble(base.sojourn()));
  }

  @Test
  void countsBuildTheirWordsAndReadTheirReplies() {
    for (JsonNode one : table.get("counts")) {
      Limiter spec = limiter(one.get("limiter"));
      assertEquals(strings(one.get("words")), Protocol.countsCommand(spec));
      Counts got = Protocol.counts(spec, (List<?>) reply(one.get("reply")));
      Map<String, Object> read = new LinkedHashMap<>();
      Map<String, Object> want = new LinkedHashMap<>();
      one.get("counts")
          .properties()
          .forEach(field -> want.put(field.getKey(), field.getValue().asDouble()));
      if (got instanceof Counts.LogCounts log) {
        read.put("count", (double) log.count());
        read.put("oldest_ends_in", seconds(log.oldestEndsIn()));
        read.put("newest_ends_in", seconds(log.newestEndsIn()));
      } else if (got instanceof Counts.WindowCounts window) {
        read.put("previous", (double) window.previous());
        read.put("previous_ends_in", seconds(window.previousEndsIn()));
        read.put("current", (double) window.current());
        read.put("current_ends_in", seconds(window.currentEndsIn()));
      }
      assertEquals(want, read);
    }
  }

  @Test
  void theTableSaysWhatItIsAndLeavesLuaToTheNginxPackage() {
    // `about` is read here (it names which package reads which part); `lua` is the nginx
    // package's own API, which tests/nginx.rs reads.
    assertEquals(true, table.get("about").asText().contains("lua"));
    assertEquals(true, table.get("lua").has("commands"));
  }
}
