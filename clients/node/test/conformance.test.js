// clients/conformance.json, the table every client package is tested against: the command
// words each limiter spec and option must produce, the result and HTTP fields each reply
// must give (calls whose limits change between them too), and the leases', RL.TOP's, the
// shared lists', the load reports' and the counts' words and replies (no server). Every part but `lua`, which the nginx package's test reads.
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");
const {
  commandFor,
  resultOf,
  throttle,
  window,
  log,
  load,
  slots,
  headers,
  leaseCommand,
  releaseCommand,
  renewCommand,
  leaseOf,
  addCommands,
  removeCommands,
  countsCommand,
  countsOf,
  topKeys,
} = require("..");
const { reportCommand, reportResult } = require("../load");
const { ConcurrencyLimit, LIMIT_DEFAULTS } = require("../concurrency");

const table = require("../../conformance.json");

// Every part this test reads; a part added to the table fails here until it is read.
const PARTS = [
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
  "lua",
];

/** The table's options (snake case, as every package's) in this package's names. */
const limitOptions = ({ interval_us: intervalUs, target_us: targetUs, epoch_us: epochUs, ...rest }) =>
  Object.fromEntries(Object.entries({ ...rest, intervalUs, targetUs, epochUs }).filter(([, v]) => v !== undefined));

function limiterOf({ kind, key, name, ...spec }) {
  const named = name === undefined ? {} : { name };
  if (kind === "throttle")
    return throttle(key, spec.max_burst, spec.count, spec.period, { warmup: spec.warmup ?? null, ...named });
  if (kind === "window")
    return window(key, spec.limit, spec.window, { algorithm: spec.algorithm ?? "SLIDING", ...named });
  if (kind === "load") return load(key, spec.priority);
  if (kind === "lease") return slots(key, spec.limit, spec.lease, named);
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

const words = (built) => built.map(String);

test("every part of the table is read", () => {
  assert.deepEqual(Object.keys(table).sort(), [...PARTS].sort());
});

function checkWords({ limiters, options, words: wanted }) {
  const { readOnly, ...rest } = optionsOf(options);
  const built = commandFor(limiters.map(limiterOf), rest, Boolean(readOnly));
  assert.deepEqual(words(built), wanted, JSON.stringify(options));
}

function checkReply({ limiters, options, reply, result, fields }) {
  const specs = limiters.map(limiterOf);
  const got = resultOf(reply, specs, optionsOf(options));
  const { each, shed_level: shedLevel, lease_id: leaseId, ...top } = result;
  assert.deepEqual(snake(got), top);
  assert.deepEqual([got.shedLevel, got.leaseId], [shedLevel, leaseId]);
  assert.deepEqual(got.each.map(snake), each);
  assert.deepEqual(headers(got, specs), fields);
}

test("every spec builds its words", () => {
  assert.ok(table.commands.length >= 10);
  table.commands.forEach(checkWords);
});

test("every reply gives its result and fields", () => {
  table.replies.forEach(checkReply);
});

test("calls whose limits change send them and read their replies", () => {
  assert.ok(table.changed_limits.length >= 5);
  for (const { steps } of table.changed_limits) {
    for (const step of steps) {
      checkWords(step);
      checkReply(step);
    }
  }
});

test("leases build their words and read their replies", () => {
  const built = {
    acquire: ({ key, limit, lease, quantity }) => leaseCommand(key, limit, lease, quantity),
    peek: ({ key, limit, lease, quantity }) => leaseCommand(key, limit, lease, quantity, true),
    release: ({ key, id }) => releaseCommand(key, id),
    renew: ({ key, id, lease }) => renewCommand(key, id, lease),
  };
  for (const spec of table.leases) assert.deepEqual(words(built[spec.call](spec)), spec.words);
  for (const { reply, allowed, id, remaining, retry_after: retryAfter } of table.lease_replies) {
    const lease = leaseOf(reply);
    assert.deepEqual(
      [lease.allowed, lease.id, lease.result.remaining, lease.result.retryAfter],
      [allowed, id, remaining, retryAfter],
    );
  }
});

test("RL.TOP merges every primary", () => {
  for (const { replies, count, rows } of table.top) {
    assert.deepEqual(
      topKeys(replies, count).map((row) => [row.key, row.refusals, row.error]),
      rows,
    );
  }
});

test("the lists change in one transaction", () => {
  for (const { change, hash, list, item, value, commands } of table.lists) {
    const built = change === "add" ? addCommands(hash, list, item, value) : removeCommands(hash, list, item);
    assert.deepEqual(built.map(words), commands);
  }
});

test("load reports build their words and read their replies", () => {
  for (const { service, instance, ttl, factors, words: wanted } of table.load) {
    assert.deepEqual(words(reportCommand(service, instance, ttl, Object.fromEntries(factors))), wanted);
  }
  for (const { reply, level, instances, shares } of table.load_replies) {
    assert.deepEqual(reportResult(reply), { level, instances, shares });
  }
});

test("counts build their words and read their replies", () => {
  const camel = (name) => name.replace(/_(\w)/g, (_, letter) => letter.toUpperCase());
  for (const { limiter, words: wanted, reply, counts } of table.counts) {
    const spec = limiterOf(limiter);
    assert.deepEqual(words(countsCommand(spec)), wanted);
    const got = countsOf(spec, reply);
    for (const [name, value] of Object.entries(counts)) assert.equal(got[camel(name)], value, name);
  }
});

test("the local limit replays every trace", () => {
  const { defaults, traces } = table.concurrency;
  assert.deepEqual(
    { ...LIMIT_DEFAULTS, shares: [...LIMIT_DEFAULTS.shares] },
    limitOptions(defaults),
    "the shipped defaults",
  );
  assert.ok(traces.length >= 3);
  for (const { name, options, events, expect } of traces) {
    const limit = new ConcurrencyLimit(limitOptions(options));
    events.forEach(([at, kind, value, more, backlog], step) => {
      let decision = null;
      if (kind === "admit") decision = limit.admit(value, at, more ?? 0);
      else if (kind === "leave") limit.leave(at);
      else if (kind === "back") limit.back(at);
      else if (kind === "level") limit.shedByLevel(at);
      else limit.finish(value, at, more ?? null, backlog ?? 0);
      assert.deepEqual([decision, limit.limit, limit.congested], expect[step], `${name}, step ${step}`);
    });
  }
});
