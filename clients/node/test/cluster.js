// The client on a Cluster (REDIS_URL: one of its nodes), over ioredis and node-redis: keys
// in every slot range, and several limiters in one hash slot. Run by tests/clients.rs.
"use strict";

const assert = require("node:assert/strict");
const Redis = require("ioredis");
const { createCluster } = require("redis");
const { RateLimiter, SharedLists, log, throttle } = require("..");

async function exercise(limiter, prefix) {
  for (let i = 0; i < 30; i++) {
    const limits = [log(`${prefix}:${i}`, 1, 60)];
    assert.equal((await limiter.check(limits)).allowed, true);
    assert.equal((await limiter.peek(limits)).allowed, false);
  }
  const both = [log(`{${prefix}}:a`, 2, 60), throttle(`{${prefix}}:b`, 0, 1, 60)];
  assert.equal((await limiter.check(both)).allowed, true);
  assert.equal((await limiter.check(both)).allowed, false);
  // RL.TOP from every primary, merged: the refused limiter's key once; peeks count nothing.
  const top = new Map((await limiter.top(1000)).map((row) => [row.key, row.refusals]));
  assert.equal(top.get(`{${prefix}}:b`), 1);
  assert.equal(top.has(`${prefix}:0`), false);
  for (let i = 0; i < 10; i++) await limiter.check([log(`${prefix}:refused:${i}`, 1, 60)]);
  for (let i = 0; i < 10; i++) await limiter.check([log(`${prefix}:refused:${i}`, 1, 60)]);
  const spread = new Map((await limiter.top(1000)).map((row) => [row.key, row.refusals]));
  for (let i = 0; i < 10; i++) assert.equal(spread.get(`${prefix}:refused:${i}`), 1);
}

/** The lists' writes on a Cluster: one transaction on the hash's node. */
async function lists(client, prefix) {
  const shared = new SharedLists(client, `${prefix}:lists`);
  await shared.add("deny", "203.0.113.7");
  await shared.remove("deny", "203.0.113.7");
  await shared.add("allow", "svc-a");
  assert.deepEqual(await shared.read(), { allow: { "svc-a": "1" } });
}

async function main() {
  const url = new URL(process.env.REDIS_URL);
  const io = new Redis.Cluster([{ host: url.hostname, port: Number(url.port) }]);
  await exercise(new RateLimiter(io), "ioredis");
  await lists(io, "ioredis");
  io.disconnect();
  const nodeRedis = await createCluster({ rootNodes: [{ url: process.env.REDIS_URL }] }).connect();
  await exercise(new RateLimiter(nodeRedis), "node-redis");
  await lists(nodeRedis, "node-redis");
  await nodeRedis.quit();
  console.log("ok");
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
