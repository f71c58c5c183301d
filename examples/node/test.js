// Tests of the helper against a live server with the module (REDIS_URL), as `make test` runs
// them: `node --test examples/node/`.
"use strict";

const assert = require("node:assert/strict");
const { randomUUID } = require("node:crypto");
const { after, before, test } = require("node:test");
const Redis = require("ioredis");
const {
  throttle, window, log, check, acquireSlot, acquire, release, renew, headers,
} = require("./ratelimit");

let redis;
const prefix = `test:${randomUUID()}`;
before(() => {
  redis = new Redis(process.env.REDIS_URL);
});
after(() => redis.disconnect());

const near = (actual, expected) => assert.ok(Math.abs(actual - expected) <= 0.5, `${actual} vs ${expected}`);

test("a single limiter reads as a typed result", async () => {
  const limiter = throttle(`${prefix}:gcra`, 1, 1, 60);
  assert.deepEqual(await check(redis, [limiter]), {
    allowed: true, limit: 2, remaining: 1, retryAfter: null, resetAfter: 60, each: [],
  });
  const second = await check(redis, [limiter]);
  assert.equal(second.remaining, 0);
  near(second.resetAfter, 120);
  const refused = await check(redis, [limiter]);
  assert.equal(refused.allowed, false);
  near(refused.retryAfter, 60);
  assert.equal((await check(redis, [limiter], 3)).retryAfter, null);
});

test("windows and logs take their algorithm, quantity and refunds", async () => {
  const buckets = window(`${prefix}:buckets`, 10, 60, "BUCKETS 6");
  assert.equal((await check(redis, [buckets], 4)).remaining, 6);
  assert.equal((await check(redis, [buckets], 7)).allowed, false);
  const limiter = log(`${prefix}:log`, 3, 60);
  assert.equal((await check(redis, [limiter], 3)).remaining, 0);
  assert.equal((await check(redis, [limiter], 2, { refund: true })).remaining, 2);
});

test("several limiters are all or nothing, with each result", async () => {
  const limits = [log(`${prefix}:minute`, 2, 60, "minute"), log(`${prefix}:hour`, 3, 3600, "hour")];
  const first = await check(redis, limits);
  assert.deepEqual(first.each.map((one) => one.remaining), [1, 2]);
  assert.deepEqual([first.limit, first.remaining], [2, 1]);
  await check(redis, limits);
  const refused = await check(redis, limits);
  assert.equal(refused.allowed, false);
  near(refused.retryAfter, 60);
  assert.equal((await check(redis, [limits[1]], 0)).remaining, 1);
});

test("the header fields name each policy", async () => {
  const limits = [
    window(`${prefix}:hminute`, 100, 60, "FIXED", "minute"),
    throttle(`${prefix}:hburst`, 4, 1, 1, "burst"),
  ];
  const result = await check(redis, limits);
  const fields = headers(result, limits);
  assert.equal(fields["RateLimit-Policy"], '"minute";q=100;w=60, "burst";q=5;w=5');
  assert.match(fields.RateLimit, /^"minute";r=99;t=\d+, "burst";r=4;t=1$/);
  assert.equal(fields["Retry-After"], undefined);
  assert.equal(fields["RateLimit-Limit"], undefined);
  const legacy = headers(result, limits, { legacy: true });
  assert.deepEqual([legacy["RateLimit-Limit"], legacy["RateLimit-Remaining"]], ["5", "4"]);
  await check(redis, [limits[1]], 4);
  assert.equal(headers(await check(redis, limits), limits)["Retry-After"], "1");
});

test("leases are taken, freed and renewed", async () => {
  const key = `${prefix}:workers`;
  const lease = await acquire(redis, key, 1, 30);
  assert.ok(lease.allowed && lease.id > 0);
  const refused = await acquire(redis, key, 1, 30);
  assert.deepEqual([refused.allowed, refused.id], [false, 0]);
  near(refused.result.retryAfter, 30);
  assert.equal(await renew(redis, key, lease.id, 60), true);
  assert.equal(await release(redis, key, lease.id), true);
  assert.equal(await release(redis, key, lease.id), false);
  assert.equal(await renew(redis, key, lease.id, 60), false);
});

test("acquireSlot sleeps the wait it is told, or refuses at once", async () => {
  // One every second, no burst: the second request's turn comes in a second.
  const limiter = throttle(`${prefix}:slot`, 0, 1, 1);
  const first = await acquireSlot(redis, [limiter], 1, { timeout: 5 });
  assert.equal(first.allowed, true);
  assert.equal(first.wait, 0);
  const started = Date.now();
  const second = await acquireSlot(redis, [limiter], 1, { timeout: 5 });
  assert.equal(second.allowed, true);
  near(second.wait, 1);
  assert.ok(Date.now() - started >= second.wait * 1000 - 20, "it slept the wait");
  const third = await acquireSlot(redis, [limiter], 1, { timeout: 0.1 });
  assert.equal(third.allowed, false);
  assert.equal(third.wait, 0);
});

test("errors are Redis errors", async () => {
  await assert.rejects(check(redis, [throttle(`${prefix}:bad`, 1, 0, 60)]), /count must be positive/);
});
