// The client over ioredis and node-redis, against a live server with the module.
"use strict";

const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const { after, before, test } = require("node:test");
const { createClient } = require("redis");
const Redis = require("ioredis");
const { RateLimiter, Quota, ServerUnavailable, SharedLists, throttle, window, log, headers } = require("..");
const { url, ioredis } = require("./helpers");

const prefix = `client:${randomUUID()}`;
let io;
let nodeRedis;
before(async () => {
  io = ioredis();
  nodeRedis = await createClient({ url }).connect();
});
after(async () => {
  io.disconnect();
  await nodeRedis.quit();
});

for (const [name, client] of [
  ["ioredis", () => io],
  ["node-redis", () => nodeRedis],
]) {
  test(`${name}: every option answers typed`, async () => {
    const limiter = new RateLimiter(client());
    const key = `${prefix}:${name}`;
    const gcra = throttle(`${key}:gcra`, 1, 1, 10);
    const first = await limiter.check([gcra]);
    assert.deepEqual(
      { ...first, resetAfter: Math.round(first.resetAfter) },
      {
        allowed: true,
        limit: 2,
        remaining: 1,
        retryAfter: null,
        resetAfter: 10,
        wait: 0,
        granted: null,
        each: [],
        failed: false,
        shadow: false,
        shedLevel: 0,
        leaseId: 0,
      },
    );
    await limiter.check([gcra]);
    // DELAY: the third waits its turn, 10 s on; a fourth would wait 20 s: refused with 5.
    const delayed = await limiter.check([gcra], { delay: 30 });
    assert.equal(delayed.allowed, true);
    assert.ok(Math.abs(delayed.wait - 10) < 0.5, `${delayed.wait}`);
    const refused = await limiter.check([gcra], { delay: 5 });
    assert.equal(refused.allowed, false);
    assert.ok(Math.abs(refused.retryAfter - 15) < 0.5, `${refused.retryAfter}`);
    // AT_MOST: what fits.
    const batch = window(`${key}:window`, 5, 60, { algorithm: "ANCHORED" });
    assert.equal((await limiter.check([batch], { quantity: 3, atMost: true })).granted, 3);
    assert.equal((await limiter.check([batch], { quantity: 3, atMost: true })).granted, 2);
    // FORCE: admitted, owed.
    const exact = log(`${key}:log`, 2, 60);
    const forced = await limiter.check([exact], { quantity: 3, force: true });
    assert.equal(forced.allowed, true);
    assert.equal((await limiter.peek([exact])).allowed, false);
    // Several limiters in one hash slot: each result, and the fields.
    const both = [log(`{${key}}:a`, 2, 60, { name: "a" }), window(`{${key}}:b`, 3, 60, { name: "b" })];
    const result = await limiter.check(both, { delay: 1 });
    assert.deepEqual(
      result.each.map((one) => one.remaining),
      [1, 2],
    );
    assert.equal(headers(result, both)["RateLimit-Policy"], '"a";q=2;w=60, "b";q=3;w=60');
  });

  test(`${name}: acquire sleeps the wait it is told, or refuses at once`, async () => {
    const limiter = new RateLimiter(client());
    const steady = throttle(`${prefix}:${name}:acquire`, 0, 1, 1);
    assert.equal((await limiter.acquire([steady], { timeout: 5 })).wait, 0);
    const started = Date.now();
    const second = await limiter.acquire([steady], { timeout: 5 });
    assert.equal(second.allowed, true);
    assert.ok(Date.now() - started >= second.wait * 1000 - 20, "it slept the wait");
    assert.equal((await limiter.acquire([steady], { timeout: 0.1 })).allowed, false);
  });

  test(`${name}: leases`, async () => {
    const limiter = new RateLimiter(client());
    const key = `${prefix}:${name}:lease`;
    const peeked = await limiter.peekLease(key, 1, 30);
    assert.deepEqual([peeked.allowed, peeked.id, peeked.result.remaining], [true, 0, 0]);
    const lease = await limiter.acquireLease(key, 1, 30);
    assert.equal(lease.allowed, true);
    assert.ok(lease.id > 0);
    assert.equal((await limiter.peekLease(key, 1, 30)).allowed, false);
    assert.equal((await limiter.acquireLease(key, 1, 30)).allowed, false);
    assert.equal(await limiter.renewLease(key, lease.id, 60), true);
    assert.equal(await limiter.releaseLease(key, lease.id), true);
    assert.equal(await limiter.releaseLease(key, lease.id), false);
  });

  test(`${name}: counts of a window and a log`, async () => {
    const limiter = new RateLimiter(client());
    // An hour's clock-aligned window: a minute's would end between the calls once in a while.
    const fixed = window(`${prefix}:${name}:fixed`, 10, 3600, { algorithm: "FIXED" });
    const exact = log(`${prefix}:${name}:exact`, 10, 60);
    await limiter.check([fixed], { quantity: 3 });
    await limiter.check([exact], { quantity: 3 });
    const counts = await limiter.counts(fixed);
    assert.deepEqual([counts.previous, counts.previousEndsIn, counts.current], [0, 0, 3]);
    assert.ok(counts.currentEndsIn > 0 && counts.currentEndsIn <= 3600);
    const logCounts = await limiter.counts(exact);
    assert.equal(logCounts.count, 3);
    assert.ok(Math.abs(logCounts.oldestEndsIn - 60) <= 1);
    assert.deepEqual(await limiter.counts(log(`${prefix}:${name}:none`, 10, 60)), {
      count: 0,
      oldestEndsIn: 0,
      newestEndsIn: 0,
    });
    await assert.rejects(limiter.counts(throttle(`${prefix}:${name}:gcra`, 1, 1, 1)), RangeError);
  });
}

for (const [name, client] of [
  ["ioredis", () => io],
  ["node-redis", () => nodeRedis],
]) {
  test(`${name}: shared lists are seen after the next version check`, async () => {
    let now = 0;
    const hash = `${prefix}:${name}:lists`;
    const writer = new SharedLists(client(), hash);
    const reader = new SharedLists(client(), hash, { every: 1, clock: () => now });
    assert.deepEqual(await reader.read(), {});
    await writer.add("deny", "203.0.113.7");
    await writer.add("limit", "/api", "5 1 1000");
    assert.deepEqual(await reader.read(), {}, "not before the next check");
    now = 1;
    assert.deepEqual(await reader.read(), { deny: { "203.0.113.7": "1" }, limit: { "/api": "5 1 1000" } });
    await writer.remove("deny", "203.0.113.7");
    now = 2;
    assert.deepEqual(await reader.read(), { limit: { "/api": "5 1 1000" } });
    assert.equal(await io.hget(hash, "version"), "3");
    // Each change is one transaction: the item and the version, never one alone.
    const before = await commandCalls("exec");
    await writer.add("allow", "svc-a");
    await writer.remove("allow", "svc-a");
    assert.equal((await commandCalls("exec")) - before, 2);
  });
}

/** How many times the server ran a built-in `command` (INFO commandstats). */
async function commandCalls(command) {
  const line = (await io.info("commandstats")).split("\r\n").find((one) => one.startsWith(`cmdstat_${command}:`));
  return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
}

test("leases follow the failure policy", async () => {
  const gone = new Redis({ port: 1, retryStrategy: () => 1000, maxRetriesPerRequest: null });
  gone.on("error", () => {});
  const quiet = { error() {} };
  try {
    const allowing = new RateLimiter(gone, { onError: "allow", cooldown: 30_000, logger: quiet });
    const granted = await allowing.acquireLease("node:gone:lease", 2, 10);
    assert.deepEqual([granted.allowed, granted.id, granted.result.failed], [true, 0, true]);
    assert.equal(await allowing.renewLease("node:gone:lease", 7, 10), true, "kept under allow");
    assert.equal(await allowing.releaseLease("node:gone:lease", 7), false, "not released");
    const denying = new RateLimiter(gone, { onError: "deny", cooldown: 30_000, logger: quiet });
    const refused = await denying.acquireLease("node:gone:lease", 2, 10);
    assert.deepEqual([refused.allowed, refused.id], [false, 0]);
    assert.ok(Math.abs(refused.result.retryAfter - 30) < 1);
    assert.equal(await denying.renewLease("node:gone:lease", 7, 10), false, "given up under deny");
    const throwing = new RateLimiter(gone, { logger: quiet });
    await assert.rejects(throwing.acquireLease("node:gone:lease", 2, 10), ServerUnavailable);
  } finally {
    gone.disconnect();
  }
});

test("a client that gives up on its own is a failure, whatever its error says", async () => {
  // ioredis rejects with MaxRetriesPerRequestError, whose text names no connection error.
  const gone = new Redis({ port: 1, retryStrategy: () => 1000, maxRetriesPerRequest: 0 });
  gone.on("error", () => {});
  try {
    const allowing = new RateLimiter(gone, { onError: "allow", logger: { error() {} } });
    const decided = await allowing.check([log("node:gone", 5, 60)]);
    assert.deepEqual([decided.allowed, decided.failed], [true, true]);
  } finally {
    gone.disconnect();
  }
});

test("top() says when the server counts nothing, then lists refused keys", async () => {
  const limiter = new RateLimiter(io);
  await io.config("SET", "ratelimit.top-keys", "0");
  await assert.rejects(limiter.top(), /RL.TOP is off on this server/);
  await io.config("SET", "ratelimit.top-keys", "128");
  try {
    const key = `${prefix}:top`;
    for (let i = 0; i < 3; i++) await limiter.check([log(key, 1, 60)]);
    const rows = (await limiter.top(128)).map((row) => [row.key, row.refusals, row.error]);
    assert.deepEqual(
      rows.find(([name]) => name === key),
      [key, 2, 0],
    );
  } finally {
    await io.config("SET", "ratelimit.top-keys", "0");
  }
});

test("onError decides when the server is gone, at once within the cool-down", async () => {
  const gone = new Redis({ port: 1, retryStrategy: () => 1000, maxRetriesPerRequest: null });
  gone.on("error", () => {});
  const quiet = { error() {} };
  try {
    const limits = [log("node:gone", 5, 60)];
    const allowing = new RateLimiter(gone, { onError: "allow", logger: quiet });
    assert.deepEqual([(await allowing.check(limits)).allowed, (await allowing.check(limits)).failed], [true, true]);
    const denying = new RateLimiter(gone, { onError: "deny", cooldown: 30_000, logger: quiet });
    const refused = await denying.check(limits);
    assert.deepEqual([refused.allowed, refused.failed], [false, true]);
    assert.ok(Math.abs(refused.retryAfter - 30) < 1);
    await assert.rejects(new RateLimiter(gone, { logger: quiet }).check(limits), ServerUnavailable);
  } finally {
    gone.disconnect();
  }
});

test("a frozen server costs the timeout, then the cool-down answers at once", async () => {
  // A listener that never answers, as a server stopped with SIGSTOP.
  const net = require("node:net");
  const silent = net.createServer(() => {});
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const frozen = new Redis({ port: silent.address().port, maxRetriesPerRequest: null, enableReadyCheck: false });
  frozen.on("error", () => {});
  try {
    const limiter = new RateLimiter(frozen, { timeout: 200, onError: "allow", cooldown: 5000, logger: { error() {} } });
    let sent = 0;
    const send = frozen.sendCommand.bind(frozen);
    frozen.sendCommand = (...args) => {
      sent += 1;
      return send(...args);
    };
    // The deadline is the claim: decided by the policy once it passes (a margin for a busy
    // machine above it, never below).
    const started = Date.now();
    assert.equal((await limiter.check([log("node:frozen", 5, 60)])).failed, true);
    const waited = Date.now() - started;
    assert.ok(waited >= 190 && waited < 200 + 5_000, `${waited} ms`);
    // Within the cool-down, no call is tried.
    const before = sent;
    for (let i = 0; i < 100; i++) await limiter.check([log("node:frozen", 5, 60)]);
    assert.equal(sent, before, "no call within the cool-down");
    assert.ok(before >= 1, "the first call was sent");
  } finally {
    frozen.disconnect();
    silent.close();
  }
});

test("the deny cache answers a flood of a refused key with one call", async () => {
  const key = `${prefix}:flood`;
  const limiter = new RateLimiter(io, { denyCache: 100 });
  const limits = [log(key, 2, 60)];
  assert.deepEqual([(await limiter.check(limits)).allowed, (await limiter.check(limits)).allowed], [true, true]);
  const calls = async () =>
    Number(
      /calls=(\d+)/.exec(
        (await io.info("ratelimit")).split("\n").find((line) => line.startsWith("ratelimit_rl.log:")),
      )[1],
    );
  const before = await calls();
  const answers = [];
  for (let i = 0; i < 1000; i++) answers.push(await limiter.check(limits));
  assert.equal((await calls()) - before, 1);
  assert.ok(answers.every((one) => !one.allowed));
  const server = await new RateLimiter(io).peek(limits);
  const last = answers.at(-1);
  assert.deepEqual([last.limit, last.remaining], [server.limit, server.remaining]);
  assert.ok(Math.abs(last.retryAfter - server.retryAfter) < 0.05);
});

test("quota leases: batch 1 is a call per decision; a batch is given back on close", async () => {
  const key = `${prefix}:quota`;
  const limits = [log(key, 3, 60)];
  const one = new Quota(new RateLimiter(io), limits, { batch: 1 });
  const taken = [];
  for (let i = 0; i < 4; i++) taken.push(await one.take());
  assert.deepEqual(taken, [true, true, true, false]);
  assert.equal(one.calls, 4);
  await io.del(key);
  const many = new Quota(new RateLimiter(io), limits, { batch: 3, hold: 60 });
  assert.equal(await many.take(), true);
  assert.equal((await new RateLimiter(io).counts(limits[0])).count, 3);
  await many.close();
  assert.equal((await new RateLimiter(io).counts(limits[0])).count, 1);
  // Unused units go back after hold, with no request to notice.
  const held = new Quota(new RateLimiter(io), [log(`${key}:hold`, 10, 60)], { batch: 5, hold: 0.2 });
  assert.equal(await held.take(), true);
  const count = async () => (await new RateLimiter(io).counts(log(`${key}:hold`, 10, 60))).count;
  assert.equal(await count(), 5);
  // Waited for, bounded at 10 s (fifty times the hold): the four go back, the one spent stays.
  const end = Date.now() + 10_000;
  while ((await count()) !== 1 && Date.now() < end) await new Promise((resolve) => setImmediate(resolve));
  assert.equal(await count(), 1);
});

test("quota leases: a binding quota asks the server once per half batch, not once per take", async () => {
  const key = `${prefix}:quota-refused`;
  let now = 1_000_000;
  const quota = new Quota(new RateLimiter(io), [log(key, 3, 60)], { batch: 2, hold: 600, clock: () => now });
  const taken = [];
  for (let i = 0; i < 1000; i++) taken.push(await quota.take());
  // Two grants (2, then the 1 left: the limit binds), then half a batch (1) that the server
  // schedules when the log has room, in 60 s: nothing is spent or asked before.
  assert.deepEqual(taken.slice(0, 4), [true, true, true, false]);
  assert.ok(taken.slice(3).every((one) => !one));
  assert.equal(quota.calls, 3);
  // Then (by the quota's clock) it spends what the server scheduled, without a call.
  now += 61_000;
  assert.equal(await quota.take(), true);
  assert.equal(quota.calls, 3);
  // Another process finds the log full until then: one refusal, then no call.
  const later = new Quota(new RateLimiter(io), [log(key, 3, 60)], { batch: 2, clock: () => now });
  for (let i = 0; i < 100; i++) assert.equal(await later.take(), false);
  assert.equal(later.calls, 1);
});

test("quota leases: a binding limit costs a call per half batch", async () => {
  // 1,000 a second in bursts of 100, leases of 50: past the burst, the limit binds.
  const quota = new Quota(new RateLimiter(io), [throttle(`${prefix}:quota-binding`, 99, 1000, 1)], {
    batch: 50,
    hold: 1,
  });
  while (quota.admitted < 600) {
    if (!(await quota.take())) await new Promise((resolve) => setTimeout(resolve, 1));
  }
  // The burst in two calls, a third that gets what refilled, then half a batch a call.
  assert.ok(quota.calls <= quota.admitted / 25 + 3, `${quota.calls} calls for ${quota.admitted}`);
  await quota.close();
});

test("quota leases: several processes admit at most the limit plus N x batch in any window", async () => {
  const { fork } = require("node:child_process");
  const [limit, windowSeconds, batch, processes] = [40, 0.5, 10, 4];
  const key = `${prefix}:quota-bound`;
  const runs = await Promise.all(
    Array.from(
      { length: processes },
      () =>
        new Promise((resolve, reject) => {
          const child = fork(`${__dirname}/quota-worker.js`, [key, limit, windowSeconds, batch, 2], {
            env: process.env,
          });
          child.on("message", resolve);
          child.on("error", reject);
        }),
    ),
  );
  const times = runs.flat().sort((a, b) => a - b);
  assert.ok(times.length > limit);
  let start = 0;
  let worst = 0;
  for (let end = 0; end < times.length; end++) {
    while (times[start] <= times[end] - windowSeconds * 1000) start++;
    worst = Math.max(worst, end - start + 1);
  }
  assert.ok(worst <= limit + processes * batch, `${worst} in one window`);
});
