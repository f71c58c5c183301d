// The client over ioredis and node-redis, against a live server with the module.
"use strict";

const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const { after, before, test } = require("node:test");
const { createClient } = require("redis");
const { RateLimiter, SharedLists, throttle, window, log, headers } = require("..");
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

for (const [name, client] of [["ioredis", () => io], ["node-redis", () => nodeRedis]]) {
  test(`${name}: every option answers typed`, async () => {
    const limiter = new RateLimiter(client());
    const key = `${prefix}:${name}`;
    const gcra = throttle(`${key}:gcra`, 1, 1, 10);
    const first = await limiter.check([gcra]);
    assert.deepEqual(
      { ...first, resetAfter: Math.round(first.resetAfter) },
      { allowed: true, limit: 2, remaining: 1, retryAfter: null, resetAfter: 10, wait: 0, granted: null, each: [] },
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
    const batch = window(`${key}:window`, 5, 60, { algorithm: "FIXED" });
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
    assert.deepEqual(result.each.map((one) => one.remaining), [1, 2]);
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
    const fixed = window(`${prefix}:${name}:fixed`, 10, 60, { algorithm: "FIXED" });
    const exact = log(`${prefix}:${name}:exact`, 10, 60);
    await limiter.check([fixed], { quantity: 3 });
    await limiter.check([exact], { quantity: 3 });
    const counts = await limiter.counts(fixed);
    assert.deepEqual([counts.previous, counts.previousEndsIn, counts.current], [0, 0, 3]);
    assert.ok(counts.currentEndsIn > 0 && counts.currentEndsIn <= 60);
    const logCounts = await limiter.counts(exact);
    assert.equal(logCounts.count, 3);
    assert.ok(Math.abs(logCounts.oldestEndsIn - 60) <= 1);
    assert.deepEqual(await limiter.counts(log(`${prefix}:${name}:none`, 10, 60)),
      { count: 0, oldestEndsIn: 0, newestEndsIn: 0 });
    await assert.rejects(limiter.counts(throttle(`${prefix}:${name}:gcra`, 1, 1, 1)), RangeError);
  });
}

for (const [name, client] of [["ioredis", () => io], ["node-redis", () => nodeRedis]]) {
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
  });
}
