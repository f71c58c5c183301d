// clients/conformance.json, the table every client package is tested against: the command
// words each limiter spec and option must produce, and the result and HTTP fields each reply
// must give (no server).
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");
const { commandFor, resultOf, throttle, window, log, headers } = require("..");

const table = require("../../conformance.json");

function limiterOf({ kind, key, name, ...spec }) {
  const named = name === undefined ? {} : { name };
  if (kind === "throttle")
    return throttle(key, spec.max_burst, spec.count, spec.period, { warmup: spec.warmup ?? null, ...named });
  if (kind === "window")
    return window(key, spec.limit, spec.window, { algorithm: spec.algorithm ?? "SLIDING", ...named });
  return log(key, spec.limit, spec.window, named);
}

const optionsOf = ({ at_most: atMost, read_only: readOnly, ...rest }) => ({ ...rest, atMost, readOnly });

const snake = (result) => ({
  allowed: result.allowed,
  limit: result.limit,
  remaining: result.remaining,
  retry_after: result.retryAfter,
  reset_after: result.resetAfter,
  wait: result.wait,
  granted: result.granted,
});

test("every spec builds its words", () => {
  assert.ok(table.commands.length >= 10);
  for (const { limiters, options, words } of table.commands) {
    const { readOnly, ...rest } = optionsOf(options);
    const built = commandFor(limiters.map(limiterOf), rest, Boolean(readOnly));
    assert.deepEqual(built.map(String), words, JSON.stringify(options));
  }
});

test("every reply gives its result and fields", () => {
  for (const { limiters, options, reply, result, fields } of table.replies) {
    const specs = limiters.map(limiterOf);
    const got = resultOf(reply, specs, optionsOf(options));
    const { each, ...top } = result;
    assert.deepEqual(snake(got), top);
    assert.deepEqual(got.each.map(snake), each);
    assert.deepEqual(headers(got, specs), fields);
  }
});
